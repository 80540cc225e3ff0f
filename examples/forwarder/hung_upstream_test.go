package main

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestHungUpstreamLoad reproduces a forwarder whose two upstreams are a
// real opentracker and a TCP server that accepts connections and never
// answers, under a steady client load, and reports how many announces the
// healthy upstream received and how many client announces were refused.
// It is a measurement, not a check: it runs only with
// FORWARDER_HUNG_UPSTREAM set to the run's length (e.g. 60s), and needs
// opentracker (apt-get install opentracker). FORWARDER_HUNG_RATE sets the
// client announces per second (default 650); FORWARDER_HUNG_BOTH=1 runs
// with two healthy upstreams instead, for the baseline. Everything listens
// on 127.0.0.1 and is stopped by the test.
func TestHungUpstreamLoad(t *testing.T) {
	length, err := time.ParseDuration(os.Getenv("FORWARDER_HUNG_UPSTREAM"))
	if err != nil || length <= 0 {
		t.Skip("set FORWARDER_HUNG_UPSTREAM=60s to run this measurement")
	}
	rate := 650
	if v := os.Getenv("FORWARDER_HUNG_RATE"); v != "" {
		rate, err = strconv.Atoi(v)
		if err != nil || rate < 1 {
			t.Fatalf("FORWARDER_HUNG_RATE=%q", v)
		}
	}
	bin, err := exec.LookPath("opentracker")
	if err != nil {
		t.Skip("opentracker not installed")
	}
	const torrents = 200_000
	hashes := make([][sha1.Size]byte, torrents)
	for i := range hashes {
		hashes[i] = sha1.Sum([]byte(strconv.Itoa(i)))
	}
	healthy := startOpentracker(t, bin, hashes)
	second := "hung=http://" + blackHole(t) + "/announce"
	if os.Getenv("FORWARDER_HUNG_BOTH") == "1" {
		second = "healthy2=http://" + startOpentracker(t, bin, hashes) + "/announce"
	}

	listen := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- serve(ctx, DefaultQueueConfig(), settings{listen: listFlag{vals: []string{listen}}, interval: 30 * time.Minute, timeout: 10 * time.Second, maxPeers: defaultMaxPeers,
			upstreams: []string{"healthy=http://" + healthy + "/announce", second}}, io.Discard)
	}()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	waitListening(t, listen)
	before := announces(t, healthy)

	// The clients: rate announces a second, each of a random torrent by a
	// new peer, from 64 connections.
	var sent, refused, failed atomic.Int64
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	jobs := make(chan int, 1024)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range jobs {
				h := hashes[rand.N(torrents)]
				q := fmt.Sprintf("info_hash=%s&peer_id=-QK0001-%012d&port=%d&uploaded=0&downloaded=0&left=100&compact=1",
					url.QueryEscape(string(h[:])), i, 10000+i%50000)
				resp, err := client.Get("http://" + listen + "/announce?" + q)
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if strings.Contains(string(body), "failure reason") {
					refused.Add(1)
				}
			}
		})
	}
	tick := time.NewTicker(10 * time.Millisecond)
	end := time.Now().Add(length)
	for n := 0; time.Now().Before(end); {
		<-tick.C
		for range rate / 100 {
			n++
			jobs <- n
		}
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	got := announces(t, healthy) - before
	t.Logf("%s at %d announces/s: healthy upstream received %d announces; clients sent %d, refused %d (%.1f %%), failed %d",
		length, rate, got, sent.Load(), refused.Load(), 100*float64(refused.Load())/float64(max(sent.Load(), 1)), failed.Load())
}

// startOpentracker starts opentracker on a free 127.0.0.1 port with
// hashes whitelisted and returns its address; it is killed by PID at the
// end of the test.
func startOpentracker(t *testing.T, bin string, hashes [][sha1.Size]byte) string {
	dir, err := os.MkdirTemp("", "ot")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var wl strings.Builder
	for _, h := range hashes {
		fmt.Fprintf(&wl, "%x\n", h)
	}
	for name, text := range map[string]string{"wl.txt": wl.String(), "ot.conf": "access.whitelist /wl.txt\naccess.stats 127.0.0.1\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	args := []string{"-i", "127.0.0.1", "-p", port, "-P", port, "-f", filepath.Join(dir, "ot.conf")}
	if os.Geteuid() == 0 {
		args = append(args, "-u", "nobody", "-d", dir) // it will not run as root; it chroots into dir
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitListening(t, addr)
	return addr
}

var announceCount = regexp.MustCompile(`<tcp>\s*<accept>\d+</accept>\s*<announce>(\d+)</announce>`)

// announces returns the number of HTTP announces opentracker at addr has
// served.
func announces(t *testing.T, addr string) int {
	resp, err := http.Get("http://" + addr + "/stats?mode=everything")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := announceCount.FindSubmatch(body)
	if m == nil {
		t.Fatalf("no announce count in opentracker's stats: %.200s", body)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// blackHole listens on 127.0.0.1, accepts connections and never answers.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitListening polls addr until it accepts a connection, for at most 10 s.
func waitListening(t *testing.T, addr string) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("%s does not listen", addr)
		}
	}
}
