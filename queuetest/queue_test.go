package queuetest_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// The package doc's sample: a job scheduled an hour out runs once the
// bubble's hour has passed, not before, and the counts add up.
func TestReminder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent atomic.Int64
		q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
			sent.Add(1)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		queuetest.Start(t, q)
		if err := q.EnqueueIn(context.Background(), queue.Job[string]{Payload: "renew"}, time.Hour); err != nil {
			t.Fatal(err)
		}
		queuetest.Advance(time.Hour - time.Millisecond)
		if sent.Load() != 0 {
			t.Fatalf("sent %d reminders before the hour, want 0", sent.Load())
		}
		queuetest.Advance(time.Millisecond)
		if sent.Load() != 1 {
			t.Fatalf("sent %d reminders, want 1", sent.Load())
		}
		if st := queuetest.CheckCounts(t, q); st.Done != 1 {
			t.Fatalf("Stats.Done = %d, want 1", st.Done)
		}
		queuetest.Drain(t, q, time.Minute)
	})
}
