package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/queuekit/queue"
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
	// Store keeps the forwarder's jobs (default: in memory, lost at exit);
	// a durable store lets them survive restarts and be shared by several
	// forwarders. It belongs to this forwarder's queue alone.
	Store queue.Store[fwdJob]
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
	// Registry receives the queue's and the forwarder's metrics and is
	// served on /metrics (default: a new registry).
	Registry *prometheus.Registry
	// Logger (default: discard).
	Logger *slog.Logger
	// Now is the time source for the forwarder's own bookkeeping
	// (default time.Now).
	Now func() time.Time
}

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
	cOK, cBad, cLimited, cStopped prometheus.Counter
}

// refusalReason is what a client refused by the queue's admission limiter
// reads before the retry hint, in the words trackers use.
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
	f := &Forwarder{
		upstreams: make(map[string]*Upstream, len(o.Upstreams)),
		swarms:    newSwarms(2 * o.Interval),
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
		Help: "Client announces by result: ok, bad_request, rate_limited, stopped.",
	}, []string{"result"})
	if err := f.reg.Register(f.announces); err != nil {
		return nil, err
	}
	f.cOK, f.cBad = f.announces.WithLabelValues("ok"), f.announces.WithLabelValues("bad_request")
	f.cLimited, f.cStopped = f.announces.WithLabelValues("rate_limited"), f.announces.WithLabelValues("stopped")
	opts := append([]queue.Option{
		queue.WithName("forwarder"),
		queue.WithLogger(o.Logger),
		queue.WithMetrics(f.reg, 0),
		// A refused client reads "tracker busy, retry in 10 seconds";
		// qopts may change the hint (and the wording).
		queue.WithRateLimit(queue.RateLimit{RetryAfter: 10 * time.Second, Reason: refusalReason}),
	}, qopts...)
	var q *queue.Queue[fwdJob]
	var err error
	if o.Store != nil {
		q, err = queue.NewWithStore(o.Store, f.runJob, opts...)
	} else {
		q, err = queue.New(f.runJob, opts...)
	}
	if err != nil {
		return nil, err
	}
	f.q = q
	return f, nil
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

// Handler serves /announce, /stats (text, ?format=json) and /metrics.
func (f *Forwarder) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /announce", f.ServeAnnounce)
	mux.Handle("GET /stats", f.q.StatsHandler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{Registry: f.reg}))
	return mux
}

// ServeAnnounce answers one client announce. Trackers answer errors with
// HTTP 200 and a bencoded failure reason, and so does this one.
func (f *Forwarder) ServeAnnounce(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Cache-Control", "no-cache")
	remote, _ := netip.ParseAddrPort(r.RemoteAddr)
	a, err := ParseAnnounce(r.URL.RawQuery, remote)
	if err != nil {
		f.cBad.Inc()
		w.Write(encodeFailure(err.Error(), 0))
		return
	}
	now := f.opts.Now()
	if a.Event == EventStopped {
		f.stop(r.Context(), a)
		f.cStopped.Inc()
		w.Write(bencode.MustMarshal(announceResponse{Interval: int64(f.opts.Interval / time.Second), Peers: ""}))
		return
	}
	if !f.swarms.known(a, now) {
		if err := f.q.Admit(); err != nil {
			// The refusal's text is ready to show ("tracker busy, retry
			// in 10 seconds"); RetryDelay gives its hint for the retry key.
			retry, ok := queue.RetryDelay(err)
			if !ok {
				retry = 10 * time.Second
			}
			f.cLimited.Inc()
			w.Write(encodeFailure(err.Error(), retry))
			return
		}
	}
	_, firstCompleted := f.swarms.update(a, now)
	f.forward(r.Context(), a, firstCompleted)

	peers, complete, incomplete := f.swarms.peers(a, a.NumWant, now)
	resp := announceResponse{
		Interval:    int64(f.opts.Interval / time.Second),
		MinInterval: int64(f.opts.Interval / 2 / time.Second),
		Complete:    complete,
		Incomplete:  incomplete,
	}
	encodePeers(&resp, peers, a.Compact, a.NoPeerID)
	f.cOK.Inc()
	w.Write(bencode.MustMarshal(resp))
}

// forward enqueues a's announce to every eligible upstream, and its first
// completed event also to the upstreams that know the peer but are not due.
func (f *Forwarder) forward(ctx context.Context, a *Announce, firstCompleted bool) {
	ev := a.Event
	if ev == EventCompleted && !firstCompleted {
		ev = EventNone
	}
	targets := f.q.Fanout(a.HashHex(), f.names)
	keys := jobKeys(a, targets)
	for i, t := range targets {
		// A completed replaces the peer's announce still queued for t:
		// it is forwarded once, so dropped as a duplicate it would be lost.
		f.enqueue(ctx, a, ev, t, keys[i], ev == EventCompleted)
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
// address: then the stop is someone else's, and changes nothing.
func (f *Forwarder) stop(ctx context.Context, a *Announce) {
	targets, foreign := f.swarms.remove(a)
	if foreign {
		return
	}
	prefix, suffix := a.HashHex()+":", ":"+a.PeerHex()
	f.q.CancelMatch(ctx, func(key string) bool {
		return strings.HasPrefix(key, prefix) && strings.HasSuffix(key, suffix)
	})
	for _, t := range targets {
		f.enqueue(ctx, a, EventStopped, t, jobKey(a, t), true)
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
	return jobKeys(a, []string{target})[0]
}

// jobKeys returns the pending keys of a for each target, cut from one
// string so that a fan-out costs one allocation for all its keys.
func jobKeys(a *Announce, targets []string) []string {
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
	keys := make([]string, len(targets))
	for i, t := range targets {
		l := len(a.HashHex()) + len(t) + len(a.PeerHex()) + 2
		keys[i], all = all[:l], all[l:]
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
	hash := a.HashHex()
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
			f.q.SetNextDue(up.Name, hash, now.Add(wait))
			return queue.RetryAfter(wait, ferr)
		default:
			// A refusal of this torrent (unregistered, not whitelisted)
			// says nothing about the upstream's other torrents: drop the
			// job and leave the pair alone for a while.
			up.stats.rejected.Add(1)
			f.q.SetNextDue(up.Name, hash, now.Add(f.opts.RejectWait))
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
	f.q.SetNextDue(up.Name, hash, now.Add(next))
	f.swarms.recordReply(a, up.Name, r, now, next+next/2)
	return nil
}
