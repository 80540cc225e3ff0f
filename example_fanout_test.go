package queue_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/queuekit/queue"
)

// Fanout picks the targets a request goes to: not disabled, not
// suspended, due for the key, shuffled and capped.
func ExampleQueue_Fanout() {
	ctx := context.Background()
	q, err := queue.New(func(context.Context, queue.Job[string]) error { return nil },
		queue.WithFanout(3, 0, 0))
	if err != nil {
		panic(err)
	}
	defer func() { _ = q.Stop(ctx) }()
	trackers := []string{"a", "b", "c", "d", "e", "f"}

	_ = q.Disable("a", errors.New("HTTP 404"))
	_ = q.Suspend("b", 5*time.Minute)                     // answered 429
	q.SetNextDue("c", "hash1", time.Now().Add(time.Hour)) // announced; next in an hour

	picked := q.Fanout("hash1", trackers)
	slices.Sort(picked) // Fanout shuffles; sort for a stable output
	fmt.Println(picked)
	fmt.Println("c due for hash1:", q.Due("c", "hash1"), "for hash2:", q.Due("c", "hash2"))
	// Output:
	// [d e f]
	// c due for hash1: false for hash2: true
}

// Admit is for a host's request handler: it refuses new work only when the
// queue fills past the rate-limit threshold and the token bucket is empty.
func ExampleQueue_Admit() {
	ctx := context.Background()
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil },
		queue.WithCapacity(10, 0), queue.WithRateLimit(queue.RateLimit{
			FillPct: 80, PerSecond: 1, Burst: 2,
			RetryAfter: 5 * time.Second, Reason: "server busy", // the host's wording
		}))
	if err != nil {
		panic(err)
	}
	defer func() { _ = q.Stop(ctx) }()
	fmt.Println("quiet:", q.Admit())
	for range 8 { // not started: the jobs stay queued, 80 % full
		_ = q.Enqueue(ctx, queue.Job[int]{})
	}
	fmt.Println("1:", q.Admit())
	fmt.Println("2:", q.Admit())
	if err := q.Admit(); errors.Is(err, queue.ErrRateLimited) {
		wait, _ := queue.RetryDelay(err)
		fmt.Println("3:", err, "/", wait) // the message is ready to show the client
	}
	fmt.Println("rate_limited:", q.Stats().RateLimited)
	// Output:
	// quiet: <nil>
	// 1: <nil>
	// 2: <nil>
	// 3: server busy, retry in 5 seconds / 5s
	// rate_limited: 1
}

// A handler reports what happened with ClassifyHTTP; the queue turns the
// outcome into target health: a 429 suspends the target, a 404 or a DNS
// failure disables it.
func ExampleClassifyHTTP() {
	ctx := context.Background()
	q, err := queue.New(func(_ context.Context, job queue.Job[int]) error {
		return queue.ClassifyHTTP(job.Payload, nil) // job.Payload: the status the upstream answered
	}, queue.WithWorkers(1, 1))
	if err != nil {
		panic(err)
	}
	_ = q.Enqueue(ctx, queue.Job[int]{Target: "a", Payload: 200})
	_ = q.Enqueue(ctx, queue.Job[int]{Target: "b", Payload: 429})
	_ = q.Enqueue(ctx, queue.Job[int]{Target: "c", Payload: 404})
	_ = q.Start(ctx)
	_ = q.Stop(ctx) // the jobs have run and their outcomes are recorded
	for _, name := range []string{"a", "b", "c"} {
		st, _ := q.Target(name)
		fmt.Printf("%s: disabled=%t suspended=%t reason=%q\n", name, st.Disabled, !st.SuspendedUntil.IsZero(), st.Reason)
	}
	// Output:
	// a: disabled=false suspended=false reason=""
	// b: disabled=false suspended=true reason=""
	// c: disabled=true suspended=false reason="target disabled: HTTP 404 Not Found"
}
