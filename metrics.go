package queue

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// defaultMetricsSampling is how many jobs share one duration sample in
// the wait and run histograms (see WithMetrics).
const defaultMetricsSampling = 32

// maxTargetSeries bounds the per-target metric series.
const maxTargetSeries = 100

// WithMetrics registers the queue's Prometheus collectors on reg, with a
// constant label queue=<name> so several queues may share a registry
// (default: no metrics; a nil reg also means none). New returns the error
// of a failed registration (two queues of one name on one registry); it
// wraps prometheus.AlreadyRegisteredError when that is the cause. The
// collectors are unregistered when the queue has stopped, so a queue of
// the same name may then take its place. The queue never uses the default
// registry on its own; pass prometheus.DefaultRegisterer to use it.
//
// sampleEvery sets how many jobs share one sample in the duration
// histograms (default 32; 0 keeps it, 1 times every job): the runs of one
// job in sampleEvery (by job ID) go into queue_job_run_seconds, and one
// immediate job in sampleEvery (at random) is stamped at Enqueue for
// queue_job_wait_seconds. Scheduled and retried jobs carry their due time
// anyway, so their wait is always observed. Counters and gauges are always
// exact. A sampled job costs up to five clock reads and two histogram
// observations, which on a machine with a slow clock is a large share of
// a no-op job; 32 keeps metrics within a few percent of the queue's
// throughput, and 1 suits tests that count observations.
func WithMetrics(reg prometheus.Registerer, sampleEvery int) Option {
	return func(c *config) error {
		if sampleEvery < 0 {
			return optErr("WithMetrics", sampleEvery, "sampleEvery must be >= 1 (0 keeps the default)")
		}
		c.metrics.reg = reg // nil means off
		if sampleEvery != 0 {
			c.metrics.sampling = sampleEvery
		}
		return nil
	}
}

// collector exports a queue's state. Gauges and counters are read at
// scrape time from the queue's own counters; only the duration histograms
// are updated as jobs run.
type collector struct {
	stats      func() Stats
	periodic   func() []periodicSnapshot
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
		stats:    q.Stats,
		periodic: q.per.snapshot,
		waitTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "queue_job_wait_seconds", Help: "Time from a job becoming due to its handler starting (sampled, see WithMetrics).",
			Buckets: durationBuckets}),
		runTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "queue_job_run_seconds", Help: "Handler run time by outcome: done, retried or dead (sampled, see WithMetrics).",
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
	d("queue_concurrency_limit", "Most jobs this process runs at once (SetConcurrency; queue_workers_max unless set).")
	d("queue_workers_at_gate", "Workers waiting, holding no job, at the concurrency limit or in the claim gate.")
	d("queue_targets", "Targets in each state: suspended, disabled, breaker_open, breaker_half_open.", "state")
	d("queue_target_state", "1 when the target is in the state; series only for targets in some state, at most 100 targets.", "target", "state")
	d("queue_store_healthy", "1 when the store's backend is reachable.")
	d("queue_store_leader", "1 when this process runs the store's maintenance.")
	// Counters.
	d("queue_jobs_enqueued_total", "Jobs accepted by Enqueue, coalesced reruns included.")
	d("queue_jobs_coalesced_total", "Jobs accepted as the single rerun of a running key.")
	d("queue_jobs_dropped_total", "Jobs refused by Enqueue, by reason: full (the ready queue, ErrQueueFull) or limit (WithCapacity's pending bound, ErrPendingLimit).", "reason")
	d("queue_jobs_finished_total", "Accepted jobs that ended, by outcome: done, dead or cancelled.", "outcome")
	d("queue_job_failures_total", "Handler runs that returned an error or panicked.")
	d("queue_job_retries_total", "Jobs scheduled to run again after a failed run or RetryAfter.")
	d("queue_job_panics_total", "Handler panics recovered (also counted as failures).")
	d("queue_jobs_requeued_total", "Due jobs rescheduled because the ready queue was full.")
	d("queue_jobs_deferred_total", "Claimed jobs put back without using an attempt (target suspended or busy, shutdown).")
	d("queue_jobs_rescued_total", "Jobs returned to the queue after their lease expired (durable stores).")
	d("queue_periodic_next_run_timestamp_seconds", "The next period of each periodic job, in seconds since the epoch (0: never); at most 100 names.", "name")
	d("queue_periodic_last_run_timestamp_seconds", "The latest period of each periodic job that came, in seconds since the epoch (0: none yet).", "name")
	d("queue_periodic_enqueued_total", "Periods whose run this process enqueued, by periodic job.", "name")
	d("queue_periodic_skipped_total", "Missed periods not run (PeriodicOptions.CatchUp), by periodic job.", "name")
	d("queue_periodic_runs_total", "Runs of periodic jobs in this process, by periodic job and outcome: done, retried, dead or cancelled.", "name", "outcome")
	d("queue_rate_limited_total", "Requests refused by Admit.")
	d("queue_throttled_targets_total", "Targets left out of a Fanout by throttling.")
	d("queue_claim_gate_errors_total", "Errors returned by the claim gate (WithClaimGate).")
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
	for p, v := range st.Store.ReadyByPriority {
		g("queue_ready_jobs", float64(v), p)
	}
	g("queue_capacity", float64(st.Capacity))
	g("queue_fill_ratio", st.FillPct/100)
	g("queue_scheduled_jobs", float64(st.Store.Scheduled))
	g("queue_running_jobs", float64(st.Running))
	g("queue_pending_keys", float64(st.Store.PendingKeys))
	g("queue_workers", float64(st.Workers))
	g("queue_workers_max", float64(st.MaxWorkers))
	g("queue_concurrency_limit", float64(st.Concurrency))
	g("queue_workers_at_gate", float64(st.AtGate))
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

	c.collectPeriodic(g, n)

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
	n("queue_claim_gate_errors_total", st.GateErrors)
	c.waitTime.Collect(ch)
	c.runTime.Collect(ch)
}

// collectPeriodic sends the periodic jobs' series, for at most
// maxTargetSeries names.
func (c *collector) collectPeriodic(g func(string, float64, ...string), n func(string, uint64, ...string)) {
	ts := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixNano()) / 1e9
	}
	snap := c.periodic()
	for i, p := range snap {
		if i == maxTargetSeries {
			break
		}
		g("queue_periodic_next_run_timestamp_seconds", ts(p.Next), p.Name)
		g("queue_periodic_last_run_timestamp_seconds", ts(p.Last), p.Name)
		n("queue_periodic_enqueued_total", uint64(p.Runs), p.Name)
		n("queue_periodic_skipped_total", p.skipped, p.Name)
		for j, o := range periodicOutcomes {
			n("queue_periodic_runs_total", p.ended[j], p.Name, o)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var _ prometheus.Collector = (*collector)(nil)
