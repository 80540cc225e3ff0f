package queue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuekit/queue"
)

// A job scheduled for later runs at its time; Stats lists what waits.
func ExampleQueue_EnqueueIn() {
	ctx := context.Background()
	ran := make(chan time.Duration, 1)
	start := time.Now()
	q, err := queue.New(func(context.Context, queue.Job[string]) error {
		ran <- time.Since(start)
		return nil
	})
	if err != nil {
		panic(err)
	}
	if err := q.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = q.Stop(ctx) }()

	now := time.Now()
	_ = q.EnqueueIn(ctx, queue.Job[string]{Key: "reannounce:hash1", Payload: "hash1"}, 200*time.Millisecond)
	_ = q.EnqueueIn(ctx, queue.Job[string]{Key: "reannounce:hash2", Payload: "hash2"}, 30*time.Minute)
	for _, s := range q.Stats().NextScheduled {
		fmt.Println("waiting:", s.Key, "in", s.RunAt.Sub(now).Truncate(100*time.Millisecond))
	}
	fmt.Println("ran on time:", <-ran >= 200*time.Millisecond)
	fmt.Println("scheduled:", q.Stats().Store.Scheduled)
	// Output:
	// waiting: reannounce:hash1 in 200ms
	// waiting: reannounce:hash2 in 30m0s
	// ran on time: true
	// scheduled: 1
}

// A group allows one scheduled job at a time: a tracker forwarder keeps
// one re-announce per torrent and upstream, whichever peer asked.
func ExampleJob_group() {
	ctx := context.Background()
	q, err := queue.New(func(context.Context, queue.Job[string]) error { return nil })
	if err != nil {
		panic(err)
	}
	defer func() { _ = q.Stop(ctx) }()
	for _, peer := range []string{"peer1", "peer2"} {
		job := queue.Job[string]{
			Key:     "hash1:tracker-a:" + peer, // one pending job per peer
			Group:   "hash1:tracker-a",         // one scheduled job per torrent and tracker
			Payload: peer,
		}
		err := q.EnqueueIn(ctx, job, time.Minute)
		fmt.Println(peer, "scheduled:", err == nil, "duplicate:", errors.Is(err, queue.ErrDuplicate))
	}
	// Output:
	// peer1 scheduled: true duplicate: false
	// peer2 scheduled: false duplicate: true
}
