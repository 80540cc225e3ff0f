// Package otelqueue traces the jobs of a [queue.Queue] with OpenTelemetry:
// from the request that enqueued a job to every run of it, in this process
// or in another one after a durable store (pgstore, redisstore).
//
//	otq := otelqueue.New() // the global tracer provider and propagator
//	q, err := queue.New(handler, append(otq.Options(), queue.WithName("mail"))...)
//
// # Enqueue
//
// At Enqueue (and at each period of a periodic job) otelqueue starts a
// short PRODUCER span "create <queue>", a child of the span in the
// caller's ctx (a new trace when there is none), and injects its context
// into the job's metadata ([queue.Job].Meta) with the propagator: by
// default otel.GetTextMapPropagator(), whose W3C trace context puts a
// "traceparent" key there. The metadata travels with the job through
// every store and is handed back at every run, retry and rescue. The span
// covers the hook only: the queue validates and stores the job after it,
// so a job that Enqueue then refuses (ErrDuplicate, ErrQueueFull) leaves a
// create span without a run.
//
// # Runs
//
// Each run of the job gets a CONSUMER span "process <queue>" in the
// handler's ctx, linked to the job's create span (the default: each run
// is a trace of its own, as OpenTelemetry's messaging conventions suggest
// for work done later), or a child of it with [WithParent] (the request,
// the create span and every run, retries and rescues included, are then
// one trace). The span carries the messaging semantic conventions
// (messaging.system "queuekit", messaging.operation.name "process",
// messaging.destination.name the queue's name, messaging.message.id the
// job's ID) and queuekit.job.attempt, queuekit.job.max_attempts and, when
// set, queuekit.job.key, queuekit.job.target and queuekit.job.priority.
//
// When the run ends the span records its outcome: the attribute
// queuekit.job.outcome (done, retried, dead, cancelled or deferred) and an
// event "queuekit.job.<outcome>" (a retry's carries queuekit.job.retry_in,
// the delay in seconds). A handler's error is recorded as an exception
// event, a panic's with its stack (exception.stacktrace) and error.type
// "panic"; a run that failed (retried or dead) ends with status Error, the
// others leave the status unset.
//
// The run's trace_id and span_id are added to [queue.JobInfo].LogAttrs,
// so the lines a handler logs with [queue.Logger](ctx) carry them and a
// log backend joins them to the trace.
//
// # Metrics
//
// With [WithMeterProvider], every run's duration goes into the histogram
// queue_job_run_seconds, and [Instrumentation.ObserveQueue] reports a
// queue's depth and counters read from its Stats at each collection. The
// names and labels are the ones of the queue's Prometheus collectors
// (queue.WithMetrics) where both have the metric; counters are named
// without "_total", which OpenTelemetry's Prometheus exporter appends.
//
// # Cost
//
// With a no-op tracer provider ([go.opentelemetry.io/otel/trace/noop])
// otelqueue starts no span: it only carries a trace context that the
// caller's ctx already holds, so a job enqueued outside any trace costs
// two function calls more per run. docs/benchmarks.md has the figures,
// with the SDK and a batch exporter too.
package otelqueue
