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
	"github.com/queuekit/queue/dashboard"
)

// The demo: simulated upstreams and clients on 127.0.0.1, a live status
// line per second, and a summary. Its queue preset is small and its
// thresholds low so that, within 20 seconds, every mechanism shows:
// worker scaling, throttling, rate limiting, suspension and disabling.

// demoQueueConfig is the demo's preset; flags given on the command line
// override it.
func demoQueueConfig() QueueConfig {
	c := DefaultQueueConfig()
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

func runDemo(ctx context.Context, qc QueueConfig, s settings, out io.Writer) error {
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
	qopts, err := qc.Options()
	if err != nil {
		return err
	}
	tr, err := newTracing(s.otel, out)
	if err != nil {
		return err
	}
	defer tr.shutdown(context.Background())
	rec := new(dashboard.Recorder)
	f, err := NewForwarder(Options{Upstreams: ups, Interval: 30 * time.Second, Logger: logger, ForwardBudget: s.budget, NoForwardBudget: s.budget == 0},
		append(append(qopts, queue.WithJobTimeout(2*time.Second), queue.WithObserver(rec.Observe)), tr.opts...)...)
	if err != nil {
		return err
	}
	// The dashboard at /dashboard/, with actions: the demo listens on
	// 127.0.0.1 only (a real host puts it behind its authentication).
	dash, err := dashboard.New(f.q, dashboard.WithRecorder(rec), dashboard.WithActions(true), dashboard.WithAdmin(f.q.Admin()))
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", tr.wrap(f.Handler()))
	mux.Handle("/dashboard/", http.StripPrefix("/dashboard", dash))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	qctx, qcancel := context.WithCancel(context.Background())
	defer qcancel()
	if err := f.Start(qctx); err != nil {
		return err
	}
	base := "http://" + ln.Addr().String()
	fmt.Fprintf(out, "forwarder on %s/announce  (try %s/stats, or %s/dashboard/ in a browser, while it runs)\n\n", base, base, base)

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
	atEnd := f.q.Stats()
	// The queue's shutdown gets its own time: the HTTP server's may have
	// used up sctx on a busy machine, and a Shutdown cut short leaves
	// handlers running, so the summary could not account for their jobs.
	// The handlers' contexts are cancelled at once; 10 s only bounds a
	// handler that ignores its context.
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	if err := f.Shutdown(dctx); err != nil {
		fmt.Fprintf(out, "shutdown: %v\n", err)
	}
	printSummary(out, f, atEnd, f.q.Stats(), gen.counts(), seen)
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
	return fmt.Sprintf("[%3.0fs] fill %3.0f%% (%4d/%d)  workers %2d/%d  done/s %4d  shed %5d  throttled %6d  scheduled %4d  suspended [%s]  disabled [%s]",
		elapsed.Seconds(), st.FillPct, st.Depth, st.Capacity, st.Workers, st.MaxWorkers, donePerSec,
		st.RateLimited, st.Throttled, st.Store.Scheduled, strings.Join(susp, " "), strings.Join(dis, " "))
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
	d.scheduledMax = max(d.scheduledMax, st.Store.Scheduled)
	d.rateLimited = d.rateLimited || st.RateLimited > 0
	d.throttled = d.throttled || st.Throttled > 0
	for _, t := range st.Targets {
		d.disabled = d.disabled || t.Disabled
		d.suspended = d.suspended || !t.SuspendedUntil.IsZero()
	}
}

// printSummary prints the per-upstream table, the totals and what they
// mean. atEnd is the queue when the load stopped, final after Shutdown.
func printSummary(out io.Writer, f *Forwarder, atEnd, final queue.Stats, c clientCounts, seen *demoSeen) {
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
	fmt.Fprintln(out, "  (forwards per upstream: ok = a good reply; failed = an error, of which 429 = \"too many requests\";")
	fmt.Fprintln(out, "   retry-in = told to come back later (BEP 31); rejected = the upstream refused the torrent)")

	left := final.Depth + final.Store.Scheduled + final.Store.Waiting
	fmt.Fprintln(out)
	fmt.Fprintf(out, "clients: %d announces sent: %d answered with peers, %d asked to retry later (\"tracker busy, retry in N seconds\"), %d errors\n",
		c.sent, c.ok, c.limited, c.errors)
	fmt.Fprintf(out, "jobs:    %d forwards accepted: %d done, %d dead, %d cancelled, %d left at the end (%d of them running when the demo stopped);\n",
		final.Enqueued, final.Done, final.Dead, final.Cancelled, left, atEnd.Running)
	fmt.Fprintf(out, "         %d retries; %d forwards refused because the queue was full\n", final.Retried, final.DroppedFull)
	fmt.Fprintf(out, "peaks:   fill %.0f%%, workers %d (base %d)\n\n", seen.peakFill, seen.peakWorkers, seen.baseWorkers)
	mark := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "no"
	}
	fmt.Fprintf(out, "seen:    worker scaling %s, throttling %s, rate limiting %s, suspension %s, disabling %s, BEP 31 retry scheduled %s\n\n",
		mark(seen.peakWorkers > seen.baseWorkers), mark(seen.throttled), mark(seen.rateLimited),
		mark(seen.suspended), mark(seen.disabled), mark(seen.scheduledMax > 0))
	explainSummary(out, atEnd, final, c)
}

// clientCounts are the load generator's totals.
type clientCounts struct{ sent, ok, limited, errors int64 }

func (g *loadGen) counts() clientCounts {
	return clientCounts{sent: g.sent.Load(), ok: g.ok.Load(), limited: g.limited.Load(), errors: g.errors.Load()}
}

// explainSummary tells a reader who does not know BitTorrent what the
// totals mean, whether the run went well, and what became of the jobs
// left at the end.
func explainSummary(out io.Writer, atEnd, final queue.Stats, c clientCounts) {
	left := uint64(final.Depth + final.Store.Scheduled + final.Store.Waiting)
	ended := final.Done + final.Dead + final.Cancelled
	p := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	p("what the numbers mean:")
	p("  A BitTorrent client announces to a tracker: \"I am in this torrent's swarm; who else is?\". The forwarder")
	p("  answers at once with the peers it knows, and forwards the announce to its upstream trackers, one queued")
	p("  job (a forward) per upstream, so that they know the client too and their peers come back to it.")
	switch {
	case c.sent == 0:
		p("  - No client announced: nothing to judge.")
	case c.errors == 0:
		p("  - Clients: every announce got an answer at once, and none an error: no client ever waited for an upstream.")
	default:
		p("  - Clients: %d announces got no usable answer (a timeout or a broken reply): not expected on 127.0.0.1;", c.errors)
		p("    the machine was probably too busy. The rest were answered at once.")
	}
	if c.limited > 0 {
		p("  - %d of %d announces (%.0f %%) were asked to come back later (\"tracker busy\"): not expected, the", c.limited, c.sent, pct(c.limited, c.sent))
		p("    forwarder refuses forwarding work under load, never an announce.")
	}
	if final.RateLimited > 0 {
		p("  - %d new peers' forwards were shed: in the surge, announces arrived faster than the upstreams could", final.RateLimited)
		p("    take their forwards, the queue filled past the rate-limit threshold, and admission control turned")
		p("    the forwarding work away instead of queueing work it could not do. Their announces were answered")
		p("    anyway, from the peers the forwarder knows, and each such peer's next announce is forwarded. That")
		p("    is the design working; a bigger queue or faster upstreams make it smaller.")
	}
	if final.DroppedFull > 0 {
		p("  - %d forwards were refused with the queue full: their clients were answered anyway, and each client's", final.DroppedFull)
		p("    next announce is forwarded again.")
	}
	p("  - dead: forwards given up on (the 404 upstream's, disabled at its first answer, and those that failed")
	p("    every attempt); cancelled: forwards to the disabled upstream, of peers that left (event=stopped) and")
	p("    announces replaced by a newer one of the same peer; retries: forwards run again later, after an error")
	p("    (with backoff) or when the upstream said \"retry in\".")
	if diff := int64(final.Enqueued) - int64(ended+left); diff == 0 {
		p("  - Nothing was lost: every accepted forward is accounted for, %d done + %d dead + %d cancelled + %d left = %d.",
			final.Done, final.Dead, final.Cancelled, left, final.Enqueued)
	} else {
		p("  - %d accepted forwards are not accounted for (%d done + %d dead + %d cancelled + %d left of %d): their",
			diff, final.Done, final.Dead, final.Cancelled, left, final.Enqueued)
		p("    handlers were still running when the demo stopped waiting for them.")
	}
	if left > 0 {
		p("  - The %d forwards left at the end (%d ready, %d scheduled for later, %d waiting), %d of them interrupted",
			left, final.Depth, final.Store.Scheduled, final.Store.Waiting, atEnd.Running)
		p("    by the shutdown and put back, were held in memory, so they are dropped when the demo exits. For a")
		p("    tracker that is acceptable: every client announces again within its interval, and that announce is")
		p("    forwarded. The forwarder as a server (without -demo) can keep them in PostgreSQL or Redis (-store).")
	}
}

func pct(n, of int64) float64 { return float64(n) * 100 / float64(of) }

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
