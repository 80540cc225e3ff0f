package queue_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/queuetest"
)

func TestScaleByFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		q := startQueue(t, func(ctx context.Context, _ queue.Job[int]) error { return g.wait(ctx) },
			queue.WithCapacity(10, 0), queue.WithWorkers(2, 5), queue.WithScaling(queue.ScaleByFill, 0, 0, time.Second))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 0}))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1}))
		synctest.Wait() // both base workers busy
		for i := 2; i < 12; i++ {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
		}
		st := q.Stats()
		require.Equal(t, 2, st.Workers)
		require.Equal(t, 10, st.Depth, "two jobs running, the queue full again")

		// Every added worker takes a job, but the fill stays >= 60 %:
		// one more worker per tick until max.
		for want := 3; want <= 5; want++ {
			advance(999 * time.Millisecond)
			assert.Equal(t, want-1, q.Stats().Workers, "not before the tick")
			advance(time.Millisecond)
			assert.Equal(t, want, q.Stats().Workers, "one per tick")
		}
		advance(10 * time.Second)
		st = q.Stats()
		assert.Equal(t, 5, st.Workers, "never above max")
		assert.Equal(t, 5, st.Running)
		assert.Equal(t, 7, st.Depth)

		close(g) // the queue drains; fill < 40 %: one fewer per tick
		synctest.Wait()
		assert.Zero(t, q.Stats().Depth)
		for want := 4; want >= 2; want-- {
			advance(time.Second)
			assert.Equal(t, want, q.Stats().Workers)
		}
		advance(10 * time.Second)
		st = q.Stats()
		assert.Equal(t, 2, st.Workers, "never below base")
		assert.Equal(t, uint64(12), st.Done)
		balance(t, st)
	})
}

func TestScaleByFillHoldsBetweenThresholds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		q := startQueue(t, func(ctx context.Context, _ queue.Job[int]) error { return g.wait(ctx) },
			queue.WithCapacity(10, 0), queue.WithWorkers(1, 4), queue.WithScaling(queue.ScaleByFill, 80, 20, 0))
		for i := range 6 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
		}
		advance(5 * time.Second)
		st := q.Stats()
		assert.Equal(t, 5, st.Depth, "50 %: between the thresholds")
		assert.Equal(t, 1, st.Workers, "no change between the thresholds")
		close(g)
	})
}

func TestScaleByDepth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		q := startQueue(t, func(ctx context.Context, _ queue.Job[int]) error { return g.wait(ctx) },
			queue.WithCapacity(100, 0), queue.WithWorkers(1, 4), queue.WithScaling(queue.ScaleByDepth, 0, 0, 0))
		for i := range 10 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
		}
		synctest.Wait()
		assert.Equal(t, 1, q.Stats().Workers, "10 % fill would not scale by fill; depth 9 does")
		for want := 2; want <= 4; want++ {
			advance(time.Second)
			assert.Equal(t, want, q.Stats().Workers, "one per tick toward the depth")
		}
		advance(5 * time.Second)
		assert.Equal(t, 4, q.Stats().Workers, "bounded by max")

		close(g)
		synctest.Wait()
		for want := 3; want >= 1; want-- {
			advance(time.Second)
			assert.Equal(t, want, q.Stats().Workers, "one per tick back to base")
		}
		advance(5 * time.Second)
		assert.Equal(t, 1, q.Stats().Workers)
	})
}

func TestScaleDownDoesNotInterruptRunningJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		var mu sync.Mutex
		var errs []error
		q := startQueue(t, func(ctx context.Context, job queue.Job[int]) error {
			err := g.wait(ctx)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
			return err
		}, queue.WithCapacity(4, 0), queue.WithWorkers(1, 3))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 0}))
		synctest.Wait()
		for i := 1; i <= 4; i++ {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
		}
		advance(2 * time.Second) // two extra workers, three jobs running
		require.Equal(t, 3, q.Stats().Workers)
		require.Equal(t, 3, q.Stats().Running)
		n, err := q.Purge(bg)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		advance(5 * time.Second) // fill 0 % < 40 %: workers retire, after their jobs
		st := q.Stats()
		assert.Equal(t, 1, st.Workers)
		assert.Equal(t, 3, st.Running, "retired workers finish their jobs")
		close(g)
		synctest.Wait()
		st = q.Stats()
		assert.Equal(t, uint64(3), st.Done)
		assert.Equal(t, []error{nil, nil, nil}, errs, "no running job was interrupted")
		balance(t, st)
	})
}

// WithCapacity(math.MaxInt, 0), "no bound" with a durable store: an empty
// queue is 0 % full, so the scaler keeps the pool at its base size.
func TestScaleHugeCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := queue.NewWithStore(hugeStore{memstore.New[int]()}, func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(math.MaxInt, 0), queue.WithWorkers(1, 4))
		require.NoError(t, err)
		queuetest.Start(t, q)
		queuetest.Advance(10 * time.Second)
		assert.Equal(t, 1, q.Stats().Workers, "an empty queue needs no more workers")
	})
}
