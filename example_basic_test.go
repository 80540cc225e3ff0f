package queue_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/queuekit/queue"
)

// The smallest useful queue: a handler, a few jobs, a drain.
func Example() {
	ctx := context.Background()
	q, err := queue.New(func(ctx context.Context, job queue.Job[string]) error {
		fmt.Println("announce to", job.Payload)
		return nil
	}, queue.WithWorkers(1, 1)) // one worker: the output comes in order
	if err != nil {
		panic(err)
	}
	for _, tracker := range []string{"tracker-a", "tracker-b", "tracker-c"} {
		if err := q.Enqueue(ctx, queue.Job[string]{Payload: tracker}); err != nil {
			panic(err)
		}
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	if err := q.Stop(ctx); err != nil { // runs what is ready, then stops
		panic(err)
	}
	st := q.Stats()
	fmt.Println("done:", st.Done, "state:", st.State)
	// Output:
	// announce to tracker-a
	// announce to tracker-b
	// announce to tracker-c
	// done: 3 state: stopped
}

// Enqueue never blocks: it reports a full queue, a duplicate key and a
// stopped queue as errors the caller can act on.
func ExampleQueue_Enqueue() {
	ctx := context.Background()
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(2, 0))
	if err != nil {
		panic(err)
	}
	try := func(job queue.Job[int]) {
		err := q.Enqueue(ctx, job)
		switch {
		case err == nil:
			fmt.Println(job.Payload, "accepted")
		case errors.Is(err, queue.ErrDuplicate):
			fmt.Println(job.Payload, "duplicate")
		case errors.Is(err, queue.ErrQueueFull):
			fmt.Println(job.Payload, "queue full")
		case errors.Is(err, queue.ErrClosed):
			fmt.Println(job.Payload, "closed")
		default:
			fmt.Println(job.Payload, err)
		}
	}
	try(queue.Job[int]{Payload: 1, Key: "peer1"})
	try(queue.Job[int]{Payload: 2, Key: "peer1"})
	try(queue.Job[int]{Payload: 3})
	try(queue.Job[int]{Payload: 4})
	try(queue.Job[int]{Payload: 5, Priority: "urgent"})
	_ = q.Stop(ctx)
	try(queue.Job[int]{Payload: 6})
	fmt.Println("dropped_full:", q.Stats().DroppedFull)
	// Output:
	// 1 accepted
	// 2 duplicate
	// 3 accepted
	// 4 queue full
	// 5 queue: unknown priority "urgent" (the queue's priorities: high, normal, low)
	// 6 closed
	// dropped_full: 1
}

// Priorities: every high job runs before any normal one, and jobs of one
// priority run in the order they were enqueued.
func ExampleWithPriorities() {
	ctx := context.Background()
	q, err := queue.New(func(_ context.Context, job queue.Job[string]) error {
		fmt.Println(job.Priority, job.Payload)
		return nil
	}, queue.WithWorkers(1, 1),
		queue.WithPriorities("reannounce", queue.Priority{Name: "initial", Weight: 0}, queue.Priority{Name: "reannounce", Weight: 1}))
	if err != nil {
		panic(err)
	}
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "r1"})
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "i1", Priority: "initial"})
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "r2"})
	_ = q.Enqueue(ctx, queue.Job[string]{Payload: "i2", Priority: "initial"})
	_ = q.Start(ctx)
	_ = q.Stop(ctx)
	// Output:
	// initial i1
	// initial i2
	// reannounce r1
	// reannounce r2
}
