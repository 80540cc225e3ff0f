package queue_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

// blocker is a handler that counts its runs and holds each until release
// closes, recording the most runs at once.
type blocker struct {
	release       chan struct{}
	running, most atomic.Int32
	ran           atomic.Int32
}

func newBlocker() *blocker { return &blocker{release: make(chan struct{})} }

func (b *blocker) handle(ctx context.Context, _ queue.Job[int]) error {
	n := b.running.Add(1)
	defer b.running.Add(-1)
	for m := b.most.Load(); n > m && !b.most.CompareAndSwap(m, n); m = b.most.Load() {
	}
	b.ran.Add(1)
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func enqueueN(t *testing.T, q *queue.Queue[int], n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Payload: i}))
	}
}

func TestSetConcurrencyRejectsOutOfRange(t *testing.T) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithWorkers(2, 4))
	require.NoError(t, err)
	for _, n := range []int{-1, 5} {
		err := q.SetConcurrency(n)
		require.ErrorIs(t, err, queue.ErrInvalidConcurrency, "SetConcurrency(%d)", n)
		assert.Contains(t, err.Error(), "0..4")
		assert.Contains(t, err.Error(), " "+itoa(n)+" ")
	}
	assert.Equal(t, 4, q.Stats().Concurrency, "a refused value changes nothing")
	require.NoError(t, q.SetConcurrency(0))
	require.NoError(t, q.SetConcurrency(4))
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + itoa(n%10)
}

// Workers beyond the limit wait holding no job; raising the limit lets
// them claim at once.
func TestSetConcurrencyLimitsRunningJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlocker()
		q, err := queue.New(b.handle, queue.WithWorkers(4, 4))
		require.NoError(t, err)
		require.NoError(t, q.SetConcurrency(1))
		require.NoError(t, q.Start(context.Background()))
		enqueueN(t, q, 8)
		synctest.Wait()
		st := q.Stats()
		assert.Equal(t, 1, st.Running)
		assert.Equal(t, 1, st.Concurrency)
		assert.Equal(t, 3, st.AtGate)
		assert.Equal(t, 7, st.Depth, "the waiting workers hold no job")
		require.NoError(t, q.SetConcurrency(3))
		synctest.Wait()
		st = q.Stats()
		assert.Equal(t, 3, st.Running)
		assert.Equal(t, 1, st.AtGate)
		close(b.release)
		synctest.Wait()
		assert.EqualValues(t, 8, q.Stats().Done)
		assert.EqualValues(t, 3, b.most.Load())
		require.NoError(t, q.Stop(context.Background()))
	})
}

// A limit of 0 pauses claiming; Stop lifts it and drains.
func TestSetConcurrencyZeroPausesAndStopDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlocker()
		close(b.release)
		q, err := queue.New(b.handle, queue.WithWorkers(2, 2))
		require.NoError(t, err)
		require.NoError(t, q.Start(context.Background()))
		synctest.Wait() // the workers wait in Claim, for a job
		require.NoError(t, q.SetConcurrency(0))
		enqueueN(t, q, 3)
		synctest.Wait()
		assert.Zero(t, b.ran.Load(), "no job runs at a limit of 0")
		st := q.Stats()
		assert.Equal(t, 3, st.Depth)
		assert.Equal(t, 2, st.AtGate)
		assert.Positive(t, st.Deferred, "a job claimed as the limit fell is put back")
		require.NoError(t, q.Stop(context.Background()))
		assert.EqualValues(t, 3, q.Stats().Done)
	})
}

// Lowering the limit interrupts no job: the workers above it wait once
// their job ends.
func TestSetConcurrencyLoweredLetsRunningJobsEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlocker()
		q, err := queue.New(b.handle, queue.WithWorkers(3, 3))
		require.NoError(t, err)
		require.NoError(t, q.Start(context.Background()))
		enqueueN(t, q, 3)
		synctest.Wait()
		require.Equal(t, 3, q.Stats().Running)
		require.NoError(t, q.SetConcurrency(1))
		enqueueN(t, q, 3)
		synctest.Wait()
		assert.Equal(t, 3, q.Stats().Running, "running jobs go on")
		b.release <- struct{}{}
		b.release <- struct{}{}
		b.release <- struct{}{}
		synctest.Wait()
		st := q.Stats()
		assert.Equal(t, 1, st.Running)
		assert.Equal(t, 2, st.AtGate)
		assert.Equal(t, 2, st.Depth)
		close(b.release)
		require.NoError(t, q.Stop(context.Background()))
		assert.EqualValues(t, 6, q.Stats().Done)
	})
}

// The autoscaler adds no worker above the limit, and follows it up.
func TestScalerRespectsConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBlocker()
		q, err := queue.New(b.handle, queue.WithCapacity(100, 0), queue.WithWorkers(1, 8),
			queue.WithScaling(queue.ScaleByDepth, 0, 0, time.Second))
		require.NoError(t, err)
		require.NoError(t, q.SetConcurrency(2))
		require.NoError(t, q.Start(context.Background()))
		enqueueN(t, q, 20)
		time.Sleep(20 * time.Second)
		synctest.Wait()
		assert.Equal(t, 2, q.Stats().Workers)
		require.NoError(t, q.SetConcurrency(5))
		time.Sleep(20 * time.Second)
		synctest.Wait()
		assert.Equal(t, 5, q.Stats().Workers)
		assert.Equal(t, 5, q.Stats().Running)
		require.NoError(t, q.SetConcurrency(3))
		time.Sleep(20 * time.Second)
		synctest.Wait()
		assert.Equal(t, 3, q.Stats().Workers, "workers above the limit retire")
		close(b.release)
		require.NoError(t, q.Stop(context.Background()))
	})
}

// A worker in the gate holds no job; one the gate lets through runs one.
func TestClaimGateHoldsNoJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tokens := make(chan struct{})
		var calls atomic.Int32
		gate := func(ctx context.Context) error {
			calls.Add(1)
			select {
			case <-tokens:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var ran atomic.Int32
		q, err := queue.New(func(context.Context, queue.Job[int]) error { ran.Add(1); return nil },
			queue.WithWorkers(2, 2), queue.WithClaimGate(gate))
		require.NoError(t, err)
		require.NoError(t, q.Start(context.Background()))
		enqueueN(t, q, 3)
		synctest.Wait()
		st := q.Stats()
		assert.Zero(t, ran.Load())
		assert.Equal(t, 2, st.AtGate)
		assert.Equal(t, 3, st.Depth, "the workers in the gate hold no job")
		tokens <- struct{}{}
		synctest.Wait()
		assert.EqualValues(t, 1, ran.Load())
		assert.Equal(t, 2, q.Stats().Depth)
		require.NoError(t, q.Stop(context.Background()), "Stop lifts the gate")
		assert.EqualValues(t, 3, ran.Load(), "and drains")
		assert.Zero(t, q.Stats().GateErrors, "a gate ended by the stop is no error")
	})
}

// A gate's error is counted, and the worker calls it again after a backoff.
func TestClaimGateErrorBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		gate := func(context.Context) error {
			if calls.Add(1) <= 2 {
				return errors.New("budget backend down")
			}
			return nil
		}
		var ran atomic.Int32
		q, err := queue.New(func(context.Context, queue.Job[int]) error { ran.Add(1); return nil },
			queue.WithWorkers(1, 1), queue.WithClaimGate(gate))
		require.NoError(t, err)
		enqueueN(t, q, 1)
		require.NoError(t, q.Start(context.Background()))
		synctest.Wait()
		assert.EqualValues(t, 1, q.Stats().GateErrors)
		assert.Equal(t, 1, q.Stats().AtGate, "backing off, at the gate")
		assert.Zero(t, ran.Load())
		time.Sleep(10 * time.Second) // past both backoffs (at most 50 ms and 100 ms)
		synctest.Wait()
		assert.EqualValues(t, 2, q.Stats().GateErrors)
		assert.EqualValues(t, 1, ran.Load())
		require.NoError(t, q.Stop(context.Background()))
	})
}

// Shutdown does not wait on a gate or a limit of 0; the jobs stay queued.
func TestShutdownLiftsGateAndLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []queue.Option
		zero bool
	}{
		{"gate", []queue.Option{queue.WithClaimGate(func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })}, false},
		{"zero", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var ran atomic.Int32
				q, err := queue.New(func(context.Context, queue.Job[int]) error { ran.Add(1); return nil },
					append(tc.opts, queue.WithWorkers(2, 2))...)
				require.NoError(t, err)
				if tc.zero {
					require.NoError(t, q.SetConcurrency(0))
				}
				require.NoError(t, q.Start(context.Background()))
				enqueueN(t, q, 3)
				synctest.Wait()
				require.Equal(t, 2, q.Stats().AtGate)
				require.NoError(t, q.Shutdown(context.Background()))
				assert.Zero(t, ran.Load())
				assert.Equal(t, 3, q.Stats().Depth, "the jobs stay in the store")
			})
		})
	}
}

// A retired worker leaves the gate: the autoscaler shrinks the pool to
// a lowered limit while its workers wait in the gate.
func TestClaimGateRetiredWorkerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
		q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(100, 0),
			queue.WithWorkers(1, 4), queue.WithClaimGate(gate), queue.WithScaling(queue.ScaleByDepth, 0, 0, time.Second))
		require.NoError(t, err)
		require.NoError(t, q.Start(context.Background()))
		enqueueN(t, q, 10)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		st := q.Stats()
		require.Equal(t, 4, st.Workers)
		require.Equal(t, 4, st.AtGate)
		require.NoError(t, q.SetConcurrency(2))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		st = q.Stats()
		assert.Equal(t, 2, st.Workers)
		assert.Equal(t, 2, st.AtGate, "the retired workers left the gate")
		require.NoError(t, q.Shutdown(context.Background()))
		assert.Equal(t, 10, q.Stats().Depth)
	})
}
