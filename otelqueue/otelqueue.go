package otelqueue

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/queuekit/queue"
)

// ScopeName is the instrumentation scope of otelqueue's tracer and meter.
const ScopeName = "github.com/queuekit/queue/otelqueue"

// System is the value of the messaging.system attribute of every span.
const System = "queuekit"

// The attributes otelqueue sets beside the messaging conventions.
const (
	AttrAttempt     = attribute.Key("queuekit.job.attempt")      // int: the run's attempt, 1 for the first
	AttrMaxAttempts = attribute.Key("queuekit.job.max_attempts") // int: the attempts the job may use
	AttrKey         = attribute.Key("queuekit.job.key")          // string: the job's pending key, when set
	AttrTarget      = attribute.Key("queuekit.job.target")       // string: the job's target, when set
	AttrPriority    = attribute.Key("queuekit.job.priority")     // string: the job's priority label, when set
	AttrOutcome     = attribute.Key("queuekit.job.outcome")      // string: done, retried, dead, cancelled or deferred
	AttrRetryIn     = attribute.Key("queuekit.job.retry_in")     // float64: seconds before the next attempt (event queuekit.job.retried)
)

// Option configures [New].
type Option func(*config)

type config struct {
	tp     trace.TracerProvider
	mp     metric.MeterProvider
	prop   propagation.TextMapPropagator
	parent bool
}

// WithTracerProvider sets the tracer provider (default
// otel.GetTracerProvider(), read when New is called; nil keeps it). With
// a [noop.TracerProvider] no span is started (see the package's Cost).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	}
}

// WithPropagator sets the propagator that writes the trace context into
// a job's metadata at Enqueue and reads it back at each run (nil keeps
// the default). The default is otel.GetTextMapPropagator() if a program
// has set one (otel.SetTextMapPropagator) when New is called, and W3C
// trace context (propagation.TraceContext) if not: the global default
// propagates nothing, which would cut every trace at the queue. The
// propagator must be the same in every process of a queue.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) {
		if p != nil {
			c.prop = p
		}
	}
}

// WithMeterProvider turns metrics on, with the meter provider mp
// (default: no metrics; nil keeps the setting). See
// [Instrumentation.ObserveQueue] for what is reported.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp != nil {
			c.mp = mp
		}
	}
}

// WithParent makes each run's span a child of the job's create span, so
// that the request that enqueued the job and every run of it, retries and
// rescues included, are one trace. The default (false) starts each run's
// span as the root of a trace of its own, with a link to the create span.
func WithParent(on bool) Option {
	return func(c *config) { c.parent = on }
}

// Instrumentation traces a queue's jobs; it may serve several queues,
// which its spans and metrics tell apart by their names (queue.WithName).
// Its methods are safe for concurrent use.
type Instrumentation struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	parent bool
	noop   bool // a no-op tracer provider: carry contexts, start no span
	meter  metric.Meter
	runs   metric.Float64Histogram // nil without metrics
	last   atomic.Pointer[named]   // the last queue's span names and metric attributes
	named  sync.Map                // queue name → *named, for an Instrumentation of several queues
}

// named holds what otelqueue derives from a queue's name, so that a run
// builds no string.
type named struct {
	queue   string
	create  string // span name of an Enqueue
	process string // span name of a run
	dest    attribute.KeyValue
	outcome map[queue.EventKind]metric.MeasurementOption
}

// New returns the instrumentation that [Instrumentation.Options] hands to
// queue.New or queue.NewWithStore.
func New(opts ...Option) *Instrumentation {
	c := config{tp: otel.GetTracerProvider(), prop: otel.GetTextMapPropagator()}
	if len(c.prop.Fields()) == 0 {
		c.prop = propagation.TraceContext{}
	}
	for _, o := range opts {
		o(&c)
	}
	in := &Instrumentation{
		tracer: c.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:   c.prop,
		parent: c.parent,
	}
	_, in.noop = c.tp.(noop.TracerProvider)
	if c.mp != nil {
		in.meter = c.mp.Meter(ScopeName, metric.WithSchemaURL(semconv.SchemaURL))
		h, err := in.meter.Float64Histogram("queue_job_run_seconds",
			metric.WithDescription("Handler run time by outcome: done, retried, dead, cancelled or deferred."),
			metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(durationBuckets...))
		if err != nil {
			otel.Handle(err)
		} else {
			in.runs = h
		}
	}
	return in
}

// durationBuckets are queue_job_run_seconds's buckets, the Prometheus
// collector's: a no-op handler (0.1 ms) to a slow upstream (60 s).
var durationBuckets = []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 10, 60}

// Options returns the queue options that instrument a queue: an enqueue
// hook ([Instrumentation.EnqueueHook]) and a middleware
// ([Instrumentation.Middleware]). Pass them to queue.New or
// queue.NewWithStore before any middleware of your own that should run
// inside the job's span.
func (in *Instrumentation) Options() []queue.Option {
	return []queue.Option{queue.WithEnqueueHook(in.EnqueueHook), queue.WithMiddleware(in.Middleware)}
}

// names returns the span names and attributes of queue name.
func (in *Instrumentation) names(name string) *named {
	if n := in.last.Load(); n != nil && n.queue == name {
		return n
	}
	if n, ok := in.named.Load(name); ok {
		in.last.Store(n.(*named))
		return n.(*named)
	}
	n := &named{queue: name, create: "create " + name, process: "process " + name,
		dest: semconv.MessagingDestinationName(name), outcome: map[queue.EventKind]metric.MeasurementOption{}}
	for _, k := range []queue.EventKind{queue.EventDone, queue.EventRetried, queue.EventDead, queue.EventCancelled, queue.EventDeferred} {
		n.outcome[k] = metric.WithAttributeSet(attribute.NewSet(attribute.String("queue", name), attribute.String("outcome", k.String())))
	}
	in.named.Store(name, n)
	in.last.Store(n)
	return n
}

// EnqueueHook is the enqueue hook of [Instrumentation.Options]: it starts
// and ends the job's create span and injects its context into job.Meta.
// With a no-op tracer provider it injects the context of ctx, if any.
func (in *Instrumentation) EnqueueHook(ctx context.Context, job *queue.JobInfo) error {
	if in.noop {
		in.prop.Inject(ctx, &job.Meta)
		return nil
	}
	n := in.names(job.Queue)
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, semconv.MessagingSystemKey.String(System), semconv.MessagingOperationName("create"),
		semconv.MessagingOperationTypeCreate, n.dest)
	attrs = jobAttrs(attrs, job)
	ctx, span := in.tracer.Start(ctx, n.create, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	in.prop.Inject(ctx, &job.Meta)
	span.End()
	return nil
}

func jobAttrs(attrs []attribute.KeyValue, job *queue.JobInfo) []attribute.KeyValue {
	if job.Key != "" {
		attrs = append(attrs, AttrKey.String(job.Key))
	}
	if job.Target != "" {
		attrs = append(attrs, AttrTarget.String(job.Target))
	}
	if job.Priority != "" {
		attrs = append(attrs, AttrPriority.String(job.Priority))
	}
	return attrs
}

// Middleware is the middleware of [Instrumentation.Options]: it runs next
// in the run's span (see the package documentation) and records the
// run's outcome and, with metrics, its duration.
func (in *Instrumentation) Middleware(ctx context.Context, job *queue.JobInfo, next func(context.Context)) {
	if !job.Meta.IsZero() {
		ctx = in.prop.Extract(ctx, &job.Meta)
	}
	if in.noop {
		// No span: the job's context, if any, passes through to the
		// handler, and so do its IDs to the log.
		addLogAttrs(job, trace.SpanContextFromContext(ctx))
		in.timed(ctx, job, next)
		return
	}
	n := in.names(job.Queue)
	attrs := make([]attribute.KeyValue, 0, 11)
	attrs = append(attrs, semconv.MessagingSystemKey.String(System), semconv.MessagingOperationName("process"),
		semconv.MessagingOperationTypeProcess, n.dest, semconv.MessagingMessageID(strconv.FormatInt(job.ID, 10)),
		AttrAttempt.Int(job.Attempt), AttrMaxAttempts.Int(job.MaxAttempts))
	attrs = jobAttrs(attrs, job)
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}
	if !in.parent {
		opts = append(opts, trace.WithNewRoot())
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := in.tracer.Start(ctx, n.process, opts...)
	defer span.End() // also if next panics, which the queue then recovers
	addLogAttrs(job, span.SpanContext())
	in.timed(ctx, job, next)
	if span.IsRecording() {
		recordOutcome(span, job)
	}
}

// timed runs next and, with metrics, records its duration.
func (in *Instrumentation) timed(ctx context.Context, job *queue.JobInfo, next func(context.Context)) {
	if in.runs == nil {
		next(ctx)
		return
	}
	start := time.Now()
	next(ctx)
	if o, ok := in.names(job.Queue).outcome[job.Outcome]; ok {
		in.runs.Record(context.Background(), time.Since(start).Seconds(), o)
	}
}

func addLogAttrs(job *queue.JobInfo, sc trace.SpanContext) {
	if sc.IsValid() {
		job.LogAttrs = append(job.LogAttrs, slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
}

// recordOutcome sets the span's outcome attribute, event, error and status.
func recordOutcome(span trace.Span, job *queue.JobInfo) {
	outcome := job.Outcome.String()
	span.SetAttributes(AttrOutcome.String(outcome))
	if job.Outcome == queue.EventRetried {
		span.AddEvent("queuekit.job.retried", trace.WithAttributes(AttrRetryIn.Float64(job.RetryIn.Seconds())))
	} else {
		span.AddEvent("queuekit.job." + outcome)
	}
	if job.Err == nil {
		return
	}
	var pe *queue.PanicError
	if errors.As(job.Err, &pe) {
		span.SetAttributes(semconv.ErrorTypeKey.String("panic"))
		span.RecordError(job.Err, trace.WithAttributes(semconv.ExceptionStacktrace(string(pe.Stack))))
	} else {
		span.RecordError(job.Err)
	}
	if job.Outcome == queue.EventRetried || job.Outcome == queue.EventDead {
		span.SetStatus(codes.Error, job.Err.Error())
	}
}
