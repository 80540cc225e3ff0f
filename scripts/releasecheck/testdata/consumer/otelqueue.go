// A user's program with otelqueue: a request's span enqueues a job, whose
// run is traced in the same trace. It exits 0 only if the job ran inside
// a span of the request's trace.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/otelqueue"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
	otq := otelqueue.New(otelqueue.WithTracerProvider(tp), otelqueue.WithPropagator(propagation.TraceContext{}), otelqueue.WithParent(true))
	ran := make(chan trace.TraceID, 1)
	q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
		ran <- trace.SpanContextFromContext(ctx).TraceID()
		return nil
	}, otq.Options()...)
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		log.Fatal(err)
	}
	rctx, req := tp.Tracer("releasecheck").Start(ctx, "request")
	if err := q.Enqueue(rctx, queue.Job[string]{Payload: "otelqueue"}); err != nil {
		log.Fatal(err)
	}
	req.End()
	select {
	case id := <-ran:
		if id != req.SpanContext().TraceID() {
			log.Fatalf("the run is in trace %s, not the request's %s", id, req.SpanContext().TraceID())
		}
		fmt.Println("job ran: otelqueue, in the request's trace")
	case <-ctx.Done():
		log.Fatal("the job did not run within 30s")
	}
	if err := q.Stop(ctx); err != nil {
		log.Fatal(err)
	}
}
