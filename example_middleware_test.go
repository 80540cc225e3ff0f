package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/queuekit/queue"
)

type requestIDKey struct{}

// An enqueue hook copies the caller's request ID from its ctx into the
// job's metadata; a middleware, around every run, puts it back in the
// handler's ctx and in the attributes of queue.Logger, and sees each
// run's outcome. OpenTelemetry's otelqueue does the same with a trace
// context and a span.
func ExampleWithMiddleware() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // a stable output
			}
			return a
		},
	}))
	inject := func(ctx context.Context, job *queue.JobInfo) error {
		if id, ok := ctx.Value(requestIDKey{}).(string); ok {
			job.Meta.Set("request_id", id)
		}
		return nil
	}
	extract := func(ctx context.Context, job *queue.JobInfo, next func(context.Context)) {
		id := job.Meta.Get("request_id")
		job.LogAttrs = append(job.LogAttrs, slog.String("request_id", id))
		next(context.WithValue(ctx, requestIDKey{}, id))
		fmt.Printf("run %d of job %d: %s, err %v\n", job.Attempt, job.ID, job.Outcome, job.Err)
	}
	done := make(chan struct{})
	q, err := queue.New(func(ctx context.Context, job queue.Job[string]) error {
		queue.Logger(ctx).Info("announcing", "for", ctx.Value(requestIDKey{}))
		if job.Attempt == 1 {
			return errors.New("tracker busy")
		}
		close(done)
		return nil
	}, queue.WithLogger(logger), queue.WithName("announces"), queue.WithRetry(3, time.Millisecond, time.Millisecond),
		queue.WithEnqueueHook(inject), queue.WithMiddleware(extract))
	if err != nil {
		panic(err)
	}
	ctx := context.WithValue(context.Background(), requestIDKey{}, "req-42")
	_ = q.Start(context.Background())
	_ = q.Enqueue(ctx, queue.Job[string]{Key: "peer-1", Payload: "announce"})
	<-done
	_ = q.Stop(context.Background())
	// Output:
	// level=INFO msg=announcing queue=announces job_id=1 key=peer-1 attempt=1 request_id=req-42 for=req-42
	// run 1 of job 1: retried, err tracker busy
	// level=INFO msg=announcing queue=announces job_id=1 key=peer-1 attempt=2 request_id=req-42 for=req-42
	// run 2 of job 1: done, err <nil>
}
