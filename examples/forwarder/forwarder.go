package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// fwdJob is the payload of one job: an announce to forward, and the
// event to send with it (the client's, or none when its completed was
// forwarded already).
type fwdJob struct {
	A  *Announce
	Ev Event
}

// Options configures a Forwarder; the zero value of each field means its
// default.
type Options struct {
	// Upstreams to forward to, parsed with ParseUpstream.
	Upstreams []*Upstream
	// Interval is the announce interval given to clients (default 30m).
	Interval time.Duration
	// UpstreamFloor is the shortest time between two announces of one
	// torrent to one upstream, whatever interval or BEP 31 "retry in" it
	// asks for (default 1m). An upstream that gives no interval is next
	// due after 30m.
	UpstreamFloor time.Duration
	// RejectWait is how long an upstream that refuses a torrent (a
	// failure reason without BEP 31 "retry in") is left alone for that
	// torrent (default 30m).
	RejectWait time.Duration
	// Forward chooses what an upstream's interval spaces out: each peer's
	// announces (ForwardPeer, the default) or each torrent's
	// (ForwardTorrent). See ForwardMode.
	Forward ForwardMode
	// MaxPeers bounds the local peers held (default 1 000 000): past it,
	// the least recently seen is evicted. A stopped peer is held, as a
	// record that keeps its address from being served, for as long as a
	// silent one.
	MaxPeers int
	// Registry receives the queue's and the forwarder's metrics and is
	// served on /metrics (default: a new registry).
	Registry *prometheus.Registry
	// Logger (default: discard).
	Logger *slog.Logger
	// Now is the time source for the forwarder's own bookkeeping
	// (default time.Now).
	Now func() time.Time
	// TrustIPFrom lists networks whose clients' ip parameter is
	// believed, besides loopback, which always is (default none).
	TrustIPFrom []netip.Prefix
	// Store keeps the forwarder's jobs (default nil: in memory, lost on
	// exit). A durable store (pgstore, redisstore) keeps queued forwards
	// across a restart and lets several forwarders that share the
	// queue's name (queue.WithName, default "forwarder") share its jobs.
	Store storekit.Store[fwdJob]
	// ForwardBudget is the Go scheduler latency (99th percentile over
	// 10 ms windows) above which the forwarder meters its forwards more
	// tightly, so that they get only the CPU its announces leave (default
	// 250µs; see budget.go). NoForwardBudget turns the budget off:
	// forwards then run as fast as the queue's workers take them.
	ForwardBudget   time.Duration
	NoForwardBudget bool
	// schedSample replaces the runtime's scheduler latencies (tests).
	schedSample schedSample
}

// ForwardMode says which announces reach an upstream.
type ForwardMode uint8

const (
	// ForwardPeer forwards per peer: each peer's first announce and its
	// events reach every upstream chosen, and the peer is announced again
	// once the upstream's interval for it has passed. An upstream hears
	// of every local peer, at one announce per peer per interval.
	ForwardPeer ForwardMode = iota
	// ForwardTorrent forwards per torrent: one announce per torrent per
	// upstream interval, from whichever peer comes first once it is due
	// (a peer's completed and stopped still reach the upstreams that know
	// it). Upstreams learn few local peers; the forwarder still gets
	// their peers back, at a load that grows with torrents, not peers.
	ForwardTorrent
)

// String returns "peer" or "torrent".
func (m ForwardMode) String() string {
	if m == ForwardTorrent {
		return "torrent"
	}
	return "peer"
}

// Set parses "peer" or "torrent", for flag.Var.
func (m *ForwardMode) Set(s string) error {
	switch s {
	case "peer":
		*m = ForwardPeer
	case "torrent":
		*m = ForwardTorrent
	default:
		return fmt.Errorf("forward mode %q: want peer or torrent", s)
	}
	return nil
}

// defaultMaxPeers is Options.MaxPeers' default.
const defaultMaxPeers = 1_000_000

// defaultForwardBudget is Options.ForwardBudget's default.
const defaultForwardBudget = 250 * time.Microsecond

// Forwarder is an HTTP BitTorrent tracker that answers its clients from
// the peers it knows and forwards their announces to upstream trackers
// through a queue.Queue, one job per upstream.
type Forwarder struct {
	q         *queue.Queue[fwdJob]
	upstreams map[string]*Upstream
	names     []string // upstream names, the fan-out candidates
	ordered   []*Upstream
	swarms    *swarms
	opts      Options
	reg       *prometheus.Registry
	log       *slog.Logger

	announces *prometheus.CounterVec
	// the announces counter's children, looked up once
	cOK, cBad, cStopped prometheus.Counter
	// cShed counts new peers' forwards refused by admission
	cShed prometheus.Counter

	// holdUntil is the latest end, in Unix nanoseconds, of an upstream's
	// refusal of a torrent: until then ForwardPeer checks each target
	// for one.
	holdUntil atomic.Int64
	scrapes   scrapeCounters
	budget    *forwardBudget // nil: forwards are not budgeted
}

// refusalReason words the queue's admission refusals, in the words
// trackers use. No client reads it: a refused admission sheds a new
// peer's forward, and the announce is answered anyway.
const refusalReason = "tracker busy"

// NewForwarder builds a forwarder and its queue; qopts are passed to
// queue.New (typically a QueueConfig's Options). Nothing runs until
// Start.
func NewForwarder(o Options, qopts ...queue.Option) (*Forwarder, error) {
	if len(o.Upstreams) == 0 {
		return nil, errors.New("forwarder: no upstreams")
	}
	o.Interval = orDefault(o.Interval, 30*time.Minute)
	o.UpstreamFloor = orDefault(o.UpstreamFloor, time.Minute)
	o.RejectWait = orDefault(o.RejectWait, 30*time.Minute)
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Forward > ForwardTorrent {
		return nil, fmt.Errorf("forwarder: unknown forward mode %d", o.Forward)
	}
	if o.MaxPeers <= 0 {
		o.MaxPeers = defaultMaxPeers
	}
	if o.ForwardBudget < 0 {
		return nil, fmt.Errorf("forwarder: forward budget %s: must be positive (0 is the default, %s)", o.ForwardBudget, defaultForwardBudget)
	}
	o.ForwardBudget = orDefault(o.ForwardBudget, defaultForwardBudget)
	f := &Forwarder{
		upstreams: make(map[string]*Upstream, len(o.Upstreams)),
		swarms:    newSwarms(2*o.Interval, o.MaxPeers),
		opts:      o,
		reg:       o.Registry,
		log:       o.Logger,
	}
	for _, up := range o.Upstreams {
		if _, dup := f.upstreams[up.Name]; dup {
			return nil, fmt.Errorf("forwarder: two upstreams named %q", up.Name)
		}
		f.upstreams[up.Name] = up
		f.names = append(f.names, up.Name)
		f.ordered = append(f.ordered, up)
	}
	f.announces = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "forwarder_announces_total",
		Help: "Client announces by result: ok, bad_request, stopped. Every well-formed announce is answered; none is refused for load.",
	}, []string{"result"})
	f.cShed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "forwarder_forwards_shed_total",
		Help: "Announces of new peers answered but not forwarded: the queue's admission refused the work (it is past its rate-limit fill and out of tokens).",
	})
	for _, c := range []prometheus.Collector{f.announces, f.cShed} {
		if err := f.reg.Register(c); err != nil {
			return nil, err
		}
	}
	f.cOK, f.cBad = f.announces.WithLabelValues("ok"), f.announces.WithLabelValues("bad_request")
	f.cStopped = f.announces.WithLabelValues("stopped")
	if err := f.registerPeerMetrics(); err != nil {
		return nil, err
	}
	if err := f.registerScrapeMetrics(); err != nil {
		return nil, err
	}
	opts := []queue.Option{
		queue.WithName("forwarder"),
		queue.WithLogger(o.Logger),
		queue.WithMetrics(f.reg, 0),
		// Admission refusals shed forwards, not announces (see forward);
		// qopts may change the limiter.
		queue.WithRateLimit(queue.RateLimit{RetryAfter: 10 * time.Second, Reason: refusalReason}),
	}
	if !o.NoForwardBudget {
		f.budget = newForwardBudget(o.ForwardBudget, o.schedSample)
		if err := f.registerBudgetMetrics(); err != nil {
			return nil, err
		}
		// Before the claim: a worker waiting for the budget holds no
		// forward.
		opts = append(opts, queue.WithClaimGate(f.budget.gate))
	}
	opts = append(opts, qopts...)
	q, err := newQueue(o.Store, f.runJob, opts)
	if err != nil {
		return nil, err
	}
	f.q = q
	return f, nil
}

// registerPeerMetrics registers the peer table's gauge and eviction
// counter, and the Go runtime's and the process's metrics (a registry
// given in Options that has them already keeps its own).
func (f *Forwarder) registerPeerMetrics() error {
	peers := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forwarder_peers",
		Help: "Local peers held, stopped ones included (bounded by -max-peers).",
	}, func() float64 { n, _ := f.swarms.size(); return float64(n) })
	evicted := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "forwarder_peers_evicted_total",
		Help: "Local peers evicted, least recently seen first, to keep the table within -max-peers.",
	}, func() float64 { _, n := f.swarms.size(); return float64(n) })
	for _, c := range []prometheus.Collector{peers, evicted} {
		if err := f.reg.Register(c); err != nil {
			return err
		}
	}
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := f.reg.Register(c); err != nil && !errors.As(err, new(prometheus.AlreadyRegisteredError)) {
			return err
		}
	}
	return nil
}

// registerBudgetMetrics registers the forwarding budget's gauges and
// counter.
func (f *Forwarder) registerBudgetMetrics() error {
	b := f.budget
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "forwarder_forward_budget_limit",
			Help: "Forwards the budget lets start per 10 ms window now: halved after a window whose Go scheduler p99 latency is above -forward-budget and in which a client request was answered, raised after ten quiet windows in a row in which a forward waited: by one within 0.3 s of a busy window, doubled after a calmer stretch.",
		}, func() float64 { return float64(b.state().limit) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "forwarder_forward_budget_waiting",
			Help: "Workers waiting for the budget before they claim a forward (holding none).",
		}, func() float64 { return float64(b.state().waiting) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "forwarder_forward_budget_narrowed_total",
			Help: "10 ms windows whose Go scheduler p99 latency was above -forward-budget, with a client request answered, which halved the forwards allowed per window.",
		}, func() float64 { return float64(b.state().narrows) }),
	} {
		if err := f.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Queue returns the forwarder's queue.
func (f *Forwarder) Queue() *queue.Queue[fwdJob] { return f.q }

// Start starts the queue's workers and a janitor that drops silent peers;
// both stop when ctx ends or Shutdown is called.
func (f *Forwarder) Start(ctx context.Context) error {
	if err := f.q.Start(ctx); err != nil {
		return err
	}
	if f.budget != nil {
		go f.budget.run(ctx, f.q.Done())
	}
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-f.q.Done():
				return
			case <-t.C:
				f.swarms.sweep(f.opts.Now())
			}
		}
	}()
	return nil
}

// Shutdown stops the queue: queued jobs that have not started are
// dropped with it (the in-memory store keeps nothing), running ones are
// cancelled, and Shutdown waits for them or for ctx.
func (f *Forwarder) Shutdown(ctx context.Context) error { return f.q.Shutdown(ctx) }

// announcePath is where the forwarder serves announces; scrapes are
// served at the path BEP 48's convention derives from it, /scrape.
const announcePath = "/announce"

// Handler serves /announce, /scrape, /stats (text, ?format=json) and
// /metrics.
func (f *Forwarder) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+announcePath, f.ServeAnnounce)
	if p, ok := scrapePath(announcePath); ok {
		mux.HandleFunc("GET "+p, f.ServeScrape)
	}
	mux.HandleFunc("GET /stats", f.ServeStats)
	mux.Handle("GET /metrics", promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{Registry: f.reg}))
	return mux
}

// PeerStats describes the peer table, in /stats.
type PeerStats struct {
	// Peers is the local peers held, stopped ones included.
	Peers int64 `json:"peers"`
	// MaxPeers is the bound on Peers (Options.MaxPeers).
	MaxPeers int `json:"max_peers"`
	// Evicted counts the peers evicted for the bound since start.
	Evicted uint64 `json:"peers_evicted"`
}

// ServeStats serves the queue's statistics as queue.Queue.StatsHandler
// does (text, or JSON with ?format=json or Accept: application/json), with
// the peer table's: a last line in text, "peer_table" in JSON.
func (f *Forwarder) ServeStats(w http.ResponseWriter, r *http.Request) {
	n, evicted := f.swarms.size()
	ps := PeerStats{Peers: n, MaxPeers: f.opts.MaxPeers, Evicted: evicted}
	w.Header().Set("Cache-Control", "no-store")
	if fm := r.URL.Query().Get("format"); fm == "json" || fm == "" && strings.Contains(r.Header.Get("Accept"), "application/json") {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(struct {
			queue.Stats
			PeerTable PeerStats `json:"peer_table"`
		}{f.q.Stats(), ps})
		return
	}
	f.q.StatsHandler().ServeHTTP(w, r) // text: the request asks for no JSON
	fmt.Fprintf(w, "peers %d / %d, evicted %d\n", ps.Peers, ps.MaxPeers, ps.Evicted)
}

// ServeAnnounce answers one client announce. Trackers answer errors with
// HTTP 200 and a bencoded failure reason, and so does this one.
func (f *Forwarder) ServeAnnounce(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Shared, never-changed values: Header.Set would allocate a slice for
	// each on every announce.
	h["Content-Type"], h["Cache-Control"] = hdrTextPlain, hdrNoCache
	sc := scratchPool.Get().(*announceScratch)
	defer sc.release()
	f.budget.served()
	remote, _ := netip.ParseAddrPort(r.RemoteAddr)
	a, err := parseAnnounce(r.URL.RawQuery, remote, f.opts.TrustIPFrom)
	if err != nil {
		f.cBad.Inc()
		sc.buf = appendFailure(sc.buf[:0], err.Error(), 0)
		w.Write(sc.buf)
		return
	}
	now := f.opts.Now()
	interval := int64(f.opts.Interval / time.Second)
	if a.Event == EventStopped {
		f.stop(r.Context(), a, now)
		f.cStopped.Inc()
		sc.buf = appendCompactAnnounce(sc.buf[:0], interval, 0, 0, 0, nil)
		w.Write(sc.buf)
		return
	}
	// A peer not known yet (or silent for the TTL, or stopped) is new
	// work for the upstreams: admission decides whether it is forwarded,
	// never whether it is answered.
	isNew, firstCompleted := f.swarms.update(a, now)
	if isNew {
		f.forget(f.swarms.evict(a))
	}
	f.forward(r.Context(), a, firstCompleted, isNew, now)

	peers, complete, incomplete := f.swarms.appendPeers(sc.peers, &sc.seen, a, a.NumWant, now)
	sc.peers = peers[:0]
	minInterval := int64(f.opts.Interval / 2 / time.Second)
	f.cOK.Inc()
	if a.Compact {
		sc.buf = appendCompactAnnounce(sc.buf[:0], interval, minInterval, complete, incomplete, peers)
		w.Write(sc.buf)
		return
	}
	resp := announceResponse{Interval: interval, MinInterval: minInterval, Complete: complete, Incomplete: incomplete}
	encodePeers(&resp, peers, a.Compact, a.NoPeerID)
	w.Write(bencode.MustMarshal(resp))
}

// dueKey is what an upstream's interval spaces out for a: its torrent, or
// its peer (ForwardPeer).
func (f *Forwarder) dueKey(a *Announce) string {
	if f.opts.Forward == ForwardTorrent {
		return a.HashHex()
	}
	return a.PeerKey()
}

// forward enqueues a's announce to every eligible upstream, and its first
// completed event also to the upstreams that know the peer but are not due.
// A fresh peer's (one the table did not know) goes through the queue's
// admission first: refused, it is shed, counted, and not marked forwarded,
// so the peer's next announce is forwarded if the queue has room then.
func (f *Forwarder) forward(ctx context.Context, a *Announce, firstCompleted, fresh bool, now time.Time) {
	ev := a.Event
	if ev == EventCompleted && !firstCompleted {
		ev = EventNone
	}
	targets := f.q.Fanout(f.dueKey(a), f.names)
	if fresh && len(targets) > 0 && f.q.Admit() != nil {
		f.cShed.Inc()
		return
	}
	if f.opts.Forward == ForwardPeer && len(targets) > 0 && now.UnixNano() < f.holdUntil.Load() {
		// Fanout checked the peer; an upstream may refuse its torrent.
		hash := a.HashHex()
		targets = slices.DeleteFunc(targets, func(t string) bool { return !f.q.Due(t, hash) })
	}
	var keyBuf [4]string // most fan-outs: the slice stays on the stack
	keys := appendJobKeys(keyBuf[:0], a, targets)
	for i, t := range targets {
		// A completed replaces the peer's announce still queued for t:
		// it is forwarded once, so dropped as a duplicate it would be
		// lost. A started replaces its stop still queued (a client
		// restarted): the upstream is to list the peer.
		f.enqueue(ctx, a, ev, t, keys[i], ev == EventCompleted || ev == EventStarted)
	}
	if firstCompleted {
		for _, t := range f.swarms.forwardedTo(a) {
			if !contains(targets, t) {
				f.enqueue(ctx, a, EventCompleted, t, jobKey(a, t), true)
			}
		}
	}
	f.swarms.markForwarded(a, targets)
}

// stop cancels a's peer's pending jobs and forwards its stop to the
// upstreams it was announced to, unless the peer is known at another
// address: then the stop is someone else's, and changes nothing. With
// ForwardPeer the peer is due again at once, so that a restart's started
// is forwarded.
func (f *Forwarder) stop(ctx context.Context, a *Announce, now time.Time) {
	targets, foreign := f.swarms.remove(a, now)
	if foreign {
		return
	}
	if f.opts.Forward == ForwardPeer {
		for _, t := range targets {
			f.q.SetNextDue(t, a.PeerKey(), time.Time{})
		}
	}
	prefix, suffix := a.HashHex()+":", ":"+a.PeerHex()
	f.q.CancelMatch(ctx, func(key string) bool {
		return strings.HasPrefix(key, prefix) && strings.HasSuffix(key, suffix)
	})
	for _, t := range targets {
		f.enqueue(ctx, a, EventStopped, t, jobKey(a, t), true)
	}
}

// forget clears what the queue keeps for peers evicted from the table:
// with ForwardPeer, their next-due times, which would otherwise outgrow
// the table's bound.
func (f *Forwarder) forget(evicted []evictedPeer) {
	if f.opts.Forward != ForwardPeer {
		return
	}
	var buf [80]byte
	for _, p := range evicted {
		hex.Encode(buf[:40], p.hash[:])
		hex.Encode(buf[40:], p.id[:])
		key := string(buf[:])
		for _, t := range p.forwarded {
			f.q.SetNextDue(t, key, time.Time{})
		}
	}
}

// enqueue adds one job. When supersede is set, a queued job of the same
// key (an older announce of the same peer) is replaced by this one.
func (f *Forwarder) enqueue(ctx context.Context, a *Announce, ev Event, target, key string, supersede bool) {
	job := queue.Job[fwdJob]{
		Key:     key,
		Group:   key[:len(key)-len(a.PeerHex())-1], // infohash:upstream, sharing key's bytes
		Target:  target,
		Payload: fwdJob{A: a, Ev: ev},
	}
	// ErrDuplicate (the peer's previous announce is still queued) and
	// ErrQueueFull (counted as dropped_full) are the queue's to count; the
	// client is answered either way: forwarding is best effort, and the
	// client announces again at its interval.
	if err := f.q.Enqueue(ctx, job); errors.Is(err, queue.ErrDuplicate) && supersede {
		f.q.Cancel(ctx, job.Key)
		f.q.Enqueue(ctx, job)
	}
}

// jobKey is a job's pending key: infohash:upstream:peerid, in hex.
func jobKey(a *Announce, target string) string {
	var buf [1]string
	return appendJobKeys(buf[:0], a, []string{target})[0]
}

// appendJobKeys appends the pending keys of a for each target to keys,
// cut from one string so that a fan-out costs one allocation for all its
// keys.
func appendJobKeys(keys []string, a *Announce, targets []string) []string {
	n := 0
	for _, t := range targets {
		n += len(a.HashHex()) + len(t) + len(a.PeerHex()) + 2
	}
	var b strings.Builder
	b.Grow(n)
	for _, t := range targets {
		b.WriteString(a.HashHex())
		b.WriteByte(':')
		b.WriteString(t)
		b.WriteByte(':')
		b.WriteString(a.PeerHex())
	}
	all := b.String()
	for _, t := range targets {
		l := len(a.HashHex()) + len(t) + len(a.PeerHex()) + 2
		keys = append(keys, all[:l])
		all = all[l:]
	}
	return keys
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// runJob is the queue's handler: one announce to one upstream. Its
// result tells the queue what to do next (see queue.Handler).
func (f *Forwarder) runJob(ctx context.Context, j queue.Job[fwdJob]) error {
	up := f.upstreams[j.Target]
	if up == nil {
		return queue.Permanent(fmt.Errorf("unknown upstream %q", j.Target))
	}
	a := j.Payload.A
	r, err := up.client.announce(ctx, a, j.Payload.Ev)
	now := f.opts.Now()
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return err // shutting down: the queue puts the job back
		}
		up.stats.failed.Add(1)
		var he *queue.HTTPError
		if errors.As(err, &he) && he.Status == http.StatusTooManyRequests {
			up.stats.overloaded.Add(1)
		}
		return fmt.Errorf("%s: %w", up.Name, err)
	}
	hash, due := a.HashHex(), f.dueKey(a)
	if r.Failure != "" {
		ferr := fmt.Errorf("%s: tracker failure: %s", up.Name, r.Failure)
		switch {
		case r.RetryNever:
			up.stats.rejected.Add(1)
			return queue.Disable(fmt.Errorf("%w (retry in: never)", ferr))
		case r.HasRetry:
			// Not sooner than the floor: a BEP 31 retry uses up no
			// attempt, so "retry in: 0" taken as asked would run the job
			// again at once for as long as the upstream answered so.
			wait := max(r.RetryIn, f.opts.UpstreamFloor)
			up.stats.retryIn.Add(1)
			f.q.SetNextDue(up.Name, due, now.Add(wait))
			return queue.RetryAfter(wait, ferr)
		default:
			// A refusal of this torrent (unregistered, not whitelisted)
			// says nothing about the upstream's other torrents: drop the
			// job and leave the pair alone for a while.
			up.stats.rejected.Add(1)
			until := now.Add(f.opts.RejectWait)
			f.q.SetNextDue(up.Name, hash, until)
			f.holdUntil.Store(max(f.holdUntil.Load(), until.UnixNano()))
			return queue.Permanent(ferr)
		}
	}
	up.stats.ok.Add(1)
	next := r.Interval
	if next <= 0 {
		next = 30 * time.Minute
	}
	next = max(next, r.MinInterval, f.opts.UpstreamFloor)
	if j.Payload.Ev == EventStopped {
		// A stop neither makes the torrent due later nor tells its peers:
		// trackers answer it with an empty list (opentracker's
		// "5:peers0:"), which must not replace the peers the torrent's
		// other clients are served.
		return nil
	}
	f.q.SetNextDue(up.Name, due, now.Add(next))
	f.swarms.recordReply(a, up.Name, r, now, next+next/2)
	return nil
}
