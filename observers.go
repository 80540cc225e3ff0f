package queue

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Observability: event hooks, the recent-error ring, backlog and drop
// warnings, per-job debug logs and Prometheus metrics. Counters are read
// from the queue's own counters at scrape time, so metrics add nothing to
// the hot path but the sampled duration histograms.

type metricsConfig struct {
	reg       prometheus.Registerer
	hooks     []func(Event)
	warnDepth int
	sampling  int
}

// WithObserver adds a hook that receives every lifecycle Event: enqueued,
// coalesced, dropped, started, done, retried, dead, cancelled, requeued,
// deferred, rescued, and the targets' suspended, disabled and resumed.
// Several hooks run in the order given; nil adds none. Use it to add tracing
// (OpenTelemetry spans from EventStarted to EventDone) or custom logging
// without the core depending on it.
//
// Hooks run inline, on the goroutine where the event happened (a producer
// calling Enqueue, a worker, the scheduler), and never with a queue or
// store lock held: a hook may call Enqueue, Cancel, Stats and the other
// non-blocking methods, but a slow hook slows that goroutine (a worker
// runs no job while its hook runs), so hand expensive work to a goroutine
// of your own. A hook must not call Stop or Shutdown, which wait for the
// very worker the hook may be running on. A panic in a hook is recovered
// and logged, and the other hooks still run. Events never carry payloads.
func WithObserver(fn func(Event)) Option {
	return func(c *config) error {
		if fn != nil { // nil adds none
			c.metrics.hooks = append(c.metrics.hooks, fn)
		}
		return nil
	}
}

// WithWarnDepth logs a warning once when the depth (ready jobs, and jobs
// parked for a busy target's slot: Stats.Depth) reaches
// n, and once more (at info level) when it falls back below n (default 0:
// off). Depth is checked every scale interval (WithScaling), so a
// spike shorter than that may go unlogged. It needs WithLogger to be seen.
func WithWarnDepth(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return optErr("WithWarnDepth", n, "must be >= 0 (0 turns it off)")
		}
		c.metrics.warnDepth = n
		return nil
	}
}

// OnDead registers fn to be called with each job the queue dead-letters
// and its last error, from the worker that ran it, after EventDead. A job
// that a durable store dead-letters as it claims it, because its payload
// does not decode into T, reaches fn too, with a *DecodeError and a zero
// Payload, from the goroutine that claimed it. Hooks
// run in the order registered; OnDead may be called at any time, from any
// goroutine, and a hook registered while jobs run sees the jobs
// dead-lettered after it returns. A panic in a hook is recovered and
// logged, the other hooks still run, and the job stays counted dead. Like
// an observer (WithObserver), a hook runs on a worker: hand slow work to a
// goroutine of your own. fn must not be nil.
func (q *Queue[T]) OnDead(fn func(ctx context.Context, job Job[T], err error)) {
	if fn == nil {
		panic("queue: OnDead: nil hook")
	}
	q.deadMu.Lock()
	defer q.deadMu.Unlock()
	var hooks []func(context.Context, Job[T], error)
	if p := q.onDead.Load(); p != nil {
		hooks = append(hooks, *p...)
	}
	hooks = append(hooks, fn)
	q.onDead.Store(&hooks)
}

// callOnDead runs the OnDead hooks, recovering and logging a panic in
// each: host code on a worker must not crash the host.
func (q *Queue[T]) callOnDead(ctx context.Context, job *Job[T], cause error) {
	p := q.onDead.Load()
	if p == nil {
		return
	}
	for _, fn := range *p {
		func() {
			defer func() {
				if v := recover(); v != nil {
					q.log.Error("OnDead hook panicked", "job", job.ID, "key", job.Key, "panic", v, "stack", string(debug.Stack()))
				}
			}()
			fn(ctx, *job, cause)
		}()
	}
}

type observers struct {
	active   bool // hooks or a logger want events (metrics do not)
	timed    bool // hooks want started events and run times
	hooks    []func(Event)
	sampling uint32
	prom     *collector
	reg      prometheus.Registerer
	unreg    sync.Once
	log      *slog.Logger
	logs     bool // the host gave a logger

	errMu sync.Mutex
	errs  []ErrorRecord // ring, newest at errAt-1
	errAt int

	// Scaler goroutine only.
	warnDepth int
	warned    bool
	dropSeen  uint64 // drops counted at the previous tick
	dropping  bool   // drops happened during the previous interval
	dropStart uint64 // drops counted when the episode began
	limSeen   uint64 // the same three for refusals at the pending bound
	limiting  bool
	limStart  uint64

	depth func() int
	ctr   *counters // the queue's producer-side counters
}

func newObservers[T any](q *Queue[T], cfg metricsConfig) (*observers, error) {
	o := &observers{
		hooks:     cfg.hooks,
		warnDepth: cfg.warnDepth,
		depth:     q.depth,
		ctr:       &q.ctr,
		log:       q.log,
		logs:      q.log.Enabled(context.Background(), slog.LevelError),
	}
	o.sampling = uint32(cfg.sampling)
	if o.sampling == 0 {
		o.sampling = defaultMetricsSampling
	}
	o.active = len(o.hooks) > 0 || o.logs
	o.timed = len(o.hooks) > 0
	if cfg.reg != nil {
		o.reg = prometheus.WrapRegistererWith(prometheus.Labels{"queue": q.cfg.name}, cfg.reg)
		o.prom = newCollector(q)
		if err := o.reg.Register(o.prom); err != nil {
			return nil, fmt.Errorf("queue: WithMetrics: registering the collectors of queue %q: %w", q.cfg.name, err)
		}
	}
	return o, nil
}

// sample reports whether Enqueue stamps a job with its due time, for the
// wait histogram: about one attempt in o.sampling. It reads the counters
// Enqueue keeps anyway (accepted plus dropped, so a full queue does not
// stall it on a multiple of n); concurrent producers may both sample,
// which only adds a sample. A random draw would cost more than the rest
// of the check.
func (o *observers) sample() bool {
	if o.prom == nil {
		return false
	}
	return o.sampling == 1 || (o.ctr.enqueued.Load()+o.ctr.dropped.Load())%uint64(o.sampling) == 0
}

// sampleRun reports whether the runs of job id are timed for the run
// histogram: one job in o.sampling, by ID, which costs no shared state
// and times every run of a sampled job alike.
func (o *observers) sampleRun(id int64) bool {
	return o.prom != nil && (o.sampling == 1 || uint64(id)%uint64(o.sampling) == 0)
}

func (o *observers) unregister() {
	if o == nil || o.reg == nil {
		return
	}
	o.unreg.Do(func() { o.reg.Unregister(o.prom) })
}

// send delivers ev to the hooks.
func (o *observers) send(ev Event) {
	for _, h := range o.hooks {
		o.call(h, ev)
	}
}

// call runs one hook, recovering a panic: a hook is host code running on
// the queue's goroutines (a worker, the scheduler), and its panic must not
// crash the host or leave a job's outcome half recorded. The panic is
// logged at error level.
func (o *observers) call(h func(Event), ev Event) {
	defer func() {
		if v := recover(); v != nil {
			o.log.Error("observer hook panicked", "event", ev.Kind.String(), "job", ev.JobID, "panic", v,
				"stack", string(debug.Stack()))
		}
	}()
	h(ev)
}

// startRun is called as job's handler is about to run. It observes the
// job's wait and reports whether the run is timed, and when it started;
// the caller emits EventStarted for a timed run once the run is
// published.
func (q *Queue[T]) startRun(job *Job[T]) (start time.Time, timed bool) {
	o := q.obs
	wait := o.prom != nil && !job.RunAt.IsZero()
	timed = o.timed || o.sampleRun(job.ID)
	if !timed && !wait {
		return start, false
	}
	start = q.clock.Now()
	if wait {
		o.prom.waitTime.Observe(max(start.Sub(job.RunAt), 0).Seconds())
	}
	return start, timed
}

// finishRun records the outcome of a run (finish) and, for a timed run
// (took > 0), its duration in the run histogram under that outcome. The
// outcome is read from the worker's own counters, which only this
// goroutine writes.
func (q *Queue[T]) finishRun(w *worker[T], job *Job[T], v *verdict, took time.Duration) {
	c := q.obs.prom
	if c == nil || took <= 0 {
		q.finish(w, job, v, took)
		return
	}
	done, retried, dead := w.ctr.done.Load(), w.ctr.retried.Load(), w.ctr.dead.Load()
	q.finish(w, job, v, took)
	switch {
	case w.ctr.done.Load() != done:
		c.runDone.Observe(took.Seconds())
	case w.ctr.retried.Load() != retried:
		c.runRetried.Observe(took.Seconds())
	case w.ctr.dead.Load() != dead:
		c.runDead.Observe(took.Seconds())
	}
}

// emit reports an event about job. It is cheap when nobody listens. d is
// the run time for EventDone and EventDead, otherwise as Event.Delay says.
func (q *Queue[T]) emit(kind EventKind, job *Job[T], err error, d time.Duration) {
	q.emitAt(kind, job, err, d, time.Time{})
}

// emitAt is emit with the event's time, if the caller has read the clock
// already (zero: emitAt reads it). A clock read is most of what an
// observer costs a run of a short job.
func (q *Queue[T]) emitAt(kind EventKind, job *Job[T], err error, d time.Duration, at time.Time) {
	o := q.obs
	if !o.active {
		return
	}
	if o.logs {
		q.logJob(kind, job, err, d)
	}
	if len(o.hooks) == 0 {
		return
	}
	if at.IsZero() {
		at = q.clock.Now()
	}
	o.send(Event{Kind: kind, Time: at, JobID: job.ID, Key: job.Key, Target: job.Target,
		Priority: job.Priority, Attempt: job.Attempt, Err: err, Delay: d})
}

// logJob logs a job's event at debug level; dead letters are logged at
// warn level where they happen. Payloads are never logged.
func (q *Queue[T]) logJob(kind EventKind, job *Job[T], err error, d time.Duration) {
	switch kind {
	case EventStarted, EventEnqueued, EventDead:
		return
	}
	ctx := context.Background()
	if !q.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("outcome", kind.String()), slog.Int64("job", job.ID),
		slog.String("key", job.Key), slog.String("target", job.Target), slog.Int("attempt", job.Attempt)}
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	if d > 0 {
		name := "delay" // as Event.Delay: the wait before the next run
		if kind == EventDone {
			name = "took" // the run time
		}
		attrs = append(attrs, slog.Duration(name, d))
	}
	q.log.LogAttrs(ctx, slog.LevelDebug, "job "+kind.String(), attrs...)
}

// tick runs on the scaler goroutine every scale interval: the backlog and
// queue-full warnings, each logged once when the condition begins and once
// when it ends.
func (o *observers) tick() {
	if !o.logs {
		return
	}
	ctx := context.Background()
	if o.warnDepth > 0 {
		d := o.depth()
		switch {
		case !o.warned && d >= o.warnDepth:
			o.warned = true
			o.log.WarnContext(ctx, "backlog reached warn depth", "depth", d, "warn_depth", o.warnDepth)
		case o.warned && d < o.warnDepth:
			o.warned = false
			o.log.InfoContext(ctx, "backlog back below warn depth", "depth", d, "warn_depth", o.warnDepth)
		}
	}
	n := o.ctr.dropped.Load()
	switch {
	case n > o.dropSeen && !o.dropping:
		o.dropping, o.dropStart = true, o.dropSeen
		o.log.WarnContext(ctx, "ready queue full: dropping jobs", "dropped", n-o.dropSeen, "dropped_full_total", n)
	case n == o.dropSeen && o.dropping:
		o.dropping = false
		o.log.InfoContext(ctx, "ready queue accepting jobs again", "dropped", n-o.dropStart, "dropped_full_total", n)
	}
	o.dropSeen = n
	n = o.ctr.droppedLimit.Load()
	switch {
	case n > o.limSeen && !o.limiting:
		o.limiting, o.limStart = true, o.limSeen
		o.log.WarnContext(ctx, "pending-job limit reached (WithCapacity's pending bound): refusing jobs", "dropped", n-o.limSeen, "dropped_limit_total", n)
	case n == o.limSeen && o.limiting:
		o.limiting = false
		o.log.InfoContext(ctx, "below the pending-job limit: accepting jobs again", "dropped", n-o.limStart, "dropped_limit_total", n)
	}
	o.limSeen = n
}

// countStoreEnqueue counts a job a store accepted (EventEnqueued,
// EventCoalesced) or refused for capacity (EventDropped) outside Enqueue,
// as Enqueue counts its own.
func (q *Queue[T]) countStoreEnqueue(kind EventKind) {
	switch kind {
	case EventCoalesced:
		q.ctr.coalesced.Add(1)
		fallthrough
	case EventEnqueued:
		q.ctr.enqueued.Add(1)
	case EventDropped:
		q.ctr.dropped.Add(1)
	}
}
