package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// A key is pending while its job waits: a second Enqueue is a duplicate.
// While the job runs, another Enqueue is coalesced into exactly one more
// run, so an update that arrives mid-run is not lost.
func ExampleWithCoalesce() {
	ctx := context.Background()
	running := make(chan struct{})
	release := make(chan struct{})
	done := make(chan struct{})
	q, err := queue.New(func(_ context.Context, job queue.Job[string]) error {
		fmt.Println("run:", job.Payload)
		if job.Payload == "v1" {
			close(running)
			<-release
		} else {
			close(done)
		}
		return nil
	}, queue.WithWorkers(1, 1))
	if err != nil {
		panic(err)
	}
	_ = q.Start(ctx)
	defer func() { _ = q.Stop(ctx) }()

	_ = q.Enqueue(ctx, queue.Job[string]{Key: "peer1", Payload: "v1"})
	<-running
	fmt.Println("v2:", q.Enqueue(ctx, queue.Job[string]{Key: "peer1", Payload: "v2"}))
	err = q.Enqueue(ctx, queue.Job[string]{Key: "peer1", Payload: "v3"})
	fmt.Println("v3 duplicate:", errors.Is(err, queue.ErrDuplicate))
	close(release)
	<-done
	fmt.Println("coalesced:", q.Stats().Coalesced)
	// Output:
	// run: v1
	// v2: <nil>
	// v3 duplicate: true
	// run: v2
	// coalesced: 1
}

// Cancel and CancelMatch withdraw jobs that have not started: they never
// run, their keys are released, and they are counted as cancelled.
func ExampleQueue_CancelMatch() {
	ctx := context.Background()
	q, err := queue.New(func(_ context.Context, job queue.Job[string]) error {
		fmt.Println("run:", job.Key)
		return nil
	}, queue.WithWorkers(1, 1))
	if err != nil {
		panic(err)
	}
	// Keys are infohash:tracker:peer.
	for _, key := range []string{"h1:a:p1", "h1:b:p1", "h1:a:p2", "h2:a:p1"} {
		_ = q.Enqueue(ctx, queue.Job[string]{Key: key})
	}
	// Peer p1 stopped downloading h1: drop its announces to every tracker.
	n, _ := q.CancelMatch(ctx, func(key string) bool {
		return strings.HasPrefix(key, "h1:") && strings.HasSuffix(key, ":p1")
	})
	fmt.Println("cancelled:", n)
	n, _ = q.Cancel(ctx, "h2:a:p1")
	fmt.Println("cancelled:", n)
	_ = q.Start(ctx)
	_ = q.Stop(ctx)
	fmt.Println("counted:", q.Stats().Cancelled)
	// Output:
	// cancelled: 2
	// cancelled: 1
	// run: h1:a:p2
	// counted: 3
}

// A UniqueFor window holds a key for that long after its job is accepted,
// whether the job still waits, runs or has ended: at most one report per
// hour, however often it is asked for. The fake clock stands in for the
// hour passing.
func ExampleJob_uniqueFor() {
	ctx := context.Background()
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	// The handler hands each payload to the example's goroutine, which
	// prints it: a print from the worker could come before "first:".
	ran := make(chan string)
	q, err := queue.New(func(_ context.Context, job queue.Job[string]) error {
		ran <- job.Payload
		return nil
	}, queue.WithWorkers(1, 1), queue.WithClock(clk))
	if err != nil {
		panic(err)
	}
	_ = q.Start(ctx)
	defer func() { _ = q.Stop(ctx) }()
	report := func(payload string) error {
		return q.Enqueue(ctx, queue.Job[string]{Key: "daily-report", UniqueFor: time.Hour, Payload: payload})
	}
	fmt.Println("first:", report("first"))
	fmt.Println("run:", <-ran)
	fmt.Println("again:", report("again"))
	clk.Advance(time.Hour)
	fmt.Println("an hour later:", report("later"))
	fmt.Println("run:", <-ran)
	// Output:
	// first: <nil>
	// run: first
	// again: queue: duplicate job: key "daily-report" is held by a unique window (Job.UniqueFor) that has not ended
	// an hour later: <nil>
	// run: later
}
