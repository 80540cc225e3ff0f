package queue_test

// Lifecycle races between Start, Stop and Shutdown, and a store that takes
// time (a durable store's Start dials, its Add does a round trip). The
// stalls are channels the tests release; a guard timer bounds each wait
// on the queue so that a regression fails instead of hanging (the queue
// blocks on a mutex in these races, which a synctest bubble cannot see
// past).

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
)

// stallStore is the in-memory store behind the Store interface, with a
// Start and an Add that wait for the test.
type stallStore struct {
	*memstore.Store[int]
	startEntered, startRelease chan struct{}
	addEntered, addRelease     chan struct{}
	stallAdd                   atomic.Bool
}

func newStallStore() *stallStore {
	return &stallStore{
		Store:        memstore.New[int](),
		startEntered: make(chan struct{}),
		startRelease: make(chan struct{}),
		addEntered:   make(chan struct{}, 1),
		addRelease:   make(chan struct{}),
	}
}

func (s *stallStore) Start(ctx context.Context) error {
	close(s.startEntered)
	<-s.startRelease
	return s.Store.Start(ctx)
}

func (s *stallStore) Add(ctx context.Context, j queue.Job[int]) (storekit.Added, error) {
	if s.stallAdd.Load() {
		s.addEntered <- struct{}{}
		<-s.addRelease
	}
	return s.Store.Add(ctx, j)
}

// recv waits for a value from c, failing the test after 10 s.
func recv[V any](t *testing.T, c <-chan V, what string) V {
	t.Helper()
	guard := time.NewTimer(10 * time.Second)
	defer guard.Stop()
	select {
	case v := <-c:
		return v
	case <-guard.C:
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// waitStopping waits until a Stop or Shutdown has begun: Stats reports
// the state, which moves on at once, without waiting on the store.
func waitStopping(t *testing.T, q *queue.Queue[int]) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for q.Stats().State == "new" || q.Stats().State == "running" {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the stop to begin")
		}
		runtime.Gosched()
	}
}

// enqueueIntoStalledAdd starts a one-worker queue on a stallStore and
// returns once an Enqueue is inside the store's Add, stalled until the
// test closes st.addRelease; ran counts handler runs, enqErr receives the
// Enqueue's result.
func enqueueIntoStalledAdd(t *testing.T) (q *queue.Queue[int], st *stallStore, ran *atomic.Int32, enqErr <-chan error) {
	t.Helper()
	st = newStallStore()
	close(st.startRelease)
	ran = new(atomic.Int32)
	q, err := queue.NewWithStore(st, func(context.Context, queue.Job[int]) error { ran.Add(1); return nil }, queue.WithWorkers(1, 1))
	require.NoError(t, err)
	require.NoError(t, q.Start(context.Background()))
	st.stallAdd.Store(true)
	errc := make(chan error, 1)
	go func() { errc <- q.Enqueue(context.Background(), queue.Job[int]{Payload: 1}) }()
	recv(t, st.addEntered, "Enqueue to reach Store.Add")
	return q, st, ran, errc
}

// A Stop that begins while Start is still starting the store wins: Start
// returns ErrClosed and starts no worker, Stop returns once the store is
// closed, and the job enqueued before stays in the store, unrun.
func TestStopDuringStartWins(t *testing.T) {
	st := newStallStore()
	var ran atomic.Int32
	q, err := queue.NewWithStore(st, func(context.Context, queue.Job[int]) error { ran.Add(1); return nil }, queue.WithWorkers(1, 1))
	require.NoError(t, err)
	require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Payload: 1}))

	startErr := make(chan error, 1)
	go func() { startErr <- q.Start(context.Background()) }()
	recv(t, st.startEntered, "Start to reach Store.Start")
	stopErr := make(chan error, 1)
	go func() { stopErr <- q.Stop(context.Background()) }()
	waitStopping(t, q)
	close(st.startRelease)

	assert.ErrorIs(t, recv(t, startErr, "Start"), queue.ErrClosed)
	assert.NoError(t, recv(t, stopErr, "Stop"))
	recv(t, q.Done(), "Done")
	assert.Zero(t, ran.Load(), "no worker ran after the stop began")
	assert.Equal(t, 1, q.Stats().Depth, "the job stays in the store")
}

// Stop's ctx bounds it even while an Enqueue is inside a stalled store's
// Add, and so does a later Shutdown's. The Enqueue, which passed the
// state check before the stop began, is accepted once the store answers,
// and the store is drained and closed only after it: the job is in the
// store when Done closes (Shutdown ran no more jobs), not lost.
func TestStopHonoursCtxWhileAddStalls(t *testing.T) {
	q, st, ran, enqErr := enqueueIntoStalledAdd(t)

	ctx, cancel := context.WithCancel(context.Background())
	stopErr := make(chan error, 1)
	go func() { stopErr <- q.Stop(ctx) }()
	waitStopping(t, q)
	assert.ErrorIs(t, q.Enqueue(context.Background(), queue.Job[int]{Payload: 2}), queue.ErrClosed)
	cancel()
	assert.ErrorIs(t, recv(t, stopErr, "Stop"), context.Canceled, "Stop returns when its ctx ends")
	shutdownCtx, cancelShutdown := context.WithCancel(context.Background())
	cancelShutdown()
	assert.ErrorIs(t, q.Shutdown(shutdownCtx), context.Canceled, "so does a later Shutdown")

	st.stallAdd.Store(false)
	close(st.addRelease)
	assert.NoError(t, recv(t, enqErr, "the stalled Enqueue"))
	recv(t, q.Done(), "Done")
	s := q.Stats()
	assert.Zero(t, ran.Load())
	// The accepted job is held, unrun: ready, or scheduled as due now
	// when the one worker, already waiting in Claim as Shutdown retired
	// it, was handed the job as Add stored it and put it back (an
	// interrupted job is deferred, not run).
	assert.Equal(t, 1, s.Depth+s.Store.Scheduled, "the accepted job waits in the store")
	assertAccounted(t, s)
}

// A Stop that begins while an Enqueue is inside Store.Add drains that job
// too: it runs before Stop returns.
func TestStopDrainsAnEnqueueStillInTheStore(t *testing.T) {
	q, st, ran, enqErr := enqueueIntoStalledAdd(t)
	stopErr := make(chan error, 1)
	go func() { stopErr <- q.Stop(context.Background()) }()
	waitStopping(t, q)
	st.stallAdd.Store(false)
	close(st.addRelease)
	assert.NoError(t, recv(t, enqErr, "the stalled Enqueue"))
	assert.NoError(t, recv(t, stopErr, "Stop"))
	assert.EqualValues(t, 1, ran.Load(), "the accepted job ran in the drain")
	assertAccounted(t, q.Stats())
}

// Cancelling Start's ctx stops the queue as Shutdown does, even after a
// Stop whose own ctx ended while a handler still ran.
func TestStartCtxStillShutsDownAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := queue.New(func(ctx context.Context, _ queue.Job[int]) error {
			<-ctx.Done() // a long job that honours cancellation
			return ctx.Err()
		}, queue.WithWorkers(1, 1))
		require.NoError(t, err)
		root, cancelRoot := context.WithCancel(context.Background())
		require.NoError(t, q.Start(root))
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Payload: 1}))
		queuetest.Settle()
		drain, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var stuck *queue.StuckError
		require.ErrorAs(t, q.Stop(drain), &stuck, "the handler is still running")
		assert.True(t, errors.Is(stuck, context.DeadlineExceeded))

		cancelRoot()
		synctest.Wait()
		select {
		case <-q.Done():
		default:
			t.Fatalf("Start's ctx was cancelled, but the queue is still %s", q.Stats().State)
		}
		s := q.Stats()
		assert.Equal(t, 1, s.Depth+s.Store.Scheduled, "the interrupted job is put back")
		assertAccounted(t, s)
	})
}

// assertAccounted checks Stats' identity: every accepted job is done,
// dead, cancelled, or still somewhere.
func assertAccounted(t *testing.T, s queue.Stats) {
	t.Helper()
	assert.Equal(t, s.Enqueued, s.Done+s.Dead+s.Cancelled+uint64(s.Depth+s.Store.Scheduled+s.Store.Waiting+s.Running),
		"Enqueued = Done + Dead + Cancelled + Ready + Scheduled + Waiting + Running: %+v", s)
}
