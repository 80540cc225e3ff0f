package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// obsMarker is in every payload of the observability tests; no report,
// log or event may ever show it.
const obsMarker = "PAYLOAD-MARKER-10.0.0.1:6881"

// obsScenario is a scripted run that moves every counter Counts has.
// Build it inside a synctest bubble; newObsScenario returns with the queue
// running and quiescent, 30 s of fake time after it started.
//
// One worker, capacity 8. Before Start: a, b, c, d, f, g, h, i fill the
// ready queue; e is dropped (queue full); three Admit calls at 100 % fill
// (one admitted, two rate limited); a Fanout to three targets throttled to
// one; d is cancelled; target "bad" is disabled; s is scheduled an hour
// out. Then the worker runs:
//
//	a, h, i  done
//	b        RetryAfter 30s ("upstream busy"), then done at +30s
//	c        Permanent → dead
//	f        Overloaded → target "slow" suspended 5m, retried when it ends
//	g        its target "bad" is disabled → cancelled
type obsScenario struct {
	q   *queue.Queue[string]
	reg *prometheus.Registry
}

func newObsScenario(t *testing.T, opts ...queue.Option) *obsScenario {
	t.Helper()
	var mu sync.Mutex
	runs := map[string]int{}
	handler := func(ctx context.Context, j queue.Job[string]) error {
		mu.Lock()
		runs[j.Key]++
		n := runs[j.Key]
		mu.Unlock()
		switch j.Key {
		case "b":
			if n == 1 {
				return queue.RetryAfter(30*time.Second, errors.New("upstream busy"))
			}
		case "c":
			return queue.Permanent(errors.New("bad request"))
		case "f":
			return queue.Overloaded(errors.New("HTTP 429 Too Many Requests"))
		}
		return nil
	}
	reg := prometheus.NewPedanticRegistry()
	base := []queue.Option{
		queue.WithName("scenario"),
		queue.WithCapacity(8, 0),
		queue.WithWorkers(1, 1),
		queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 1, Burst: 1}),
		queue.WithFanout(0, 50, 1),
		queue.WithShuffle(rand.New(rand.NewPCG(1, 2)).Shuffle),
		queue.WithSuspend(5*time.Minute, nil),
		queue.WithMetrics(reg, 1),
	}
	q, err := queue.New(handler, append(base, opts...)...)
	require.NoError(t, err)
	ctx := context.Background()
	job := func(key, target string) queue.Job[string] {
		return queue.Job[string]{Key: key, Target: target, Payload: obsMarker + " for " + key}
	}
	for _, j := range []queue.Job[string]{job("a", ""), job("b", ""), job("c", ""), job("d", ""),
		job("f", "slow"), job("g", "bad"), job("h", ""), job("i", "")} {
		require.NoError(t, q.Enqueue(ctx, j))
	}
	require.ErrorIs(t, q.Enqueue(ctx, job("e", "")), queue.ErrQueueFull)
	require.NoError(t, q.Admit())
	require.ErrorIs(t, q.Admit(), queue.ErrRateLimited)
	require.ErrorIs(t, q.Admit(), queue.ErrRateLimited)
	require.Len(t, q.Fanout("k", []string{"t1", "t2", "t3"}), 1)
	n, err := q.Cancel(ctx, "d")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, q.Disable("bad", errors.New("HTTP 403 Forbidden")))
	require.NoError(t, q.EnqueueIn(ctx, job("s", ""), time.Hour))

	queuetest.Start(t, q)
	queuetest.Settle()
	queuetest.Advance(30 * time.Second)
	return &obsScenario{q: q, reg: reg}
}

func TestScenarioCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		st := queuetest.CheckCounts(t, s.q)
		assert.Equal(t, queue.Counts{Enqueued: 9, Done: 4, Retried: 2, Failed: 3, Dead: 1, Cancelled: 2,
			DroppedFull: 1, RateLimited: 2, Throttled: 2}, st.Counts)
		assert.Equal(t, 2, st.Store.Scheduled)
		assert.Equal(t, 2, st.Store.PendingKeys)
	})
}

// The scenario's exact values, as Prometheus sees them.
const scenarioMetrics = `
# HELP queue_capacity Capacity of the ready queue.
# TYPE queue_capacity gauge
queue_capacity 8
# HELP queue_depth Jobs ready to run (the ready queue's length).
# TYPE queue_depth gauge
queue_depth 0
# HELP queue_fill_ratio Ready jobs divided by capacity, 0 to 1.
# TYPE queue_fill_ratio gauge
queue_fill_ratio 0
# HELP queue_job_failures_total Handler runs that returned an error or panicked.
# TYPE queue_job_failures_total counter
queue_job_failures_total 3
# HELP queue_job_panics_total Handler panics recovered (also counted as failures).
# TYPE queue_job_panics_total counter
queue_job_panics_total 0
# HELP queue_job_retries_total Jobs scheduled to run again after a failed run or RetryAfter.
# TYPE queue_job_retries_total counter
queue_job_retries_total 2
# HELP queue_jobs_coalesced_total Jobs accepted as the single rerun of a running key.
# TYPE queue_jobs_coalesced_total counter
queue_jobs_coalesced_total 0
# HELP queue_jobs_deferred_total Claimed jobs put back without using an attempt (target suspended or busy, shutdown).
# TYPE queue_jobs_deferred_total counter
queue_jobs_deferred_total 0
# HELP queue_jobs_dropped_total Jobs refused by Enqueue, by reason: full (the ready queue, ErrQueueFull) or limit (WithCapacity's pending bound, ErrPendingLimit).
# TYPE queue_jobs_dropped_total counter
queue_jobs_dropped_total{reason="full"} 1
queue_jobs_dropped_total{reason="limit"} 0
# HELP queue_jobs_enqueued_total Jobs accepted by Enqueue, coalesced reruns included.
# TYPE queue_jobs_enqueued_total counter
queue_jobs_enqueued_total 9
# HELP queue_jobs_finished_total Accepted jobs that ended, by outcome: done, dead or cancelled.
# TYPE queue_jobs_finished_total counter
queue_jobs_finished_total{outcome="cancelled"} 2
queue_jobs_finished_total{outcome="dead"} 1
queue_jobs_finished_total{outcome="done"} 4
# HELP queue_jobs_requeued_total Due jobs rescheduled because the ready queue was full.
# TYPE queue_jobs_requeued_total counter
queue_jobs_requeued_total 0
# HELP queue_jobs_rescued_total Jobs returned to the queue after their lease expired (durable stores).
# TYPE queue_jobs_rescued_total counter
queue_jobs_rescued_total 0
# HELP queue_pending_keys Pending keys held by ready, scheduled or running jobs.
# TYPE queue_pending_keys gauge
queue_pending_keys 2
# HELP queue_rate_limited_total Requests refused by Admit.
# TYPE queue_rate_limited_total counter
queue_rate_limited_total 2
# HELP queue_ready_jobs Jobs ready to run, by priority.
# TYPE queue_ready_jobs gauge
queue_ready_jobs{priority="high"} 0
queue_ready_jobs{priority="low"} 0
queue_ready_jobs{priority="normal"} 0
# HELP queue_running_jobs Jobs whose handler is running.
# TYPE queue_running_jobs gauge
queue_running_jobs 0
# HELP queue_scheduled_jobs Jobs waiting for their time, retries included.
# TYPE queue_scheduled_jobs gauge
queue_scheduled_jobs 2
# HELP queue_store_healthy 1 when the store's backend is reachable.
# TYPE queue_store_healthy gauge
queue_store_healthy 1
# HELP queue_store_leader 1 when this process runs the store's maintenance.
# TYPE queue_store_leader gauge
queue_store_leader 1
# HELP queue_target_state 1 when the target is in the state; series only for targets in some state, at most 100 targets.
# TYPE queue_target_state gauge
queue_target_state{state="breaker_half_open",target="bad"} 0
queue_target_state{state="breaker_half_open",target="slow"} 0
queue_target_state{state="breaker_open",target="bad"} 0
queue_target_state{state="breaker_open",target="slow"} 0
queue_target_state{state="disabled",target="bad"} 1
queue_target_state{state="disabled",target="slow"} 0
queue_target_state{state="suspended",target="bad"} 0
queue_target_state{state="suspended",target="slow"} 1
# HELP queue_targets Targets in each state: suspended, disabled, breaker_open, breaker_half_open.
# TYPE queue_targets gauge
queue_targets{state="breaker_half_open"} 0
queue_targets{state="breaker_open"} 0
queue_targets{state="disabled"} 1
queue_targets{state="suspended"} 1
# HELP queue_throttled_targets_total Targets left out of a Fanout by throttling.
# TYPE queue_throttled_targets_total counter
queue_throttled_targets_total 2
# HELP queue_workers Active workers.
# TYPE queue_workers gauge
queue_workers 1
# HELP queue_workers_max Most workers the pool may scale to.
# TYPE queue_workers_max gauge
queue_workers_max 1
# HELP queue_workers_at_gate Workers waiting, holding no job, at the concurrency limit or in the claim gate.
# TYPE queue_workers_at_gate gauge
queue_workers_at_gate 0
# HELP queue_concurrency_limit Most jobs this process runs at once (SetConcurrency; queue_workers_max unless set).
# TYPE queue_concurrency_limit gauge
queue_concurrency_limit 1
# HELP queue_claim_gate_errors_total Errors returned by the claim gate (WithClaimGate).
# TYPE queue_claim_gate_errors_total counter
queue_claim_gate_errors_total 0
`

// scenarioMetricNames are the metrics of scenarioMetrics: all but the
// histograms, which TestMetricsHistograms checks.
func scenarioMetricNames() []string {
	var names []string
	for _, line := range strings.Split(scenarioMetrics, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names = append(names, strings.Fields(name)[0])
		}
	}
	return names
}

func TestMetricsScenarioExactValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		names := scenarioMetricNames()
		require.NoError(t, testutil.CollectAndCompare(queue.Collector(s.q), strings.NewReader(scenarioMetrics), names...))

		// Through the registry every series carries queue="scenario".
		withLabel := withQueueLabel(scenarioMetrics, "scenario")
		require.NoError(t, testutil.GatherAndCompare(s.reg, strings.NewReader(withLabel), names...))
	})
}

// withQueueLabel adds queue=<name> to every sample line of an exposition,
// keeping label names sorted as the registry does.
func withQueueLabel(expo, name string) string {
	lines := strings.Split(expo, "\n")
	for i, l := range lines {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		series, value, _ := strings.Cut(l, " ")
		metric, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
		pairs := []string{`queue="` + name + `"`}
		if labels != "" {
			pairs = append(pairs, strings.Split(labels, ",")...)
		}
		sort.Strings(pairs)
		lines[i] = metric + "{" + strings.Join(pairs, ",") + "} " + value
	}
	return strings.Join(lines, "\n")
}

// histogram is one histogram series as gathered.
type histogram struct {
	count   uint64
	sum     float64
	buckets []uint64 // cumulative counts, by upper bound
}

// histograms returns sample counts and sums by series, e.g.
// "queue_job_run_seconds{outcome=done}". It reads the gathered families
// through their getters, so that the core module need not require
// client_model for its tests.
func histograms(t *testing.T, c prometheus.Collector) map[string]histogram {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]histogram{}
	for _, mf := range mfs {
		if mf.GetType().String() != "HISTOGRAM" {
			continue
		}
		for _, m := range mf.GetMetric() {
			id := mf.GetName()
			for _, lp := range m.GetLabel() {
				id += "{" + lp.GetName() + "=" + lp.GetValue() + "}"
			}
			h := histogram{count: m.GetHistogram().GetSampleCount(), sum: m.GetHistogram().GetSampleSum()}
			for _, b := range m.GetHistogram().GetBucket() {
				h.buckets = append(h.buckets, b.GetCumulativeCount())
			}
			out[id] = h
		}
	}
	return out
}

func TestMetricsHistograms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		h := histograms(t, queue.Collector(s.q))
		// Seven runs: a, b twice, c, f, h, i. In the bubble no time passes
		// while a job waits or runs: waits are 0, runs the 1 ns floor.
		wait, ok := h["queue_job_wait_seconds"]
		require.True(t, ok)
		assert.EqualValues(t, 7, wait.count)
		assert.Zero(t, wait.sum)
		for outcome, n := range map[string]uint64{"done": 4, "retried": 2, "dead": 1} {
			run, ok := h["queue_job_run_seconds{outcome="+outcome+"}"]
			require.True(t, ok, outcome)
			assert.Equal(t, n, run.count, outcome)
			assert.InDelta(t, float64(n)*1e-9, run.sum, 1e-12, outcome)
			require.NotEmpty(t, run.buckets, outcome)
			assert.Equal(t, n, run.buckets[0], "%s: all in the first bucket", outcome)
		}
	})
}

// A run that takes time lands in the right bucket; the retry's delay is
// not mistaken for its run time.
func TestMetricsRunTimeIsHandlerTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		var calls atomic.Int32
		q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
			<-time.After(2 * time.Second) // the handler takes 2 s of fake time
			if calls.Add(1) == 1 {
				return queue.RetryAfter(5*time.Minute, errors.New("later"))
			}
			return nil
		}, queue.WithWorkers(1, 1), queue.WithMetrics(reg, 1))
		require.NoError(t, err)
		queuetest.Start(t, q)
		require.NoError(t, q.EnqueueIn(context.Background(), queue.Job[string]{Payload: "x"}, 3*time.Second))
		queuetest.Advance(10 * time.Minute)

		h := histograms(t, queue.Collector(q))
		assert.InDelta(t, 2.0, h["queue_job_run_seconds{outcome=retried}"].sum, 1e-9)
		assert.InDelta(t, 2.0, h["queue_job_run_seconds{outcome=done}"].sum, 1e-9)
		assert.EqualValues(t, 2, h["queue_job_wait_seconds"].count)
	})
}

func TestMetricsLint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		problems, err := testutil.CollectAndLint(queue.Collector(s.q))
		require.NoError(t, err)
		assert.Empty(t, problems)
		problems, err = testutil.GatherAndLint(s.reg)
		require.NoError(t, err)
		assert.Empty(t, problems)
	})
}

// Names follow the conventions: a queue_ prefix, _total on counters only,
// _seconds histograms, and the queue label everywhere.
func TestMetricsNamingConventions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newObsScenario(t)
		mfs, err := s.reg.Gather()
		require.NoError(t, err)
		require.NotEmpty(t, mfs)
		for _, mf := range mfs {
			name := mf.GetName()
			assert.True(t, strings.HasPrefix(name, "queue_"), name)
			switch mf.GetType().String() {
			case "COUNTER":
				assert.True(t, strings.HasSuffix(name, "_total"), "counter %s", name)
			case "HISTOGRAM":
				assert.True(t, strings.HasSuffix(name, "_seconds"), "histogram %s", name)
			case "GAUGE":
				assert.False(t, strings.HasSuffix(name, "_total"), "gauge %s", name)
			default:
				t.Errorf("%s: unexpected type %s", name, mf.GetType())
			}
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, lp := range m.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				assert.Equal(t, "scenario", labels["queue"], name)
			}
		}
	})
}

// Per-target series stay bounded however many targets there are; the
// queue_targets totals still count them all.
func TestMetricsTargetCardinalityBounded(t *testing.T) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil },
		queue.WithMetrics(prometheus.NewPedanticRegistry(), 0))
	require.NoError(t, err)
	for i := range 150 {
		require.NoError(t, q.Disable(fmt.Sprintf("t%03d", i), errors.New("rejected")))
	}
	c := queue.Collector(q)
	assert.Equal(t, 100*4, testutil.CollectAndCount(c, "queue_target_state"))
	require.NoError(t, testutil.CollectAndCompare(c, strings.NewReader(`
# HELP queue_targets Targets in each state: suspended, disabled, breaker_open, breaker_half_open.
# TYPE queue_targets gauge
queue_targets{state="breaker_half_open"} 0
queue_targets{state="breaker_open"} 0
queue_targets{state="disabled"} 150
queue_targets{state="suspended"} 0
`), "queue_targets"))
	require.NoError(t, q.Stop(context.Background()))
}

func TestMetricsTwoQueuesShareARegistry(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	noop := func(context.Context, queue.Job[int]) error { return nil }
	a, err := queue.New(noop, queue.WithName("announces"), queue.WithCapacity(100, 0), queue.WithMetrics(reg, 0))
	require.NoError(t, err)
	b, err := queue.New(noop, queue.WithName("scrapes"), queue.WithCapacity(200, 0), queue.WithMetrics(reg, 0))
	require.NoError(t, err)
	require.NoError(t, a.Enqueue(context.Background(), queue.Job[int]{Payload: 1}))

	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP queue_capacity Capacity of the ready queue.
# TYPE queue_capacity gauge
queue_capacity{queue="announces"} 100
queue_capacity{queue="scrapes"} 200
# HELP queue_depth Jobs ready to run (the ready queue's length).
# TYPE queue_depth gauge
queue_depth{queue="announces"} 1
queue_depth{queue="scrapes"} 0
`), "queue_capacity", "queue_depth"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
	require.NoError(t, a.Stop(context.Background()))
	require.NoError(t, b.Stop(context.Background()))
}

func TestMetricsRegistrationConflict(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	noop := func(context.Context, queue.Job[int]) error { return nil }
	first, err := queue.New(noop, queue.WithName("jobs"), queue.WithMetrics(reg, 0))
	require.NoError(t, err)

	_, err = queue.New(noop, queue.WithName("jobs"), queue.WithMetrics(reg, 0))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"jobs"`)
	var are prometheus.AlreadyRegisteredError
	assert.ErrorAs(t, err, &are)

	// Another name is fine; so is a nil registerer (metrics off).
	other, err := queue.New(noop, queue.WithName("other"), queue.WithMetrics(reg, 0))
	require.NoError(t, err)
	off, err := queue.New(noop, queue.WithName("jobs"), queue.WithMetrics(nil, 0))
	require.NoError(t, err)
	assert.Nil(t, queue.Collector(off))
	for _, q := range []*queue.Queue[int]{first, other, off} {
		require.NoError(t, q.Stop(context.Background()))
	}
}

func TestMetricsUnregisteredAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewPedanticRegistry()
		noop := func(context.Context, queue.Job[int]) error { return nil }
		q, err := queue.New(noop, queue.WithName("jobs"), queue.WithMetrics(reg, 0))
		require.NoError(t, err)
		require.NoError(t, q.Start(context.Background()))
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Payload: 1}))
		queuetest.Settle()
		mfs, err := reg.Gather()
		require.NoError(t, err)
		assert.NotEmpty(t, mfs)

		require.NoError(t, q.Stop(context.Background()))
		mfs, err = reg.Gather()
		require.NoError(t, err)
		assert.Empty(t, mfs, "every collector is unregistered once the queue has stopped")

		// The name is free again.
		again, err := queue.New(noop, queue.WithName("jobs"), queue.WithMetrics(reg, 0))
		require.NoError(t, err)
		require.NoError(t, again.Stop(context.Background()))
	})
}
