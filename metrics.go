package queue

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Observability: event hooks, the recent-error ring, backlog and drop
// warnings, per-job debug logs and Prometheus metrics. Counters are read
// from the queue's own counters at scrape time, so metrics add nothing to
// the hot path but the sampled duration histograms.

// DefaultMetricsSampling is how many jobs share one duration sample in the
// wait and run histograms (see WithMetricsSampling).
const DefaultMetricsSampling = 32

// maxRecentErrors bounds the recent-error ring.
const maxRecentErrors = 50

// maxErrorLen bounds the error text kept per recent error.
const maxErrorLen = 512

// maxTargetSeries bounds the per-target metric series.
const maxTargetSeries = 100

type metricsConfig struct {
	reg       prometheus.Registerer
	hooks     []func(Event)
	warnDepth int
	sampling  int
}

// WithMetrics registers the queue's Prometheus collectors on reg, with a
// constant label queue=<name> so several queues may share a registry
// (default: no metrics; nil also means none). New returns the error of a
// failed registration (two queues of one name on one registry); it wraps
// prometheus.AlreadyRegisteredError when that is the cause. The collectors
// are unregistered when the queue has stopped, so a queue of the same name
// may then take its place. The queue never uses the default registry on
// its own; pass prometheus.DefaultRegisterer to use it.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *config) error {
		c.metrics.reg = reg // nil means off
		return nil
	}
}

// WithMetricsSampling sets how many jobs share one sample in the duration
// histograms (default 32; 1 times every job): the runs of one job in n
// (by job ID) go into queue_job_run_seconds, and one immediate job in n
// (at random) is stamped at Enqueue for queue_job_wait_seconds. Scheduled
// and retried jobs carry their due time anyway, so their wait is always
// observed. Counters and gauges are always exact. A sampled job costs up
// to five clock reads and two histogram observations, which on a machine
// with a slow clock is a large share of a no-op job; 32 keeps metrics
// within a few percent of the queue's throughput.
func WithMetricsSampling(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return optErr("WithMetricsSampling", n, "must be >= 1")
		}
		c.metrics.sampling = n
		return nil
	}
}

// WithObserver adds a hook that receives every lifecycle Event: enqueued,
// coalesced, dropped, started, done, retried, dead, cancelled, requeued,
// deferred, rescued, and the targets' suspended, disabled and resumed.
// Several hooks run in the order given. Use it to add tracing
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
		if fn == nil {
			return optErr("WithObserver", nil, "must not be nil")
		}
		c.metrics.hooks = append(c.metrics.hooks, fn)
		return nil
	}
}

// WithWarnDepth logs a warning once when the depth (ready jobs, and jobs
// parked for a busy target's slot: Stats.Depth) reaches
// n, and once more (at info level) when it falls back below n (default 0:
// off). Depth is checked every scale interval (WithScaleInterval), so a
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

// ErrorRecord is one job error kept in the recent-error ring (the last 50
// errors, Stats.RecentErrors). Error is the handler's error text, cut to
// 512 bytes; payloads are never recorded, but an error that quotes its
// payload will show it.
type ErrorRecord struct {
	Time    time.Time `json:"time"`             // when the run ended
	JobID   int64     `json:"job_id"`           // the job's ID
	Key     string    `json:"key,omitempty"`    // the job's pending key, if any
	Target  string    `json:"target,omitempty"` // the job's target, if any
	Attempt int       `json:"attempt"`          // the number of the run that failed
	Error   string    `json:"error"`            // the handler's error text, at most 512 bytes
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
	limSeen   uint64 // the same three for refusals at WithMaxPending
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
		o.sampling = DefaultMetricsSampling
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
// job's wait and reports whether the run is timed, and when it started.
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
	if timed {
		q.emit(EventStarted, job, nil, 0)
	}
	return start, timed
}

// finishRun records the outcome of a run (finish) and, for a timed run
// (took > 0), its duration in the run histogram under that outcome. The
// outcome is read from the worker's own counters, which only this
// goroutine writes.
func (q *Queue[T]) finishRun(w *worker[T], job *Job[T], err error, took time.Duration) {
	c := q.obs.prom
	if c == nil || took <= 0 {
		q.finish(w, job, err, took)
		return
	}
	done, retried, dead := w.ctr.done.Load(), w.ctr.retried.Load(), w.ctr.dead.Load()
	q.finish(w, job, err, took)
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
	o.send(Event{Kind: kind, Time: q.clock.Now(), JobID: job.ID, Key: job.Key, Target: job.Target,
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

// recordError keeps a job error in the ring.
func (o *observers) recordError(id int64, key, target string, attempt int, err error, now time.Time) {
	msg := err.Error()
	if len(msg) > maxErrorLen {
		msg = strings.ToValidUTF8(msg[:maxErrorLen-3], "") + "..."
	}
	rec := ErrorRecord{Time: now, JobID: id, Key: key, Target: target, Attempt: attempt, Error: msg}
	o.errMu.Lock()
	if len(o.errs) < maxRecentErrors {
		o.errs = append(o.errs, rec)
	} else {
		o.errs[o.errAt%maxRecentErrors] = rec
	}
	o.errAt++
	o.errMu.Unlock()
}

// recentErrors returns the ring, newest first.
func (o *observers) recentErrors() []ErrorRecord {
	o.errMu.Lock()
	defer o.errMu.Unlock()
	n := len(o.errs)
	out := make([]ErrorRecord, n)
	for i := range n {
		// errAt-1 is the newest slot once the ring has wrapped; before
		// that, errAt == n and this is a plain reversal.
		out[i] = o.errs[((o.errAt-1-i)%n+n)%n]
	}
	return out
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
		o.log.WarnContext(ctx, "pending-job limit reached (WithMaxPending): refusing jobs", "dropped", n-o.limSeen, "dropped_limit_total", n)
	case n == o.limSeen && o.limiting:
		o.limiting = false
		o.log.InfoContext(ctx, "below the pending-job limit: accepting jobs again", "dropped", n-o.limStart, "dropped_limit_total", n)
	}
	o.limSeen = n
}

// collector exports a queue's state. Gauges and counters are read at
// scrape time from the queue's own counters; only the duration histograms
// are updated as jobs run.
type collector struct {
	stats      func() Stats
	waitTime   prometheus.Histogram
	runTime    *prometheus.HistogramVec
	runDone    prometheus.Observer
	runRetried prometheus.Observer
	runDead    prometheus.Observer
	descs      map[string]*prometheus.Desc
}

// durationBuckets span a no-op handler (0.1 ms) to a slow upstream (60 s).
var durationBuckets = []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 10, 60}

// targetStates are the values of the state label of the target metrics.
var targetStates = [...]string{"suspended", "disabled", "breaker_open", "breaker_half_open"}

func newCollector[T any](q *Queue[T]) *collector {
	c := &collector{
		stats: q.Stats,
		waitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "queue_job_wait_seconds", Help: "Time from a job becoming due to its handler starting (sampled, see WithMetricsSampling).",
			Buckets: durationBuckets}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "queue_job_run_seconds", Help: "Handler run time by outcome: done, retried or dead (sampled, see WithMetricsSampling).",
			Buckets: durationBuckets}, []string{"outcome"}),
		descs: map[string]*prometheus.Desc{},
	}
	// Resolved once, so that an observation costs no label lookup, and so
	// that every outcome's series exists from the start.
	c.runDone = c.runTime.WithLabelValues("done")
	c.runRetried = c.runTime.WithLabelValues("retried")
	c.runDead = c.runTime.WithLabelValues("dead")
	d := func(name, help string, labels ...string) {
		c.descs[name] = prometheus.NewDesc(name, help, labels, nil)
	}
	// Gauges.
	d("queue_depth", "Jobs ready to run (the ready queue's length).")
	d("queue_ready_jobs", "Jobs ready to run, by priority.", "priority")
	d("queue_capacity", "Capacity of the ready queue.")
	d("queue_fill_ratio", "Ready jobs divided by capacity, 0 to 1.")
	d("queue_scheduled_jobs", "Jobs waiting for their time, retries included.")
	d("queue_running_jobs", "Jobs whose handler is running.")
	d("queue_pending_keys", "Pending keys held by ready, scheduled or running jobs.")
	d("queue_workers", "Active workers.")
	d("queue_workers_max", "Most workers the pool may scale to.")
	d("queue_targets", "Targets in each state: suspended, disabled, breaker_open, breaker_half_open.", "state")
	d("queue_target_state", "1 when the target is in the state; series only for targets in some state, at most 100 targets.", "target", "state")
	d("queue_store_healthy", "1 when the store's backend is reachable.")
	d("queue_store_leader", "1 when this process runs the store's maintenance.")
	// Counters.
	d("queue_jobs_enqueued_total", "Jobs accepted by Enqueue, coalesced reruns included.")
	d("queue_jobs_coalesced_total", "Jobs accepted as the single rerun of a running key.")
	d("queue_jobs_dropped_total", "Jobs refused by Enqueue, by reason: full (the ready queue, ErrQueueFull) or limit (WithMaxPending, ErrPendingLimit).", "reason")
	d("queue_jobs_finished_total", "Accepted jobs that ended, by outcome: done, dead or cancelled.", "outcome")
	d("queue_job_failures_total", "Handler runs that returned an error or panicked.")
	d("queue_job_retries_total", "Jobs scheduled to run again after a failed run or RetryAfter.")
	d("queue_job_panics_total", "Handler panics recovered (also counted as failures).")
	d("queue_jobs_requeued_total", "Due jobs rescheduled because the ready queue was full.")
	d("queue_jobs_deferred_total", "Claimed jobs put back without using an attempt (target suspended or busy, shutdown).")
	d("queue_jobs_rescued_total", "Jobs returned to the queue after their lease expired (durable stores).")
	d("queue_rate_limited_total", "Requests refused by Admit.")
	d("queue_throttled_targets_total", "Targets left out of a Fanout by throttling.")
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	c.waitTime.Describe(ch)
	c.runTime.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	g := func(name string, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.GaugeValue, v, lv...)
	}
	n := func(name string, v uint64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(c.descs[name], prometheus.CounterValue, float64(v), lv...)
	}
	g("queue_depth", float64(st.Depth))
	for p, v := range st.ReadyByPriority {
		g("queue_ready_jobs", float64(v), p)
	}
	g("queue_capacity", float64(st.Capacity))
	g("queue_fill_ratio", st.FillPct/100)
	g("queue_scheduled_jobs", float64(st.Scheduled))
	g("queue_running_jobs", float64(st.Running))
	g("queue_pending_keys", float64(st.PendingKeys))
	g("queue_workers", float64(st.Workers))
	g("queue_workers_max", float64(st.MaxWorkers))
	g("queue_store_healthy", b2f(st.Store.Healthy))
	g("queue_store_leader", b2f(st.Store.Leader))

	var counts [len(targetStates)]int
	series := 0
	for _, t := range st.Targets {
		in := [len(targetStates)]bool{!t.SuspendedUntil.IsZero(), t.Disabled, t.Breaker == "open", t.Breaker == "half-open"}
		inState := false
		for i, v := range in {
			if v {
				counts[i]++
				inState = true
			}
		}
		if !inState || series == maxTargetSeries {
			continue
		}
		series++
		for i, v := range in {
			g("queue_target_state", b2f(v), t.Name, targetStates[i])
		}
	}
	for i, s := range targetStates {
		g("queue_targets", float64(counts[i]), s)
	}

	n("queue_jobs_enqueued_total", st.Enqueued)
	n("queue_jobs_coalesced_total", st.Coalesced)
	n("queue_jobs_dropped_total", st.DroppedFull, "full")
	n("queue_jobs_dropped_total", st.DroppedLimit, "limit")
	n("queue_jobs_finished_total", st.Done, "done")
	n("queue_jobs_finished_total", st.Dead, "dead")
	n("queue_jobs_finished_total", st.Cancelled, "cancelled")
	n("queue_job_failures_total", st.Failed)
	n("queue_job_retries_total", st.Retried)
	n("queue_job_panics_total", st.Panics)
	n("queue_jobs_requeued_total", st.Requeued)
	n("queue_jobs_deferred_total", st.Deferred)
	n("queue_jobs_rescued_total", st.Rescued)
	n("queue_rate_limited_total", st.RateLimited)
	n("queue_throttled_targets_total", st.Throttled)
	c.waitTime.Collect(ch)
	c.runTime.Collect(ch)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var _ prometheus.Collector = (*collector)(nil)
