package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/otelqueue"
)

// tracing is what -otel sets up: the queue options of otelqueue, an HTTP
// middleware that starts each request's span, and the provider's
// shutdown, which flushes the spans not yet written.
type tracing struct {
	opts     []queue.Option
	wrap     func(http.Handler) http.Handler
	shutdown func(context.Context) error
}

// newTracing sets up -otel mode: "" traces nothing; "stdout" writes every
// span to out as a JSON line, batched, each announce's request, its jobs'
// create spans and their runs in one trace (otelqueue.WithParent).
func newTracing(mode string, out io.Writer) (tracing, error) {
	switch mode {
	case "":
		return tracing{wrap: func(h http.Handler) http.Handler { return h }, shutdown: func(context.Context) error { return nil }}, nil
	case "stdout":
	default:
		return tracing{}, fmt.Errorf("-otel %q: the one exporter is stdout", mode)
	}
	exp, err := stdouttrace.New(stdouttrace.WithWriter(out))
	if err != nil {
		return tracing{}, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	prop := propagation.TraceContext{}
	otq := otelqueue.New(otelqueue.WithTracerProvider(tp), otelqueue.WithPropagator(prop), otelqueue.WithParent(true))
	tracer := tp.Tracer("github.com/queuekit/queue/examples/forwarder")
	wrap := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
			ctx, span := tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
			defer span.End()
			h.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	return tracing{opts: otq.Options(), wrap: wrap, shutdown: tp.Shutdown}, nil
}
