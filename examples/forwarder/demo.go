package main

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/queuekit/queue"
)

// The demo: simulated upstreams and clients on 127.0.0.1, a live status
// line per second, and a summary. Its queue preset is small and its
// thresholds low so that, within 20 seconds, every mechanism shows:
// worker scaling, throttling, rate limiting, suspension and disabling.

// demoQueueConfig is the demo's preset; flags given on the command line
// override it.
func demoQueueConfig() queue.Config {
	c := queue.DefaultConfig()
	c.QueueSize = 2000
	c.Workers = 4
	c.MaxWorkers = 32
	c.ThrottleTopN = 4
	c.RateLimitPerSec = 40
	c.RateLimitBurst = 40
	c.SuspendSeconds = 6
	c.RetryBaseMs = 500
	return c
}

// demoUpstreams are the simulated upstreams, by name and behaviour.
var demoUpstreams = []struct{ name, kind string }{
	{"fast-1", simFast}, {"fast-2", simFast}, {"fast-3", simFast}, {"fast-4", simFast},
	{"udp-1", "udp"},
	{"slow-1", simSlow}, {"slow-2", simSlow}, {"slow-3", simSlow},
	{"busy-429", sim429}, {"gone-404", sim404}, {"retry-in", simRetryIn}, {"flaky", simFlaky},
}

// demoLoad is the request rate (announces per second) over the demo's
// run, as a share of its length: a quiet start, a surge, a calm end.
func demoLoad(elapsed, total time.Duration) int {
	switch f := float64(elapsed) / float64(total); {
	case f < 0.15:
		return 30
	case f < 0.70:
		return 160
	default:
		return 15
	}
}

func runDemo(ctx context.Context, qc queue.Config, s settings, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, s.demo)
	defer cancel()
	fmt.Fprintf(out, "demo: %d simulated upstreams and a load generator on 127.0.0.1 for %s\n", len(demoUpstreams), s.demo)
	fmt.Fprintf(out, "queue: size %d, workers %d..%d, scale at %d%%, throttle at %d%% to %d upstreams, rate limit at %d%% (%g/s, burst %d), suspend %ds\n\n",
		qc.QueueSize, qc.Workers, max(qc.MaxWorkers, 2*qc.Workers), qc.ScaleThresholdPct, qc.ThrottleThresholdPct, qc.ThrottleTopN,
		qc.RateLimitThresholdPct, qc.RateLimitPerSec, qc.RateLimitBurst, qc.SuspendSeconds)

	var sims []*simServer
	var udp *simUDPTracker
	defer func() {
		for _, sv := range sims {
			sv.Close()
		}
		if udp != nil {
			udp.Close()
		}
	}()
	client := newHTTPClient(2 * time.Second)
	var ups []*Upstream
	for _, d := range demoUpstreams {
		var spec string
		if d.kind == "udp" {
			var err error
			if udp, err = startSimUDP(); err != nil {
				return err
			}
			spec = d.name + "=udp://" + udp.Addr
		} else {
			sv, err := startSimServer(newSimTracker(d.kind))
			if err != nil {
				return err
			}
			sv.Delay = 150 * time.Millisecond
			sims = append(sims, sv)
			spec = d.name + "=" + sv.URL
		}
		up, err := ParseUpstream(spec, client)
		if err != nil {
			return err
		}
		up.Kind = d.kind
		ups = append(ups, up)
	}

	logger := slog.New(slog.DiscardHandler)
	if s.verbose {
		logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	f, err := NewForwarder(Options{Upstreams: ups, Interval: 30 * time.Second, Logger: logger},
		append(qc.Options(), queue.WithJobTimeout(2*time.Second))...)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: f.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	qctx, qcancel := context.WithCancel(context.Background())
	defer qcancel()
	if err := f.Start(qctx); err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "forwarder on %s/announce  (try %s/stats while it runs)\n\n", base, base)

	gen := &loadGen{url: base + "/announce", client: &http.Client{Timeout: 3 * time.Second}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); gen.run(ctx, s.demo) }()

	seen := &demoSeen{}
	start := time.Now()
	tick := time.NewTicker(time.Second)
	var lastDone uint64
	for running := true; running; {
		select {
		case <-ctx.Done():
			running = false
		case <-tick.C:
			st := f.q.Stats()
			seen.observe(st, f)
			fmt.Fprintln(out, statusLine(time.Since(start), st, st.Done-lastDone))
			lastDone = st.Done
		}
	}
	tick.Stop()
	wg.Wait()
	sctx, scancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer scancel()
	srv.Shutdown(sctx)
	final := f.q.Stats()
	f.Shutdown(sctx)
	printSummary(out, f, final, gen, seen)
	return nil
}

// statusLine is the one-line live view.
func statusLine(elapsed time.Duration, st queue.Stats, donePerSec uint64) string {
	var susp, dis []string
	now := time.Now()
	for _, t := range st.Targets {
		switch {
		case t.Disabled:
			dis = append(dis, t.Name)
		case t.SuspendedUntil.After(now):
			susp = append(susp, t.Name)
		}
	}
	return fmt.Sprintf("[%3.0fs] fill %3.0f%% (%4d/%d)  workers %2d/%d  done/s %4d  rate-limited %5d  throttled %6d  scheduled %4d  suspended [%s]  disabled [%s]",
		elapsed.Seconds(), st.FillPct, st.Depth, st.Capacity, st.Workers, st.MaxWorkers, donePerSec,
		st.RateLimited, st.Throttled, st.Scheduled, strings.Join(susp, " "), strings.Join(dis, " "))
}

// demoSeen remembers which mechanisms the run showed.
type demoSeen struct {
	peakFill     float64
	peakWorkers  int
	baseWorkers  int
	suspended    bool
	disabled     bool
	rateLimited  bool
	throttled    bool
	scheduledMax int
}

func (d *demoSeen) observe(st queue.Stats, f *Forwarder) {
	d.peakFill = max(d.peakFill, st.FillPct)
	d.peakWorkers = max(d.peakWorkers, st.Workers)
	d.baseWorkers = st.BaseWorkers
	d.scheduledMax = max(d.scheduledMax, st.Scheduled)
	d.rateLimited = d.rateLimited || st.RateLimited > 0
	d.throttled = d.throttled || st.Throttled > 0
	for _, t := range st.Targets {
		d.disabled = d.disabled || t.Disabled
		d.suspended = d.suspended || !t.SuspendedUntil.IsZero()
	}
}

func printSummary(out io.Writer, f *Forwarder, st queue.Stats, gen *loadGen, seen *demoSeen) {
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "upstream\tbehaviour\tok\tfailed\t429\tretry-in\trejected\tstate\t")
	for _, up := range f.ordered {
		state := "active"
		if ts, ok := f.q.Target(up.Name); ok {
			switch {
			case ts.Disabled:
				state = "disabled"
			case ts.SuspendedUntil.After(time.Now()):
				state = "suspended"
			}
		}
		s := &up.stats
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", up.Name, up.Kind,
			s.ok.Load(), s.failed.Load(), s.overloaded.Load(), s.retryIn.Load(), s.rejected.Load(), state)
	}
	tw.Flush()

	fmt.Fprintln(out)
	fmt.Fprintf(out, "clients: %d announces sent, %d answered with peers, %d rate-limited (\"tracker busy, retry in N seconds\"), %d errors\n",
		gen.sent.Load(), gen.ok.Load(), gen.limited.Load(), gen.errors.Load())
	fmt.Fprintf(out, "jobs:    %d enqueued, %d done, %d retried, %d dead, %d cancelled, %d dropped (queue full); at the end %d ready, %d running, %d scheduled or waiting\n",
		st.Enqueued, st.Done, st.Retried, st.Dead, st.Cancelled, st.DroppedFull, st.Depth, st.Running, st.Scheduled+st.Waiting)
	fmt.Fprintf(out, "peaks:   fill %.0f%%, workers %d (base %d)\n\n", seen.peakFill, seen.peakWorkers, seen.baseWorkers)
	mark := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(out, "seen:    worker scaling %s, throttling %s, rate limiting %s, suspension %s, disabling %s, BEP 31 retry scheduled %s\n",
		mark(seen.peakWorkers > seen.baseWorkers), mark(seen.throttled), mark(seen.rateLimited),
		mark(seen.suspended), mark(seen.disabled), mark(seen.scheduledMax > 0))
}

// loadGen plays many BitTorrent clients: new peers on many torrents,
// re-announces, completions and stops, at the rate demoLoad gives. Its
// loops are bounded by the demo's context and by a cap on requests in
// flight.
type loadGen struct {
	url    string
	client *http.Client

	sent, ok, limited, errors atomic.Int64

	mu    sync.Mutex
	peers []genPeer
}

type genPeer struct {
	hash, id [20]byte
	port     int
	left     int64
}

func (g *loadGen) run(ctx context.Context, total time.Duration) {
	const inFlight = 32
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var debt float64
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		debt += float64(demoLoad(time.Since(start), total)) / 50
		for ; debt >= 1; debt-- {
			select {
			case sem <- struct{}{}:
			default:
				continue // saturated: skip rather than queue up
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				g.announce(ctx)
			}()
		}
	}
}

// announce sends one announce: usually a new peer on one of many
// torrents, sometimes a known peer re-announcing, completing or stopping.
func (g *loadGen) announce(ctx context.Context) {
	p, ev := g.pick()
	v := url.Values{}
	v.Set("info_hash", string(p.hash[:]))
	v.Set("peer_id", string(p.id[:]))
	v.Set("port", strconv.Itoa(p.port))
	v.Set("uploaded", "0")
	v.Set("downloaded", "0")
	v.Set("left", strconv.FormatInt(p.left, 10))
	v.Set("compact", "1")
	v.Set("numwant", "30")
	if ev != "" {
		v.Set("event", ev)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url+"?"+v.Encode(), nil)
	if err != nil {
		return
	}
	g.sent.Add(1)
	resp, err := g.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			g.errors.Add(1)
		}
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var r struct {
		Failure string `bencode:"failure reason"`
	}
	if err := bencode.Unmarshal(body, &r); err != nil {
		g.errors.Add(1)
		return
	}
	switch {
	case r.Failure == "":
		g.ok.Add(1)
	case strings.Contains(r.Failure, "retry in"):
		g.limited.Add(1)
	default:
		g.errors.Add(1)
	}
}

func (g *loadGen) pick() (genPeer, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if n := len(g.peers); n > 50 {
		switch r := rand.IntN(100); {
		case r < 10: // re-announce
			return g.peers[rand.IntN(n)], ""
		case r < 14: // completed
			i := rand.IntN(n)
			g.peers[i].left = 0
			return g.peers[i], "completed"
		case r < 18: // stopped
			i := rand.IntN(n)
			p := g.peers[i]
			g.peers[i] = g.peers[n-1]
			g.peers = g.peers[:n-1]
			return p, "stopped"
		}
	}
	var p genPeer
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], rand.Uint64N(20000)) // 20000 torrents
	p.hash = sha1.Sum(b[:])
	copy(p.id[:], "-QK0001-")
	binary.BigEndian.PutUint64(p.id[8:], rand.Uint64())
	binary.BigEndian.PutUint32(p.id[16:], rand.Uint32())
	p.port = 10000 + rand.IntN(50000)
	p.left = 1 << 20
	if len(g.peers) < 50000 {
		g.peers = append(g.peers, p)
	}
	return p, "started"
}
