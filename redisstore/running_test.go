package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/stretchr/testify/require"
)

// TestStatsRunningIsThisEngines: two queues on one prefix (two processes
// of one queue, as far as the store knows) run 2 and 3 jobs that block;
// each one's Stats.Running counts its own runs, and FleetRunning the
// fleet's 5.
func TestStatsRunningIsThisEngines(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	release := make(chan struct{})
	hold := func(ctx context.Context, _ queue.Job[int]) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}
	mk := func(id string, workers int) *queue.Queue[int] {
		s, err := New[int](c, WithPrefix(prefix), WithWorkerID(id), WithPollInterval(20*time.Millisecond))
		require.NoError(t, err)
		q, err := queue.NewWithStore(s, hold, queue.WithName("running"), queue.WithWorkers(workers, workers), queue.WithLogger(quietLogger()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
		return q
	}
	a, b := mk("a", 2), mk("b", 3)
	for i := range 5 {
		require.NoError(t, a.Enqueue(context.Background(), queue.Job[int]{Payload: i}))
	}
	require.NoError(t, a.Start(context.Background()))
	require.Eventually(t, func() bool { st := a.Stats(); return st.Store.Running == 2 && st.Running == 2 }, 10*time.Second, pollTick, "a to run 2")
	require.NoError(t, b.Start(context.Background()))
	require.Eventually(t, func() bool { st := b.Stats(); return st.Store.Running == 5 && st.Running == 3 }, 10*time.Second, pollTick, "b to run 3")
	sa, sb := a.Stats(), b.Stats()
	require.Equal(t, 2, sa.Running, "a's Stats.Running: this engine's runs")
	require.Equal(t, 3, sb.Running, "b's Stats.Running: this engine's runs")
	require.Equal(t, 5, sa.FleetRunning, "a's Stats.FleetRunning: the fleet's")
	require.Equal(t, 5, sb.FleetRunning, "b's Stats.FleetRunning: the fleet's")
	close(release)
}
