package storetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// The concurrency limit (Queue.SetConcurrency) and the claim gate
// (queue.WithClaimGate) hold workers back before they claim: on every
// store, a worker held back holds no job, so the store counts the job
// ready, not running.

// stopWithin stops q, failing the test if the drain takes a minute (a
// hang, not a timing assumption).
func stopWithin(t *testing.T, q *queue.Queue[Payload]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, q.Stop(ctx), "Stop lifts the limit and the gate, and drains")
}

// A limit of 1 on two workers runs one job at a time, the other job
// staying ready in the store; raising it to 2 runs a second at once.
func concurrencyLimit(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	started := make(chan int64, 3)
	release := make(chan struct{})
	var running, most atomic.Int32
	q, ev := adminQueue(t, store, func(ctx context.Context, j queue.Job[Payload]) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		started <- j.ID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	require.NoError(t, q.SetConcurrency(1))
	for i := range 3 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Payload: Payload{N: i}}))
	}
	start(t, q)
	<-started
	// The second worker cannot claim: the one seat is taken.
	st := q.Stats()
	require.Equal(t, 1, st.Concurrency)
	require.Equal(t, 1, st.FleetRunning, "the store counts one job claimed")
	require.Equal(t, 2, st.Depth, "the other jobs stay ready")
	require.NoError(t, q.SetConcurrency(2))
	<-started
	require.Equal(t, 2, q.Stats().FleetRunning)
	close(release)
	ev.await(t, "three jobs done", func(c map[queue.EventKind]int) bool { return c[queue.EventDone] == 3 })
	require.EqualValues(t, 2, most.Load())
	stopWithin(t, q)
}

// A limit of 0 pauses claiming; a job let through by a limit of 1 runs
// while the limit is 0 again; Stop lifts the limit and drains: on the
// in-memory store every ready job runs, on a durable store (a Leaser) the
// running one and any it had claimed for this process (Stop's contract).
func concurrencyZeroStop(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	_, durable := store.(storekit.Leaser)
	started := make(chan struct{}, 3)
	release := make(chan struct{})
	var ran atomic.Int32
	q, _ := adminQueue(t, store, func(context.Context, queue.Job[Payload]) error {
		ran.Add(1)
		started <- struct{}{}
		<-release
		return nil
	})
	require.NoError(t, q.SetConcurrency(0))
	for i := range 3 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Payload: Payload{N: i}}))
	}
	start(t, q)
	st := q.Stats()
	require.Equal(t, 0, st.Concurrency)
	require.Equal(t, 0, st.FleetRunning, "no worker claims at a limit of 0")
	require.Equal(t, 3, st.Depth)
	require.NoError(t, q.SetConcurrency(1))
	<-started
	require.NoError(t, q.SetConcurrency(0))
	close(release)
	stopWithin(t, q)
	if durable {
		require.GreaterOrEqual(t, q.Stats().Done, uint64(1))
	} else {
		require.EqualValues(t, 3, q.Stats().Done, "the in-memory store's drain runs every ready job")
	}
	require.EqualValues(t, q.Stats().Done, ran.Load())
}

// Workers in the claim gate hold no job; each one the gate lets through
// claims one; a gate error is counted and the worker tries again; Stop
// lifts the gate (and drains, as Stop does on the store).
func claimGate(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	entered := make(chan struct{}, 16)
	tokens := make(chan error)
	gate := func(ctx context.Context) error {
		entered <- struct{}{}
		select {
		case err := <-tokens:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	q, ev := adminQueue(t, store, idle, queue.WithClaimGate(gate))
	for i := range 3 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Payload: Payload{N: i}}))
	}
	start(t, q)
	<-entered
	<-entered
	st := q.Stats()
	require.Equal(t, 2, st.AtGate, "both workers wait in the gate")
	require.Equal(t, 0, st.FleetRunning, "holding no job")
	require.Equal(t, 3, st.Depth)
	tokens <- nil
	ev.await(t, "one job done", func(c map[queue.EventKind]int) bool { return c[queue.EventDone] == 1 })
	<-entered                          // the worker is back in the gate
	tokens <- context.DeadlineExceeded // not the gate's ctx's: an error
	<-entered                          // after the backoff
	require.EqualValues(t, 1, q.Stats().GateErrors)
	st = q.Stats()
	require.Equal(t, 0, st.Running, "no worker holds a job")
	// pgstore's outcome write claims the worker's next job ahead, which
	// then waits in the store's hand-out for the next worker to claim.
	require.Equal(t, 2, st.Depth+st.FleetRunning, "the jobs not run are in the store: %+v", st)
	if _, durable := store.(storekit.Leaser); !durable {
		require.Equal(t, 2, st.Depth)
	}
	stopWithin(t, q)
	require.EqualValues(t, 1, q.Stats().GateErrors)
}
