package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

// The pending bound (WithCapacity's pending): everything the in-memory queue holds
// waiting to run is bounded, not only the ready queue.

func TestPendingLimitDefaultBoundsTheSchedule(t *testing.T) {
	// Two million keyed EnqueueIn(1h) into WithCapacity(1000, 0) were all
	// accepted (320 MiB of heap). The default bound is 100 × capacity.
	q := newQueue(t, nop, queue.WithCapacity(1000, 0))
	const want = 100 * 1000
	require.Equal(t, want, q.Stats().MaxPending)
	accepted := 0
	var err error
	for i := range 2 * want {
		if err = q.EnqueueIn(bg, queue.Job[int]{Key: fmt.Sprintf("infohash%08d:peer", i)}, time.Hour); err != nil {
			break
		}
		accepted++
	}
	require.Equal(t, want, accepted, "accepted up to the bound, then refused: %v", err)
	require.ErrorIs(t, err, queue.ErrPendingLimit)
	assert.ErrorIs(t, err, queue.ErrQueueFull, "a caller that backs off on a full queue backs off here too")
	assert.Contains(t, err.Error(), "WithCapacity")
	assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{}), queue.ErrPendingLimit, "ready jobs count against it too")
	st := q.Stats()
	assert.EqualValues(t, 2, st.DroppedLimit)
	assert.Zero(t, st.DroppedFull, "not the ready queue's refusal")
	assert.Equal(t, want, st.Store.Scheduled)
	assert.EqualValues(t, want, st.Enqueued)
}

// droppedMetric returns queue_jobs_dropped_total{reason=reason} from reg.
func droppedMetric(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "queue_jobs_dropped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no queue_jobs_dropped_total{reason=%q}", reason)
	return 0
}

func TestPendingLimitCountsEveryKindOfWaitingJob(t *testing.T) {
	t.Run("ready and scheduled, counted in Stats and metrics", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		q := newQueue(t, nop, queue.WithCapacity(2, 4), queue.WithMetrics(reg, 0))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{}))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{}))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Key: "s1"}, time.Hour))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Key: "s2"}, time.Hour))
		require.ErrorIs(t, q.EnqueueIn(bg, queue.Job[int]{Key: "s3"}, time.Hour), queue.ErrPendingLimit)
		assert.EqualValues(t, 1, q.Stats().DroppedLimit)
		assert.EqualValues(t, 1, droppedMetric(t, reg, "limit"))
		assert.Zero(t, droppedMetric(t, reg, "full"))

		n, err := q.Cancel(bg, "s1")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Key: "s3"}, time.Hour), "a cancel makes room")
	})
	t.Run("coalesced reruns", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := make(gate)
			q := startQueue(t, func(ctx context.Context, j queue.Job[int]) error { return g.wait(ctx) },
				queue.WithCapacity(2, 3), queue.WithWorkers(1, 1))
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "k"}))
			synctest.Wait() // running
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "k"}), "coalesced: waits for the running job")
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{}))
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{}))
			assert.ErrorIs(t, q.EnqueueIn(bg, queue.Job[int]{}, time.Hour), queue.ErrPendingLimit,
				"one waiting rerun and two ready jobs hold the bound of 3")
			close(g)
		})
	})
	t.Run("jobs parked for a target's slot", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := make(gate)
			q := startQueue(t, func(ctx context.Context, j queue.Job[int]) error { return g.wait(ctx) },
				queue.WithCapacity(3, 3), queue.WithWorkers(2, 2), queue.WithTargetConcurrency(1))
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Target: "t"}))
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Target: "t"}))
			synctest.Wait() // one runs, one is parked for the target's slot
			require.Equal(t, 1, q.Stats().Depth)
			require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{}, time.Hour))
			require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{}, time.Hour))
			assert.ErrorIs(t, q.EnqueueIn(bg, queue.Job[int]{}, time.Hour), queue.ErrPendingLimit,
				"one parked and two scheduled jobs hold the bound of 3")
			close(g)
		})
	})
}

func TestPendingLimitNeverLosesAcceptedJobs(t *testing.T) {
	// Retries, RetryAfter reruns and coalesced reruns released when their
	// key's job ends are jobs already accepted: kept past the bound.
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"failure retried", errors.New("upstream down")},
		{"retry after", queue.RetryAfter(time.Minute, errors.New("busy"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := make(gate)
				var failed atomic.Bool
				q := startQueue(t, func(ctx context.Context, j queue.Job[int]) error {
					if err := g.wait(ctx); err != nil {
						return err
					}
					if j.Key == "run" && failed.CompareAndSwap(false, true) {
						return tc.err
					}
					return nil
				}, queue.WithCapacity(2, 3), queue.WithWorkers(1, 1))
				require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "run"}))
				synctest.Wait() // running
				for i := range 3 {
					require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Key: fmt.Sprint("s", i)}, 2*time.Hour))
				}
				require.ErrorIs(t, q.EnqueueIn(bg, queue.Job[int]{}, time.Hour), queue.ErrPendingLimit)
				close(g)
				synctest.Wait()
				st := q.Stats()
				assert.EqualValues(t, 1, st.Retried)
				assert.Equal(t, 4, st.Store.Scheduled, "the retry is kept past the bound of 3")
				balance(t, st)
				advance(time.Hour + time.Minute)
				st = q.Stats()
				assert.EqualValues(t, 1, st.Done, "the retry ran")
				assert.Equal(t, 3, st.Store.Scheduled)
			})
		})
	}
}
