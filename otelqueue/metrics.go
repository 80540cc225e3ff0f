package otelqueue

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/queuekit/queue"
)

// StatsSource is what [Instrumentation.ObserveQueue] reads: a
// *queue.Queue[T] of any T.
type StatsSource interface {
	Stats() queue.Stats
}

// ErrNoMeterProvider is returned by [Instrumentation.ObserveQueue] when
// New was not given [WithMeterProvider].
var ErrNoMeterProvider = errors.New("otelqueue: ObserveQueue: metrics are off (New without WithMeterProvider)")

// ObserveQueue reports q's state at each collection of the meter
// provider, read from one q.Stats() call, with the attribute queue=<name>
// (the name of queue.WithName), as the queue's Prometheus collectors do
// (queue.WithMetrics), under the same names:
//
//	queue_depth                  gauge    ready jobs
//	queue_ready_jobs             gauge    ready jobs, by priority
//	queue_scheduled_jobs         gauge    jobs waiting for their time
//	queue_running_jobs           gauge    jobs whose handler runs in this process
//	queue_workers                gauge    active workers
//	queue_jobs_enqueued          counter  jobs accepted by Enqueue
//	queue_jobs_finished          counter  jobs that ended, by outcome: done, dead or cancelled
//	queue_job_failures           counter  runs that returned an error or panicked
//	queue_job_retries            counter  jobs scheduled to run again
//	queue_job_panics             counter  handler panics
//	queue_jobs_dropped           counter  jobs refused by Enqueue, by reason: full or limit
//	queue_jobs_deferred          counter  claimed jobs put back without using an attempt
//	queue_jobs_rescued           counter  jobs returned after their lease expired
//
// OpenTelemetry's Prometheus exporter appends "_total" to the counters,
// which gives the Prometheus collectors' names. The counters count from
// the queue's New, in this process. Call Unregister on the result when
// the queue has stopped. Without [WithMeterProvider] it returns
// [ErrNoMeterProvider].
func (in *Instrumentation) ObserveQueue(q StatsSource) (metric.Registration, error) {
	if in.meter == nil {
		return nil, ErrNoMeterProvider
	}
	m := in.meter
	var errs []error
	gauge := func(name, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithDescription(desc), metric.WithUnit("{job}"))
		errs = append(errs, err)
		return g
	}
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, err := m.Int64ObservableCounter(name, metric.WithDescription(desc), metric.WithUnit("{job}"))
		errs = append(errs, err)
		return c
	}
	depth := gauge("queue_depth", "Jobs ready to run (the ready queue's length).")
	ready := gauge("queue_ready_jobs", "Jobs ready to run, by priority.")
	scheduled := gauge("queue_scheduled_jobs", "Jobs waiting for their time, retries included.")
	running := gauge("queue_running_jobs", "Jobs whose handler is running.")
	workers := gauge("queue_workers", "Active workers.")
	enqueued := counter("queue_jobs_enqueued", "Jobs accepted by Enqueue, coalesced reruns included.")
	finished := counter("queue_jobs_finished", "Accepted jobs that ended, by outcome: done, dead or cancelled.")
	failures := counter("queue_job_failures", "Handler runs that returned an error or panicked.")
	retries := counter("queue_job_retries", "Jobs scheduled to run again after a failed run or RetryAfter.")
	panics := counter("queue_job_panics", "Handler panics recovered (also counted as failures).")
	dropped := counter("queue_jobs_dropped", "Jobs refused by Enqueue, by reason: full or limit.")
	deferred := counter("queue_jobs_deferred", "Claimed jobs put back without using an attempt.")
	rescued := counter("queue_jobs_rescued", "Jobs returned to the queue after their lease expired (durable stores).")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// The attribute sets are built once per queue name (a queue's name
	// does not change); mu guards them against two readers collecting
	// at once.
	var (
		mu                     sync.Mutex
		name                   string
		qa                     metric.ObserveOption
		done, dead, cancelled  metric.ObserveOption
		droppedFull, droppedLm metric.ObserveOption
		prio                   = map[string]metric.ObserveOption{}
	)
	with := func(kv ...attribute.KeyValue) metric.ObserveOption {
		return metric.WithAttributeSet(attribute.NewSet(append(kv, attribute.String("queue", name))...))
	}
	return m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := q.Stats()
		mu.Lock()
		defer mu.Unlock()
		if qa == nil || st.Name != name {
			name = st.Name
			qa = with()
			done, dead, cancelled = with(attribute.String("outcome", "done")), with(attribute.String("outcome", "dead")), with(attribute.String("outcome", "cancelled"))
			droppedFull, droppedLm = with(attribute.String("reason", "full")), with(attribute.String("reason", "limit"))
			clear(prio)
		}
		o.ObserveInt64(depth, int64(st.Depth), qa)
		for p, v := range st.Store.ReadyByPriority {
			a, ok := prio[p]
			if !ok {
				a = with(attribute.String("priority", p))
				prio[p] = a
			}
			o.ObserveInt64(ready, int64(v), a)
		}
		o.ObserveInt64(scheduled, int64(st.Store.Scheduled), qa)
		o.ObserveInt64(running, int64(st.Running), qa)
		o.ObserveInt64(workers, int64(st.Workers), qa)
		c := func(inst metric.Int64ObservableCounter, v uint64, a metric.ObserveOption) {
			o.ObserveInt64(inst, int64(v), a)
		}
		c(enqueued, st.Enqueued, qa)
		c(finished, st.Done, done)
		c(finished, st.Dead, dead)
		c(finished, st.Cancelled, cancelled)
		c(failures, st.Failed, qa)
		c(retries, st.Retried, qa)
		c(panics, st.Panics, qa)
		c(dropped, st.DroppedFull, droppedFull)
		c(dropped, st.DroppedLimit, droppedLm)
		c(deferred, st.Deferred, qa)
		c(rescued, st.Rescued, qa)
		return nil
	}, depth, ready, scheduled, running, workers, enqueued, finished, failures, retries, panics, dropped, deferred, rescued)
}
