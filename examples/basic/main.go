// Command basic shows the queue's main behaviours in a few seconds:
// enqueue, dedupe, scheduling, retries with backoff, BEP 31 "retry in",
// dead letters, and the stats snapshot. It prints what happens.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/examples/internal/storeflag"
)

type announce struct {
	InfoHash string
	Peer     string
}

func main() {
	storeURL := flag.String("store", "memory", storeflag.Usage)
	flag.Parse()
	store, closeStore, err := storeflag.Open[announce](context.Background(), *storeURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer closeStore()
	start := time.Now()
	var mu sync.Mutex
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%6.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}

	attempts := map[string]int{}
	handler := func(ctx context.Context, j queue.Job[announce]) error {
		mu.Lock()
		attempts[j.Key]++
		runs := attempts[j.Key] // a RetryAfter rerun keeps its Attempt number: count runs here
		mu.Unlock()
		switch {
		case strings.HasPrefix(j.Key, "flaky"):
			if j.Attempt < 3 {
				logf("run   %-14s attempt %d: upstream timed out, will back off", j.Key, j.Attempt)
				return errors.New("upstream timeout")
			}
		case strings.HasPrefix(j.Key, "busy") && runs == 1:
			logf("run   %-14s attempt %d: tracker says \"retry in 1 second\" (BEP 31)", j.Key, j.Attempt)
			return queue.RetryAfter(time.Second, errors.New("tracker busy"))
		case strings.HasPrefix(j.Key, "broken"):
			logf("run   %-14s attempt %d: failing for good", j.Key, j.Attempt)
			return errors.New("bad gateway")
		}
		logf("run   %-14s attempt %d: ok (priority %s)", j.Key, j.Attempt, j.Priority)
		return nil
	}

	opts := []queue.Option{
		queue.WithCapacity(100, 0),
		queue.WithWorkers(1, 4), // one worker at first, so the order is easy to follow
		queue.WithRetry(3, 200*time.Millisecond, 2*time.Second),
	}
	var q *queue.Queue[announce]

	if store != nil {
		opts = append(opts, queue.WithName(fmt.Sprintf("basic_%d", os.Getpid())))
		q, err = queue.NewWithStore(store, handler, opts...)
	} else {
		q, err = queue.New(handler, opts...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	q.OnDead(func(_ context.Context, j queue.Job[announce], err error) {
		logf("dead  %-14s after %d attempts: %v", j.Key, j.Attempt, err)
	})
	ctx := context.Background()
	enqueue := func(j queue.Job[announce]) {
		if err := q.Enqueue(ctx, j); err != nil {
			logf("enqueue %-12s refused: %v", j.Key, err)
			return
		}
		when := "now"
		if !j.RunAt.IsZero() {
			when = "at +" + time.Until(j.RunAt).Round(time.Millisecond).String()
		}
		logf("enqueue %-12s %s", j.Key, when)
	}

	// Jobs queued before Start run once it starts; high priority first.
	enqueue(queue.Job[announce]{Key: "low-1", Priority: "low"})
	enqueue(queue.Job[announce]{Key: "normal-1"})
	enqueue(queue.Job[announce]{Key: "high-1", Priority: "high"})
	enqueue(queue.Job[announce]{Key: "normal-1"}) // duplicate pending key
	enqueue(queue.Job[announce]{Key: "flaky-1"})
	enqueue(queue.Job[announce]{Key: "busy-1"})
	enqueue(queue.Job[announce]{Key: "broken-1"})
	enqueue(queue.Job[announce]{Key: "scheduled-1", RunAt: time.Now().Add(1500 * time.Millisecond)})

	if err := q.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Let the retries and the schedule play out, then drain and report.
	time.Sleep(4 * time.Second)
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := q.Stop(stopCtx); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
	}
	st := q.Stats()
	fmt.Println()
	fmt.Printf("enqueued %d  done %d  retried %d  failed %d  dead %d  cancelled %d  dropped_full %d\n",
		st.Enqueued, st.Done, st.Retried, st.Failed, st.Dead, st.Cancelled, st.DroppedFull)
	fmt.Printf("depth %d/%d  scheduled %d  pending keys %d  workers %d (base %d, max %d)\n",
		st.Depth, st.Capacity, st.Store.Scheduled, st.Store.PendingKeys, st.Workers, st.BaseWorkers, st.MaxWorkers)
	for _, e := range st.RecentErrors {
		fmt.Printf("recent error: job %d key %s attempt %d: %s\n", e.JobID, e.Key, e.Attempt, e.Error)
	}
}
