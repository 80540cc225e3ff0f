package queue

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Observability: event hooks, the recent-error ring, backlog warnings and
// Prometheus metrics. Counters are read from the queue's own counters at
// scrape time, so metrics add nothing to the hot path but the sampled
// duration histograms.

// DefaultMetricsSampling is how many jobs share one duration sample in the
// wait and run histograms (see WithMetricsSampling).
const DefaultMetricsSampling = 8

// maxRecentErrors bounds the recent-error ring.
const maxRecentErrors = 50

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
// (default: no metrics). A registration error is returned by New; the
// collectors are unregistered when the queue stops. The queue never uses
// the default registry on its own.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *config) error {
		c.metrics.reg = reg // nil means off
		return nil
	}
}

// WithMetricsSampling times one job in n for the wait and run duration
// histograms (default 8; 1 times every job). Counters are always exact.
// Timing every job costs two clock reads and two observations per job.
func WithMetricsSampling(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return optErr("WithMetricsSampling", n, "must be >= 1")
		}
		c.metrics.sampling = n
		return nil
	}
}

// WithObserver adds a hook that receives every lifecycle Event. Hooks run
// inline, on the goroutine where the event happened (a producer calling
// Enqueue, a worker), without any queue lock held: a hook may call the
// queue, but a slow hook slows that goroutine. Hooks never see payloads.
// Use it to add tracing or logging without the core depending on it.
func WithObserver(fn func(Event)) Option {
	return func(c *config) error {
		if fn == nil {
			return optErr("WithObserver", nil, "must not be nil")
		}
		c.metrics.hooks = append(c.metrics.hooks, fn)
		return nil
	}
}

// WithWarnDepth logs a warning once when the ready queue's depth reaches
// n, and once more when it falls back below (default 0: off). It is
// checked every scale interval.
func WithWarnDepth(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return optErr("WithWarnDepth", n, "must be >= 0 (0 turns it off)")
		}
		c.metrics.warnDepth = n
		return nil
	}
}

// ErrorRecord is one job error kept in the recent-error ring.
type ErrorRecord struct {
	Time    time.Time `json:"time"`
	JobID   int64     `json:"job_id"`
	Key     string    `json:"key,omitempty"`
	Target  string    `json:"target,omitempty"`
	Attempt int       `json:"attempt"`
	Error   string    `json:"error"`
}

type observers struct {
	active   bool // hooks or metrics want events
	timed    bool // hooks want started events and durations
	hooks    []func(Event)
	sampling uint32
	prom     *collector
	reg      prometheus.Registerer
	unreg    sync.Once

	errMu sync.Mutex
	errs  []ErrorRecord // ring, newest at errAt-1
	errAt int

	warnDepth int
	warned    bool // scaler goroutine only
	depth     func() int
	log       func(msg string, args ...any)
}

func newObservers[T any](q *Queue[T], cfg metricsConfig) (*observers, error) {
	o := &observers{hooks: cfg.hooks, warnDepth: cfg.warnDepth, depth: func() int { return q.store.Len() },
		log: func(msg string, args ...any) { q.log.Warn(msg, args...) }}
	o.sampling = uint32(cfg.sampling)
	if o.sampling == 0 {
		o.sampling = DefaultMetricsSampling
	}
	o.active = len(o.hooks) > 0 || cfg.reg != nil
	o.timed = len(o.hooks) > 0
	if cfg.reg != nil {
		o.reg = prometheus.WrapRegistererWith(prometheus.Labels{"queue": q.cfg.name}, cfg.reg)
		o.prom = newCollector(q)
		if err := o.reg.Register(o.prom); err != nil {
			return nil, optErr("WithMetrics", "registerer", "registering collectors: %v", err)
		}
	}
	return o, nil
}

// sample reports whether this job goes into the histograms: one in
// o.sampling, drawn from the runtime's per-thread generator, so that no
// two workers share a counter.
func (o *observers) sample() bool {
	return o.prom != nil && rand.Uint32()%o.sampling == 0
}

func (o *observers) unregister() {
	if o == nil || o.reg == nil {
		return
	}
	o.unreg.Do(func() { o.reg.Unregister(o.prom) })
}

// send delivers ev to the hooks and the metrics.
func (o *observers) send(ev Event) {
	for _, h := range o.hooks {
		h(ev)
	}
}

// emit reports an event about job. It is cheap when nobody listens.
func (q *Queue[T]) emit(kind EventKind, job *Job[T], err error, d time.Duration) {
	if !q.obs.active {
		return
	}
	if q.obs.prom != nil && (kind == EventDone || kind == EventDead || kind == EventRetried) && d > 0 {
		q.obs.prom.runTime.WithLabelValues(kind.String()).Observe(d.Seconds())
	}
	if len(q.obs.hooks) == 0 {
		return
	}
	q.obs.send(Event{Kind: kind, Time: q.clock.Now(), JobID: job.ID, Key: job.Key, Target: job.Target,
		Priority: job.Priority, Attempt: job.Attempt, Err: err, Delay: d})
}

// recordError keeps a job error in the ring.
func (o *observers) recordError(id int64, key, target string, attempt int, err error, now time.Time) {
	rec := ErrorRecord{Time: now, JobID: id, Key: key, Target: target, Attempt: attempt, Error: err.Error()}
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

// tick runs every scale interval: the backlog warning.
func (o *observers) tick() {
	if o.warnDepth <= 0 {
		return
	}
	d := o.depth()
	switch {
	case !o.warned && d >= o.warnDepth:
		o.warned = true
		o.log("backlog above warn depth", "depth", d, "warn_depth", o.warnDepth)
	case o.warned && d < o.warnDepth:
		o.warned = false
		o.log("backlog recovered below warn depth", "depth", d, "warn_depth", o.warnDepth)
	}
}

// collector exports a queue's state. Gauges and counters are read at
// scrape time from the queue's own counters; only the duration histograms
// are updated as jobs run.
type collector struct {
	stats    func() Stats
	waitTime prometheus.Histogram
	runTime  *prometheus.HistogramVec
	descs    map[string]*prometheus.Desc
}

var durationBuckets = []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 10, 60}

func newCollector[T any](q *Queue[T]) *collector {
	c := &collector{
		stats: q.Stats,
		waitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "queue_job_wait_seconds", Help: "Time from a job becoming due to its start (sampled, see WithMetricsSampling).",
			Buckets: durationBuckets}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "queue_job_run_seconds", Help: "Handler run time by outcome (sampled, see WithMetricsSampling).",
			Buckets: durationBuckets}, []string{"outcome"}),
		descs: map[string]*prometheus.Desc{},
	}
	d := func(name, help string, labels ...string) {
		c.descs[name] = prometheus.NewDesc(name, help, labels, nil)
	}
	d("queue_depth", "Jobs ready to run.")
	d("queue_ready_jobs", "Jobs ready to run, by priority.", "priority")
	d("queue_capacity", "Capacity of the ready queue.")
	d("queue_fill_ratio", "Ready jobs divided by capacity (0..1).")
	d("queue_scheduled_jobs", "Jobs waiting for their time.")
	d("queue_pending_keys", "Pending keys held by queued, scheduled or running jobs.")
	d("queue_running_jobs", "Jobs whose handler is running.")
	d("queue_workers", "Active workers.")
	d("queue_workers_max", "Maximum workers.")
	d("queue_jobs_total", "Jobs by event: enqueued, done, failed, retried, dead, cancelled, coalesced, dropped, requeued, deferred, rescued.", "event")
	d("queue_handler_panics_total", "Handler panics recovered.")
	d("queue_rate_limited_total", "Requests refused by Admit.")
	d("queue_throttled_targets_total", "Targets left out of a fan-out by throttling.")
	d("queue_target_state", "1 when a target is in the state (suspended, disabled, breaker_open, breaker_half_open); at most 100 targets.", "target", "state")
	d("queue_store_healthy", "1 when the store's backend is reachable.")
	d("queue_store_leader", "1 when this process runs the store's maintenance.")
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
	g("queue_pending_keys", float64(st.PendingKeys))
	g("queue_running_jobs", float64(st.Running))
	g("queue_workers", float64(st.Workers))
	g("queue_workers_max", float64(st.MaxWorkers))
	for _, e := range []struct {
		name string
		v    uint64
	}{{"enqueued", st.Enqueued}, {"done", st.Done}, {"failed", st.Failed}, {"retried", st.Retried},
		{"dead", st.Dead}, {"cancelled", st.Cancelled}, {"coalesced", st.Coalesced}, {"dropped", st.DroppedFull},
		{"requeued", st.Requeued}, {"deferred", st.Deferred}, {"rescued", st.Rescued}} {
		n("queue_jobs_total", e.v, e.name)
	}
	n("queue_handler_panics_total", st.Panics)
	n("queue_rate_limited_total", st.RateLimited)
	n("queue_throttled_targets_total", st.Throttled)
	for i, t := range st.Targets {
		if i == maxTargetSeries {
			break
		}
		g("queue_target_state", b2f(!t.SuspendedUntil.IsZero()), t.Name, "suspended")
		g("queue_target_state", b2f(t.Disabled), t.Name, "disabled")
		g("queue_target_state", b2f(t.Breaker == "open"), t.Name, "breaker_open")
		g("queue_target_state", b2f(t.Breaker == "half-open"), t.Name, "breaker_half_open")
	}
	g("queue_store_healthy", b2f(st.Store.Healthy))
	g("queue_store_leader", b2f(st.Store.Leader))
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
