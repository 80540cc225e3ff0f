package queue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuekit/queue"
)

// An ordinary error is retried with backoff until WithRetry's maxAttempts, then
// the job is dead-lettered and the OnDead hook sees it.
func ExampleQueue_OnDead() {
	ctx := context.Background()
	dead := make(chan struct{})
	q, err := queue.New(func(_ context.Context, job queue.Job[string]) error {
		fmt.Println("attempt", job.Attempt)
		return errors.New("connection reset")
	},
		queue.WithRetry(3, time.Millisecond, 4*time.Millisecond))
	if err != nil {
		panic(err)
	}
	q.OnDead(func(_ context.Context, job queue.Job[string], err error) {
		fmt.Printf("dead after %d attempts: %v\n", job.Attempt, err)
		close(dead)
	})
	_ = q.Start(ctx)
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "announce"})
	<-dead
	_ = q.Stop(ctx)
	st := q.Stats()
	fmt.Println("failed:", st.Failed, "retried:", st.Retried, "dead:", st.Dead)
	// Output:
	// attempt 1
	// attempt 2
	// attempt 3
	// dead after 3 attempts: connection reset
	// failed: 3 retried: 2 dead: 1
}

// RetryAfter is BEP 31's "retry in": the job runs again after the delay
// the downstream asked for, without using up an attempt. A delay at or
// above the ceiling of WithRetryAfterBounds (default 10 minutes) means
// "done, don't retry"; one below its floor (default 1 second) is raised
// to it.
func ExampleRetryAfter() {
	ctx := context.Background()
	done := make(chan struct{})
	runs := 0
	q, err := queue.New(func(_ context.Context, job queue.Job[string]) error {
		runs++
		switch {
		case job.Payload == "busy" && runs == 1:
			fmt.Println("tracker says: retry in 10ms")
			return queue.RetryAfter(10*time.Millisecond, errors.New("upstream busy"))
		case job.Payload == "busy":
			fmt.Println("announced on run", runs)
			close(done)
		case job.Payload == "later":
			fmt.Println("tracker says: retry in 1h: treated as done")
			return queue.RetryAfter(time.Hour, nil)
		}
		return nil
	}, queue.WithWorkers(1, 1))
	if err != nil {
		panic(err)
	}
	_ = q.Start(ctx)
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "busy"})
	<-done
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "later"})
	_ = q.Stop(ctx)
	fmt.Println("done:", q.Stats().Done)
	// Output:
	// tracker says: retry in 10ms
	// announced on run 2
	// tracker says: retry in 1h: treated as done
	// done: 2
}

// Permanent errors are not retried; a panic is recovered and counted.
func ExamplePermanent() {
	ctx := context.Background()
	q, err := queue.New(func(_ context.Context, job queue.Job[string]) error {
		switch job.Payload {
		case "bad":
			return queue.Permanent(errors.New("malformed request"))
		case "panic":
			panic("bug")
		}
		return nil
	}, queue.WithWorkers(1, 1), queue.WithRetry(1, 0, 0))
	if err != nil {
		panic(err)
	}
	q.OnDead(func(_ context.Context, job queue.Job[string], err error) {
		fmt.Printf("%s: %v (permanent: %t)\n", job.Payload, err, queue.IsPermanent(err))
	})
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "bad"})
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "panic"})
	_ = q.Start(ctx)
	_ = q.Stop(ctx)
	fmt.Println("panics:", q.Stats().Panics)
	// Output:
	// bad: permanent: malformed request (permanent: true)
	// panic: queue: handler panicked: bug (permanent: false)
	// panics: 1
}
