package queue_test

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"

	"github.com/queuekit/queue"
)

// SetConcurrency changes how many jobs run at once while the queue runs:
// 0 holds every worker back before it claims (the jobs stay queued), 1
// runs them one at a time.
func ExampleQueue_SetConcurrency() {
	ctx := context.Background()
	ran := make(chan struct{})
	q, err := queue.New(func(ctx context.Context, job queue.Job[string]) error {
		fmt.Println("forward", job.Payload)
		ran <- struct{}{}
		return nil
	}, queue.WithWorkers(4, 4))
	if err != nil {
		panic(err)
	}
	if err := q.SetConcurrency(0); err != nil { // hold the forwards for now
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if err := q.Enqueue(ctx, queue.Job[string]{Payload: p}); err != nil {
			panic(err)
		}
	}
	st := q.Stats()
	fmt.Println("limit:", st.Concurrency, "queued:", st.Depth)
	if err := q.SetConcurrency(1); err != nil { // one at a time, in order
		panic(err)
	}
	for range 3 {
		<-ran
	}
	fmt.Println(q.SetConcurrency(5))
	if err := q.Stop(ctx); err != nil {
		panic(err)
	}
	// Output:
	// limit: 0 queued: 3
	// forward a
	// forward b
	// forward c
	// queue: invalid concurrency limit: 5 is outside 0..4 (0 pauses claiming; 4 is WithWorkers' max)
}

// A claim gate meters how fast jobs start without holding any: a worker
// waits in the gate before it claims, so the jobs stay queued (and
// cancellable) meanwhile. A rate.Limiter's Wait is a gate as it is.
func ExampleWithClaimGate() {
	ctx := context.Background()
	lim := rate.NewLimiter(rate.Every(10*time.Millisecond), 1) // 100 starts a second
	q, err := queue.New(func(ctx context.Context, job queue.Job[string]) error {
		fmt.Println("forward", job.Payload)
		return nil
	}, queue.WithWorkers(1, 1), queue.WithClaimGate(lim.Wait))
	if err != nil {
		panic(err)
	}
	for _, p := range []string{"a", "b", "c"} {
		if err := q.Enqueue(ctx, queue.Job[string]{Payload: p}); err != nil {
			panic(err)
		}
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	if err := q.Stop(ctx); err != nil { // lifts the gate: the drain does not wait for it
		panic(err)
	}
	fmt.Println("done:", q.Stats().Done)
	// Output:
	// forward a
	// forward b
	// forward c
	// done: 3
}
