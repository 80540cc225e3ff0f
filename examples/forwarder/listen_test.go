package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestListenTakesSeveralAddresses(t *testing.T) {
	_, s, err := parseArgs([]string{"-upstream", "http://127.0.0.1:1/announce"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:6969"}, s.listen.vals, "the default")

	_, s, err = parseArgs([]string{"-upstream", "http://127.0.0.1:1/announce",
		"-listen", "127.0.0.1:1,[::1]:1", "--listen", " [::1]:2 "}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:1", "[::1]:1", "[::1]:2"}, s.listen.vals, "comma-separated and repeated")

	t.Setenv("FORWARDER_LISTEN", "127.0.0.1:3,[::1]:3")
	_, s, err = parseArgs([]string{"-upstream", "http://127.0.0.1:1/announce"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:3", "[::1]:3"}, s.listen.vals, "the variable is comma-separated too")
	_, s, err = parseArgs([]string{"-upstream", "http://127.0.0.1:1/announce", "-listen", "127.0.0.1:4"}, &bytes.Buffer{})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:4"}, s.listen.vals, "a flag replaces the variable's list")

	_, _, err = parseArgs([]string{"-upstream", "http://127.0.0.1:1/announce", "-listen", "nonsense"}, &bytes.Buffer{})
	assert.ErrorContains(t, err, "nonsense")
}

// syncBuffer is a log sink that tests read while the server writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// One server-mode forwarder answers on an IPv4 and an IPv6 address, and
// -v adds every job's outcome to its log; with -http std (the first
// round) as with the fast path.
func TestServeOnIPv4AndIPv6(t *testing.T) {
	for _, verbose := range []bool{false, true} {
		up, err := startSimServer(newSimTracker(simFast))
		require.NoError(t, err)
		t.Cleanup(up.Close)
		addrs := []string{"127.0.0.1:0", "[::1]:0"}
		if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
			t.Logf("::1 unavailable (%v): IPv4 only", err)
			addrs = addrs[:1]
		} else {
			ln.Close()
		}
		lns, err := listenAll(addrs)
		require.NoError(t, err)
		qc := DefaultQueueConfig()
		s := settings{upstreams: []string{"up=" + up.URL}, interval: time.Minute, timeout: 5 * time.Second, verbose: verbose}
		if !verbose {
			s.http = httpStd
		}
		var logs syncBuffer
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- serveOn(ctx, qc, s, lns, &logs) }()

		for i, ln := range lns {
			base := "http://" + ln.Addr().String()
			r := getAnnounce(t, base+"/announce?"+clientQuery(i+1, i+1, 7001+i, nil))
			assert.Empty(t, r.Failure, ln.Addr())
		}
		waitStats(t, "http://"+lns[0].Addr().String(), func(done int) bool { return done >= len(lns) })
		cancel()
		require.NoError(t, <-done)
		text := logs.String()
		for _, ln := range lns {
			assert.Contains(t, text, "addr="+ln.Addr().String())
		}
		if verbose {
			assert.Contains(t, text, `msg="job done"`, "-v logs every job's outcome")
		} else {
			assert.NotContains(t, text, `msg="job done"`)
		}
	}
}

// getAnnounce fetches an announce URL and decodes the answer.
func getAnnounce(t *testing.T, url string) reply {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, err = buf.ReadFrom(resp.Body)
	require.NoError(t, err)
	var r reply
	require.NoError(t, bencode.Unmarshal(buf.Bytes(), &r), "body %q", buf.String())
	return r
}

// waitStats polls a live server's /stats until ok accepts its done count:
// a real server, polled on a ticker with a deadline.
func waitStats(t *testing.T, base string, ok func(done int) bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		resp, err := http.Get(base + "/stats?format=json")
		require.NoError(t, err)
		var st struct {
			Done int `json:"done"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		require.NoError(t, err)
		if ok(st.Done) {
			return
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("stats never satisfied the condition (done=%d)", st.Done)
		}
	}
}

// acceptOne connects to ln, sends a byte (a deferred accept waits for
// data) and returns the server's side of the connection.
func acceptOne(t *testing.T, ln net.Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	_, err = c.Write([]byte("G"))
	require.NoError(t, err)
	sc, err := ln.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { sc.Close() })
	return sc
}
