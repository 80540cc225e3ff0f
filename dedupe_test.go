package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

func TestDuplicateWhilePendingAcceptedAfterDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := newQueue(t, rec.handler(nil))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Payload: 2, Key: "k"}), queue.ErrDuplicate, "queued")
		assert.ErrorIs(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 3, Key: "k"}, time.Minute), queue.ErrDuplicate, "queued, then scheduled")
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 4, Key: "s"}, time.Minute))
		assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Payload: 5, Key: "s"}), queue.ErrDuplicate, "scheduled")
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 6}), "no key, no dedupe")
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 7}))
		st := q.Stats()
		assert.Equal(t, 2, st.Store.PendingKeys)
		assert.Equal(t, uint64(4), st.Enqueued, "duplicates are not counted as enqueued")

		require.NoError(t, q.Start(bg))
		synctest.Wait()
		assert.Equal(t, 1, q.Stats().Store.PendingKeys, "released when done")
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 8, Key: "k"}), "accepted after done")
		advance(time.Minute)
		assert.ElementsMatch(t, []int{1, 6, 7, 8, 4}, rec.payloads())
		st = q.Stats()
		assert.Zero(t, st.Store.PendingKeys)
		balance(t, st)
	})
}

func TestKeyReleasedAfterDeadAndKeptDuringRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(context.Context, queue.Job[int]) error { return errors.New("fail") }),
			queue.WithRetry(2, time.Second, time.Second))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		synctest.Wait()
		assert.Equal(t, 1, q.Stats().Store.Scheduled, "waiting for its retry")
		assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Payload: 2, Key: "k"}), queue.ErrDuplicate, "a retry keeps its key")
		advance(time.Second)
		assert.Equal(t, 2, rec.len())
		assert.Equal(t, uint64(1), q.Stats().Dead)
		assert.Zero(t, q.Stats().Store.PendingKeys, "released when dead")
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 3, Key: "k"}))
	})
}

func TestCoalesceWhileRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gates := []gate{make(gate), make(gate)}
		var runs atomic.Int32
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, _ queue.Job[int]) error {
			n := runs.Add(1)
			if int(n) <= len(gates) {
				return gates[n-1].wait(ctx)
			}
			return nil
		}))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		synctest.Wait()
		require.Equal(t, 1, q.Stats().Running)

		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 2, Key: "k"}), "coalesced into one more run")
		assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Payload: 3, Key: "k"}), queue.ErrDuplicate, "a rerun is already waiting")
		st := q.Stats()
		assert.Equal(t, uint64(1), st.Coalesced)
		assert.Equal(t, 1, st.Store.PendingKeys)

		close(gates[0])
		synctest.Wait()
		assert.Equal(t, []int{1, 2}, rec.payloads(), "the rerun runs after the current run ends, with its own payload")
		// While the rerun runs, the key can coalesce again.
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 4, Key: "k"}))
		close(gates[1])
		synctest.Wait()
		assert.Equal(t, []int{1, 2, 4}, rec.payloads())

		advance(time.Hour)
		assert.Equal(t, 3, rec.len(), "exactly one more run per coalesced enqueue")
		st = q.Stats()
		assert.Equal(t, uint64(3), st.Done)
		assert.Equal(t, uint64(2), st.Coalesced)
		assert.Zero(t, st.Store.PendingKeys)
		balance(t, st)
	})
}

func TestCoalescedRerunSupersedesRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, job queue.Job[int]) error {
			if job.Payload == 1 {
				if err := g.wait(ctx); err != nil {
					return err
				}
				return errors.New("fail")
			}
			return nil
		}), queue.WithRetry(0, time.Minute, time.Minute))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		synctest.Wait()
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 2, Key: "k"}))
		close(g)
		synctest.Wait()
		assert.Equal(t, []int{1, 2}, rec.payloads(), "the newer job replaces the retry of the older one")
		advance(time.Hour)
		assert.Equal(t, 2, rec.len())
		st := q.Stats()
		assert.Equal(t, uint64(1), st.Cancelled, "the superseded retry is counted")
		assert.Equal(t, uint64(1), st.Done)
		balance(t, st)
	})
}

func TestCoalesceOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, _ queue.Job[int]) error { return g.wait(ctx) }),
			queue.WithCoalesce(false))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		synctest.Wait()
		assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Payload: 2, Key: "k"}), queue.ErrDuplicate, "running key")
		close(g)
		synctest.Wait()
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 3, Key: "k"}))
		synctest.Wait()
		assert.Equal(t, []int{1, 3}, rec.payloads())
		assert.Zero(t, q.Stats().Coalesced)
	})
}

func TestCancelPreventsRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[string]
		q := newQueue(t, rec.handler(nil))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "ready", Key: "r"}))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "keep", Key: "x"}))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "sched", Key: "s", Group: "g"}, time.Minute))

		for _, key := range []string{"r", "s"} {
			n, err := q.Cancel(bg, key)
			require.NoError(t, err)
			assert.Equal(t, 1, n, key)
		}
		n, err := q.Cancel(bg, "r")
		require.NoError(t, err)
		assert.Zero(t, n, "cancelling twice")
		n, err = q.Cancel(bg, "unknown")
		require.NoError(t, err)
		assert.Zero(t, n)

		st := q.Stats()
		assert.Equal(t, 1, st.Depth, "a cancelled job leaves the depth at once")
		assert.Zero(t, st.Store.Scheduled)
		assert.Equal(t, 1, st.Store.PendingKeys, "and its mark is cleared")
		assert.Equal(t, uint64(2), st.Cancelled)
		balance(t, st)

		require.NoError(t, q.Start(bg))
		advance(2 * time.Minute)
		assert.Equal(t, []string{"keep"}, rec.payloads(), "cancelled jobs never run")

		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "ready again", Key: "r"}))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "sched again", Key: "s", Group: "g"}, time.Minute))
		advance(time.Minute)
		assert.Equal(t, []string{"keep", "ready again", "sched again"}, rec.payloads())
		balance(t, q.Stats())
	})
}

func TestCancelRerunOfRunningKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, _ queue.Job[int]) error { return g.wait(ctx) }))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		synctest.Wait()
		n, err := q.Cancel(bg, "k")
		require.NoError(t, err)
		assert.Zero(t, n, "a running job is not interrupted")
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 2, Key: "k"}))
		n, err = q.Cancel(bg, "k")
		require.NoError(t, err)
		assert.Equal(t, 1, n, "its rerun is cancelled")
		close(g)
		advance(time.Minute)
		assert.Equal(t, []int{1}, rec.payloads())
		st := q.Stats()
		assert.Equal(t, uint64(1), st.Done)
		assert.Equal(t, uint64(1), st.Cancelled)
		assert.Zero(t, st.Store.PendingKeys)
		balance(t, st)
	})
}

func TestCancelMatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[string]
		q := newQueue(t, rec.handler(nil))
		keys := []string{"h1:f1:p1", "h1:f2:p1", "h1:f1:p2", "h2:f1:p1", "h1:f3:p1"}
		for i, k := range keys {
			if i%2 == 0 {
				require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: k, Key: k}))
			} else {
				require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: k, Key: k}, time.Minute))
			}
		}
		// A forwarder cancelling all jobs of one peer for one torrent,
		// across upstreams.
		n, err := q.CancelMatch(bg, func(key string) bool {
			return strings.HasPrefix(key, "h1:") && strings.HasSuffix(key, ":p1")
		})
		require.NoError(t, err)
		assert.Equal(t, 3, n)
		st := q.Stats()
		assert.Equal(t, uint64(3), st.Cancelled)
		assert.Equal(t, 2, st.Store.PendingKeys)
		balance(t, st)

		require.NoError(t, q.Start(bg))
		advance(time.Minute)
		assert.ElementsMatch(t, []string{"h1:f1:p2", "h2:f1:p1"}, rec.payloads())
		n, err = q.CancelMatch(bg, func(string) bool { return true })
		require.NoError(t, err)
		assert.Zero(t, n)
	})
}

func TestConcurrentDedupe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Many producers race on a few keys: each key is accepted at most
		// once while pending, and every accepted job runs exactly once.
		var runs sync.Map
		q := newQueue(t, func(_ context.Context, job queue.Job[int]) error {
			v, _ := runs.LoadOrStore(job.ID, new(atomic.Int32))
			v.(*atomic.Int32).Add(1)
			return nil
		}, queue.WithCapacity(10000, 0))
		var accepted atomic.Int64
		var wg sync.WaitGroup
		for p := range 8 {
			wg.Go(func() {
				for i := range 200 {
					err := q.Enqueue(bg, queue.Job[int]{Payload: p, Key: fmt.Sprintf("k%d", i%50)})
					if err == nil {
						accepted.Add(1)
					} else {
						assert.ErrorIs(t, err, queue.ErrDuplicate)
					}
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(50), accepted.Load(), "one per key before anything ran")
		require.NoError(t, q.Start(bg))
		require.NoError(t, q.Stop(bg))
		n := 0
		runs.Range(func(_, v any) bool {
			n++
			assert.Equal(t, int32(1), v.(*atomic.Int32).Load())
			return true
		})
		assert.Equal(t, 50, n)
	})
}

// TestUniqueWindow: a key enqueued with UniqueFor refuses other jobs for
// the window, whether its job waits, runs or has ended, and is not
// coalesced while it runs; the refusal is counted as no enqueue; after the
// window the key is free again. Time is the bubble's.
func TestUniqueWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, j queue.Job[int]) error {
			if j.Payload == 1 {
				<-release
			}
			return nil
		}), queue.WithWorkers(1, 1))
		job := queue.Job[int]{Key: "k", UniqueFor: time.Hour, Payload: 1}
		require.NoError(t, q.Enqueue(bg, job))
		synctest.Wait() // running
		err := q.Enqueue(bg, queue.Job[int]{Key: "k", Payload: 2})
		var dup *queue.DuplicateError
		require.ErrorAs(t, err, &dup, "running, in its window: refused, not coalesced")
		assert.Equal(t, "k", dup.Key)
		assert.Contains(t, err.Error(), "unique window")
		close(release)
		synctest.Wait()
		assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Key: "k", Payload: 3}), queue.ErrDuplicate, "done, in its window")
		assert.ErrorIs(t, q.EnqueueIn(bg, queue.Job[int]{Key: "k", Payload: 4}, time.Minute), queue.ErrDuplicate, "scheduled, in its window")
		advance(time.Hour)
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "k", Payload: 5}), "after the window")
		synctest.Wait()
		assert.Equal(t, []int{1, 5}, rec.payloads())
		st := q.Stats()
		assert.Equal(t, uint64(2), st.Enqueued)
		assert.Zero(t, st.Coalesced)
	})
}
