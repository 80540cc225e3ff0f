package otelqueue_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/otelqueue"
)

// discard is a span exporter that drops what it is given: the batch
// processor's cost without any I/O.
type discard struct{ spans atomic.Int64 }

func (d *discard) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	d.spans.Add(int64(len(s)))
	return nil
}
func (d *discard) Shutdown(context.Context) error { return nil }

// BenchmarkEnqueueRun is the core's benchmark of the same name (one
// producer, 10 workers, no-op jobs on the in-memory store) with each way
// of tracing, to compare in one run with benchstat -col /mode:
//
//	mode=none       no option at all
//	mode=hooks      an enqueue hook and a middleware that do nothing: the core's cost of having them
//	mode=noop       otelqueue with a no-op tracer provider
//	mode=global     otelqueue with the global tracer provider, never set (a program that configures no OpenTelemetry)
//	mode=sdk        otelqueue with the SDK (always sampling) and a batch exporter that drops the spans
//	mode=sdk-parent the same with WithParent
func BenchmarkEnqueueRun(b *testing.B) {
	nothing := []queue.Option{
		queue.WithEnqueueHook(func(context.Context, *queue.JobInfo) error { return nil }),
		queue.WithMiddleware(func(ctx context.Context, _ *queue.JobInfo, next func(context.Context)) { next(ctx) }),
	}
	sdk := func(b *testing.B, opts ...otelqueue.Option) []queue.Option {
		exp := &discard{}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()))
		b.Cleanup(func() {
			_ = tp.Shutdown(context.Background())
			b.ReportMetric(float64(exp.spans.Load())/float64(b.N), "exported-spans/job")
		})
		return otelqueue.New(append(opts, otelqueue.WithTracerProvider(tp))...).Options()
	}
	for _, c := range []struct {
		name string
		opts func(b *testing.B) []queue.Option
	}{
		{"none", func(*testing.B) []queue.Option { return nil }},
		{"hooks", func(*testing.B) []queue.Option { return nothing }},
		{"noop", func(*testing.B) []queue.Option {
			return otelqueue.New(otelqueue.WithTracerProvider(noop.NewTracerProvider())).Options()
		}},
		{"global", func(*testing.B) []queue.Option { return otelqueue.New().Options() }},
		{"sdk", func(b *testing.B) []queue.Option { return sdk(b) }},
		{"sdk-parent", func(b *testing.B) []queue.Option { return sdk(b, otelqueue.WithParent(true)) }},
	} {
		b.Run("mode="+c.name, func(b *testing.B) { benchQueue(b, c.opts(b)) })
	}
}

// benchQueue enqueues b.N no-op jobs from one producer and waits until all
// have run.
func benchQueue(b *testing.B, opts []queue.Option) {
	b.ReportAllocs()
	left := atomic.Int64{}
	left.Store(int64(b.N))
	done := make(chan struct{})
	q, err := queue.New(func(context.Context, queue.Job[int]) error {
		if left.Add(-1) == 0 {
			close(done)
		}
		return nil
	}, append(opts, queue.WithWorkers(10, 10))...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		for {
			err := q.Enqueue(ctx, queue.Job[int]{Payload: i})
			if err == nil {
				break
			}
			if !errors.Is(err, queue.ErrQueueFull) {
				b.Fatal(err)
			}
			runtime.Gosched()
		}
	}
	<-done
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	if err := q.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}
