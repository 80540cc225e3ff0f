package queue_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/queuetest"
)

// The admin API samples run times without an observer: the runs of one
// job ID in 256, and each worker's first run after a refresh of the
// coarse clock (a RunTimes call is one); Longest is taken by the call
// that reads it.
func TestAdminRunTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q, err := queue.New(func(_ context.Context, j queue.Job[int]) error {
			<-time.After(time.Duration(j.Payload) * time.Millisecond) // the run's work, in the bubble's time
			return nil
		}, queue.WithWorkers(1, 1))
		require.NoError(t, err)
		a := q.Admin()
		require.NoError(t, q.Start(ctx))
		defer func() { require.NoError(t, q.Shutdown(ctx)) }()

		rt, ok := a.RunTimes()
		require.True(t, ok, "a queue's Admin times runs")
		require.Zero(t, rt.Runs)
		// The first run after RunTimes' stamp is timed; the next 254 (IDs
		// 2 to 255) are not. All of it ends before the scaler's tick at
		// 1 s moves the coarse clock.
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 10}))
		for range 254 {
			require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 2}))
		}
		queuetest.Advance(600 * time.Millisecond) // 520 ms of runs
		rt, _ = a.RunTimes()
		require.EqualValues(t, 1, rt.Runs)
		require.Equal(t, 10*time.Millisecond, rt.Total)
		require.Equal(t, 10*time.Millisecond, rt.Longest)
		// Job 256 is timed.
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 30}))
		queuetest.Advance(40 * time.Millisecond)
		rt, _ = a.RunTimes()
		require.EqualValues(t, 2, rt.Runs)
		require.Equal(t, 40*time.Millisecond, rt.Total)
		require.Equal(t, 30*time.Millisecond, rt.Longest)
		rt, _ = a.RunTimes()
		require.Zero(t, rt.Longest, "the previous call took the longest")
		require.EqualValues(t, 2, rt.Runs, "runs are cumulative")
		// RunTimes refreshed the coarse clock: the next run is timed.
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 5}))
		queuetest.Advance(10 * time.Millisecond)
		rt, _ = a.RunTimes()
		require.EqualValues(t, 3, rt.Runs)
		require.Equal(t, 5*time.Millisecond, rt.Longest)
	})
}

// A running job is listed with its start to the coarse clock: not after
// it started, and at most a scale interval before.
func TestAdminRunningStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		release := make(chan struct{})
		q, err := queue.New(func(ctx context.Context, _ queue.Job[int]) error {
			<-release
			return nil
		}, queue.WithWorkers(1, 1))
		require.NoError(t, err)
		a := q.Admin()
		require.NoError(t, q.Start(ctx))
		defer func() { require.NoError(t, q.Shutdown(ctx)) }()
		queuetest.Advance(1500 * time.Millisecond) // the scaler ticked at 1 s
		start := time.Now()
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: "k"}))
		synctest.Wait()
		p, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Running}})
		require.NoError(t, err)
		require.Len(t, p.Jobs, 1)
		require.Equal(t, "k", p.Jobs[0].Key)
		require.False(t, p.Jobs[0].Updated.After(start))
		require.Equal(t, start.Add(-500*time.Millisecond), p.Jobs[0].Updated, "the scaler's last tick")
		close(release)
	})
}

// Admin reads and cancels of running jobs race with workers ending and
// starting runs: every job still ends once, done or cancelled, and is
// counted.
func TestAdminRunningRaces(t *testing.T) {
	ctx := context.Background()
	const n = 3000
	var mu sync.Mutex
	ended := map[int64]queue.EventKind{}
	all := make(chan struct{})
	q, err := queue.New(func(ctx context.Context, j queue.Job[int]) error {
		if j.Payload%10 == 0 {
			<-ctx.Done() // a job only the admin API ends
			return ctx.Err()
		}
		return nil
	}, queue.WithWorkers(4, 4), queue.WithCapacity(n, 0), queue.WithObserver(func(ev queue.Event) {
		switch ev.Kind {
		case queue.EventDone, queue.EventCancelled, queue.EventDead, queue.EventRetried:
			mu.Lock()
			defer mu.Unlock()
			if k, ok := ended[ev.JobID]; ok {
				t.Errorf("job %d ended twice: %s, then %s", ev.JobID, k, ev.Kind)
			}
			ended[ev.JobID] = ev.Kind
			if len(ended) == n {
				close(all)
			}
		}
	}))
	require.NoError(t, err)
	a := q.Admin()
	require.NoError(t, q.Start(ctx))
	for i := range n {
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: i}))
	}
	for done := false; !done; {
		select {
		case <-all:
			done = true
		default:
			p, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Running}})
			require.NoError(t, err)
			for _, j := range p.Jobs {
				// It may have ended meanwhile: then ErrState or ErrNotFound.
				_ = a.Cancel(ctx, j.ID)
			}
			_, err = a.Counts(ctx)
			require.NoError(t, err)
		}
	}
	require.NoError(t, q.Shutdown(ctx))
	st := q.Stats()
	require.EqualValues(t, n, st.Done+st.Cancelled)
	require.GreaterOrEqual(t, st.Cancelled, uint64(n/10), "every blocking job cancelled, and no-op ones caught running")
	require.EqualValues(t, len(ended), n)
}

// The admin API's pause, resume and delete are observed; cancel and
// retry are observed as a cancelled job and a new enqueued one. Events
// of a producer and a worker may come in either order: each step's are
// compared as a set.
func TestAdminActionEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var mu sync.Mutex
		var evs []queue.Event
		q, err := queue.New(func(context.Context, queue.Job[int]) error {
			return queue.Permanent(context.Canceled)
		}, queue.WithWorkers(1, 1), queue.WithObserver(func(ev queue.Event) {
			mu.Lock()
			defer mu.Unlock()
			evs = append(evs, ev)
		}))
		require.NoError(t, err)
		a := q.Admin()
		kinds := func() []queue.EventKind {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			var out []queue.EventKind
			for _, ev := range evs {
				out = append(out, ev.Kind)
			}
			evs = nil
			return out
		}
		require.NoError(t, a.Pause(ctx))
		require.NoError(t, a.Pause(ctx), "pausing a paused queue")
		require.ElementsMatch(t, []queue.EventKind{queue.EventPaused}, kinds())
		// Started paused, the worker waits before it claims (a worker
		// paused while it waits in a claim puts the job it gets back:
		// EventDeferred).
		require.NoError(t, q.Start(ctx))
		defer func() { require.NoError(t, q.Shutdown(ctx)) }()
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: "a"}))
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: "b"}))
		require.ElementsMatch(t, []queue.EventKind{queue.EventEnqueued, queue.EventEnqueued}, kinds())
		require.NoError(t, a.Resume(ctx))
		require.ElementsMatch(t, []queue.EventKind{queue.EventUnpaused, queue.EventStarted, queue.EventDead,
			queue.EventStarted, queue.EventDead}, kinds())
		p, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Dead}, Oldest: true})
		require.NoError(t, err)
		require.Len(t, p.Jobs, 2)
		require.NoError(t, a.Delete(ctx, p.Jobs[0].ID))
		mu.Lock()
		require.Len(t, evs, 1)
		require.Equal(t, queue.EventDeleted, evs[0].Kind)
		require.Equal(t, p.Jobs[0].ID, evs[0].JobID)
		require.Equal(t, "a", evs[0].Key)
		mu.Unlock()
		kinds()
		require.NoError(t, a.Retry(ctx, p.Jobs[1].ID))
		require.ElementsMatch(t, []queue.EventKind{queue.EventEnqueued, queue.EventStarted, queue.EventDead}, kinds())
		require.NoError(t, q.EnqueueIn(ctx, queue.Job[int]{Key: "later"}, time.Hour))
		page, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Scheduled}})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 1)
		kinds()
		require.NoError(t, a.Delete(ctx, page.Jobs[0].ID), "a pending job is cancelled")
		require.ElementsMatch(t, []queue.EventKind{queue.EventCancelled}, kinds())
		st := q.Stats()
		require.EqualValues(t, 3, st.Dead)
		require.EqualValues(t, 1, st.Cancelled)
		require.EqualValues(t, 4, st.Enqueued)
	})
}
