package otelqueue_test

import (
	"context"
	"fmt"
	"slices"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/otelqueue"
)

// A request's span, the job it enqueues and the job's run make one trace
// (WithParent). A real program passes its own tracer provider, or none to
// use the global one, and an exporter to its tracing backend.
func Example() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otq := otelqueue.New(otelqueue.WithTracerProvider(tp),
		otelqueue.WithPropagator(propagation.TraceContext{}), otelqueue.WithParent(true))

	q, err := queue.New(func(ctx context.Context, job queue.Job[string]) error {
		// ctx holds the run's span; queue.Logger(ctx) logs its
		// trace_id and span_id.
		trace.SpanFromContext(ctx).AddEvent("sending to " + job.Payload)
		return nil
	}, append(otq.Options(), queue.WithName("mail"))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	q.Start(ctx)

	rctx, req := tp.Tracer("example").Start(ctx, "POST /signup", trace.WithSpanKind(trace.SpanKindServer))
	if err := q.Enqueue(rctx, queue.Job[string]{Key: "welcome:ann", Payload: "ann@example.com"}); err != nil {
		fmt.Println(err)
	}
	req.End()
	q.Stop(ctx) // runs the job

	spans := exp.GetSpans()
	slices.SortFunc(spans, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	for _, s := range spans {
		fmt.Printf("%-13s %-8s same trace: %v\n", s.Name, s.SpanKind, s.SpanContext.TraceID() == req.SpanContext().TraceID())
	}
	// Output:
	// POST /signup  server   same trace: true
	// create mail   producer same trace: true
	// process mail  consumer same trace: true
}
