package queuetest

import (
	"context"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// Start starts q and registers a cleanup that shuts it down and fails the
// test if it does not stop.
func Start[T any](tb testing.TB, q *queue.Queue[T]) {
	tb.Helper()
	if err := q.Start(context.Background()); err != nil {
		tb.Fatalf("queuetest: Start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := q.Shutdown(ctx); err != nil {
			tb.Errorf("queuetest: Shutdown: %v", err)
		}
	})
}

// Drain stops q, letting it finish its ready jobs, and fails the test if
// that takes longer than timeout (of the bubble's time, in a bubble).
func Drain[T any](tb testing.TB, q *queue.Queue[T], timeout time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := q.Stop(ctx); err != nil {
		tb.Fatalf("queuetest: Stop: %v", err)
	}
}

// CheckCounts fails the test unless q's counters add up: every accepted
// job is done, dead, cancelled, or still ready, scheduled, waiting (a
// coalesced rerun) or running. Call it when q is quiescent (in a bubble,
// after Settle).
func CheckCounts[T any](tb testing.TB, q *queue.Queue[T]) queue.Stats {
	tb.Helper()
	st := q.Stats()
	ended := st.Done + st.Dead + st.Cancelled
	live := uint64(st.Depth + st.Store.Scheduled + st.Store.Waiting + st.FleetRunning)
	if st.Enqueued != ended+live {
		tb.Fatalf("queuetest: counts do not add up: enqueued %d != done %d + dead %d + cancelled %d + ready %d + scheduled %d + waiting %d + running %d",
			st.Enqueued, st.Done, st.Dead, st.Cancelled, st.Depth, st.Store.Scheduled, st.Store.Waiting, st.FleetRunning)
	}
	return st
}
