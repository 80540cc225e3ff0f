package queue_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// A job parked behind its target's busy slot is listed as waiting, and
// cancelling it ends it cancelled, counted; the dead-job retention keeps
// the newest 1000.
func TestAdminWaitingAndRetention(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	started := make(chan string, 4)
	cancelled := make(chan struct{}, 4)
	var dead atomic.Int32
	deadCh := make(chan struct{}, 1)
	q, err := queue.New(func(ctx context.Context, j queue.Job[int]) error {
		if j.Target == "" {
			return queue.Permanent(context.Canceled)
		}
		started <- j.Key
		<-release
		return nil
	}, queue.WithWorkers(2, 2), queue.WithTargetConcurrency(1), queue.WithObserver(func(ev queue.Event) {
		switch ev.Kind {
		case queue.EventCancelled:
			cancelled <- struct{}{}
		case queue.EventDead:
			if dead.Add(1) == 1010 {
				deadCh <- struct{}{}
			}
		}
	}))
	require.NoError(t, err)
	require.NoError(t, q.Start(ctx))
	t.Cleanup(func() { close(release); _ = q.Shutdown(ctx) })
	a := q.Admin()
	require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: "one", Target: "t"}))
	require.Equal(t, "one", <-started)
	require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: "two", Target: "t"}))
	// The second worker parks it as it claims it; parking has no event:
	// poll the condition, with a deadline.
	var waiting []admin.JobInfo
	deadline := time.Now().Add(time.Minute)
	for len(waiting) == 0 {
		require.True(t, time.Now().Before(deadline), "the job never parked")
		p, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Waiting}})
		require.NoError(t, err)
		waiting = p.Jobs
		runtime.Gosched()
	}
	require.Equal(t, admin.Waiting, waiting[0].State)
	require.Equal(t, "two", waiting[0].Key)
	require.NoError(t, a.Cancel(ctx, waiting[0].ID))
	<-cancelled
	require.EqualValues(t, 1, q.Stats().Cancelled)

	for i := range 1010 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: i}))
	}
	<-deadCh
	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1000, c[admin.Dead])
}
