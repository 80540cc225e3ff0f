package fleettest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// UndecodableReachesOnDead checks, on a durable store, that a job whose
// payload the claiming queue cannot decode ends as every dead-lettered
// job does: two queues of one name with different payload types (strs
// makes the store of a queue of strings, ints one of ints, both of the
// same queue), the queue of strings enqueues a job the queue of ints
// claims; the queue of ints dead-letters it, calls its OnDead hook once
// with a *queue.DecodeError naming the job, keeps the error in
// Stats.RecentErrors and counts the job dead once.
func UndecodableReachesOnDead(t *testing.T, ints func(t *testing.T) storekit.Store[int], strs func(t *testing.T) storekit.Store[string]) {
	ctx := context.Background()
	w, err := queue.NewWithStore(strs(t), func(context.Context, queue.Job[string]) error { return nil })
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Shutdown(ctx) })
	// Never started: it only enqueues, so the queue of ints claims the job.
	require.NoError(t, w.Enqueue(ctx, queue.Job[string]{Key: "bad", Target: "api", Payload: "not a number"}))

	type dead struct {
		job queue.Job[int]
		err error
	}
	hooked := make(chan dead, 4)
	q, err := queue.NewWithStore(ints(t), func(context.Context, queue.Job[int]) error {
		return errors.New("an undecodable job must not reach a handler")
	})
	require.NoError(t, err)
	q.OnDead(func(_ context.Context, job queue.Job[int], err error) { hooked <- dead{job, err} })
	require.NoError(t, q.Start(ctx))
	t.Cleanup(func() { _ = q.Shutdown(ctx) })

	var d dead
	select {
	case d = <-hooked:
	case <-time.After(10 * time.Second):
		t.Fatalf("OnDead not called within 10s for the undecodable job; Stats: dead %d, recent errors %v",
			q.Stats().Dead, q.Stats().RecentErrors)
	}
	var de *queue.DecodeError
	require.True(t, errors.As(d.err, &de), "OnDead's error %v is not a *queue.DecodeError", d.err)
	require.Equal(t, d.job.ID, de.JobID, "the DecodeError names another job")
	require.Equal(t, "bad", d.job.Key)
	require.Equal(t, "api", d.job.Target)
	require.Zero(t, d.job.Payload, "the payload did not decode")

	st := q.Stats()
	require.EqualValues(t, 1, st.Dead, "dead-lettered jobs counted")
	require.Len(t, st.RecentErrors, 1)
	require.Equal(t, d.job.ID, st.RecentErrors[0].JobID)
	require.Contains(t, st.RecentErrors[0].Error, "decoding payload")
	select {
	case again := <-hooked:
		t.Fatalf("OnDead called twice: again with %+v", again)
	default:
	}
}
