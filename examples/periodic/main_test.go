package main

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// The cron schedules register as they are, and run at their times.
func TestSchedules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		jobs, err := schedules()
		require.NoError(t, err)
		var mu sync.Mutex
		ran := map[string][]time.Time{}
		runs := func(name string) []time.Time {
			mu.Lock()
			defer mu.Unlock()
			return ran[name]
		}
		q, err := queue.New(func(_ context.Context, j queue.Job[task]) error {
			mu.Lock()
			defer mu.Unlock()
			ran[j.Payload.Name] = append(ran[j.Payload.Name], time.Now())
			return nil
		}, queue.WithWorkers(1, 1))
		require.NoError(t, err)
		for _, p := range jobs {
			require.NoError(t, q.Periodic(p.name, p.s, queue.Job[task]{Payload: task{p.name}}, p.opts))
		}
		require.NoError(t, q.Start(context.Background()))
		start := time.Now() // midnight, 1 January 2000
		queuetest.Advance(10*time.Second - time.Millisecond)
		// Registered at midnight, a fire time of both: the first runs are
		// the next fire times, never at start.
		assert.Len(t, runs("tick"), 4, "every two seconds: 2, 4, 6, 8")
		assert.Len(t, runs("flaky"), 3, "every three seconds: 3, 6, 9 (plus jitter under 0.5 s)")
		for i, at := range runs("tick") {
			assert.Equal(t, time.Duration(2*(i+1))*time.Second, at.Sub(start))
		}
		queuetest.Advance(3 * time.Hour)
		// Registered at midnight, 21 h after the day before's 03:00: that
		// period was missed and skipped (no CatchUp).
		require.Len(t, runs("nightly"), 1)
		assert.Equal(t, 3*time.Hour, runs("nightly")[0].Sub(start))
		require.NoError(t, q.Stop(context.Background()))
	})
}
