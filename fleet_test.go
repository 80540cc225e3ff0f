package queue_test

import (
	"context"
	"errors"
	"sync"
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

// hub is a storekit.TargetStore shared by the queues of a test, as a durable
// store's table is by processes: it keeps the entries and announces each
// write to every queue's WatchTargets, unless mute.
type hub struct {
	mu    sync.Mutex
	m     map[[2]string]storekit.TargetState
	fns   []func(storekit.TargetState)
	mute  bool
	saves int
	gate  chan struct{} // when set, each save waits for a receive from it
	// loadGate, when set, holds each load after it read the entries
	// until it is closed: a load whose result predates later writes.
	loadGate chan struct{}
}

func newHub() *hub { return &hub{m: map[[2]string]storekit.TargetState{}} }

// fleetStore is an in-memory job store with the hub's target state.
type fleetStore struct {
	*memstore.Store[int]
	h *hub
}

func (s fleetStore) LoadTargets(context.Context) ([]storekit.TargetState, error) {
	s.h.mu.Lock()
	out := make([]storekit.TargetState, 0, len(s.h.m))
	for _, st := range s.h.m {
		out = append(out, st)
	}
	gate := s.h.loadGate
	s.h.mu.Unlock()
	if gate != nil {
		<-gate
	}
	return out, nil
}

func (s fleetStore) SaveTargets(_ context.Context, states []storekit.TargetState) error {
	s.h.mu.Lock()
	gate := s.h.gate
	s.h.mu.Unlock()
	if gate != nil {
		<-gate
	}
	s.h.mu.Lock()
	s.h.saves++
	for _, st := range states {
		if st.Empty() {
			delete(s.h.m, [2]string{st.Target, st.Key})
		} else {
			s.h.m[[2]string{st.Target, st.Key}] = st
		}
	}
	fns, mute := s.h.fns, s.h.mute
	s.h.mu.Unlock()
	for _, fn := range fns {
		for _, st := range states {
			if !mute {
				fn(st)
			}
		}
	}
	return nil
}

func (s fleetStore) WatchTargets(fn func(storekit.TargetState)) {
	s.h.mu.Lock()
	s.h.fns = append(s.h.fns, fn)
	s.h.mu.Unlock()
}

var _ storekit.TargetStore = fleetStore{}

// fleetQueue starts a queue on the hub, stopped when the test ends.
func fleetQueue(t *testing.T, h *hub, opts ...queue.Option) *queue.Queue[int] {
	t.Helper()
	q, err := queue.NewWithStore[int](fleetStore{memstore.New[int](), h}, nop, opts...)
	require.NoError(t, err)
	require.NoError(t, q.Start(context.Background()))
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	return q
}

func TestFleetTargetHealthShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub()
		a, b := fleetQueue(t, h), fleetQueue(t, h)
		cands := []string{"t", "u"}

		require.NoError(t, a.Suspend("t", time.Hour))
		queuetest.Settle()
		assert.Equal(t, []string{"u"}, b.Fanout("k", cands), "suspended by a, skipped by b")
		assert.Equal(t, time.Now().Add(time.Hour), targetStatus(t, b, "t").SuspendedUntil)

		require.NoError(t, b.Resume("t"))
		queuetest.Settle()
		assert.ElementsMatch(t, cands, a.Fanout("k", cands), "resumed by b, for a too")

		require.NoError(t, a.Disable("u", errors.New("404 Not Found")))
		queuetest.Settle()
		st := targetStatus(t, b, "u")
		assert.True(t, st.Disabled)
		assert.Equal(t, "404 Not Found", st.Reason)
		assert.Equal(t, []string{"t"}, b.Fanout("k", cands))

		// Cadence: a next-due time set by a holds for b.
		a.SetNextDue("t", "k", time.Now().Add(time.Minute))
		queuetest.Settle()
		assert.False(t, b.Due("t", "k"))
		assert.True(t, b.Due("t", "other"))
		queuetest.Advance(time.Minute)
		assert.True(t, b.Due("t", "k"), "due again when the time comes")
	})
}

func TestFleetBreakerShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub()
		fail := errors.New("boom")
		var a *queue.Queue[int]
		q, err := queue.NewWithStore[int](fleetStore{memstore.New[int](), h}, func(context.Context, queue.Job[int]) error { return fail },
			queue.WithCircuitBreaker(1, time.Minute, 1), queue.WithRetry(1, time.Second, time.Second))
		require.NoError(t, err)
		a = q
		require.NoError(t, a.Start(context.Background()))
		t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
		b := fleetQueue(t, h, queue.WithCircuitBreaker(1, time.Minute, 1))

		require.NoError(t, a.Enqueue(context.Background(), queue.Job[int]{Target: "t"}))
		queuetest.Settle()
		assert.Equal(t, "open", targetStatus(t, b, "t").Breaker, "opened by a's failure")
		assert.Empty(t, b.Fanout("k", []string{"t"}))
		queuetest.Advance(time.Minute)
		assert.Equal(t, []string{"t"}, b.Fanout("k", []string{"t"}), "cool-down over: probes may go")
		require.NoError(t, b.Resume("t"))
		queuetest.Settle()
		assert.Equal(t, "closed", targetStatus(t, a, "t").Breaker)
	})
}

// TestFleetReloadBackstop: with announcements lost, a queue sees another's
// change at its next reload, within a second.
func TestFleetReloadBackstop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub()
		a, b := fleetQueue(t, h), fleetQueue(t, h)
		h.mu.Lock()
		h.mute = true
		h.mu.Unlock()
		require.NoError(t, a.Disable("t", errors.New("gone")))
		a.SetNextDue("u", "k", time.Now().Add(time.Hour))
		queuetest.Settle()
		assert.True(t, targetStatus(t, a, "t").Disabled)
		_, known := b.Target("t")
		assert.False(t, known, "not announced")
		queuetest.Advance(time.Second)
		assert.True(t, targetStatus(t, b, "t").Disabled, "seen at the reload")
		assert.False(t, b.Due("u", "k"))
		require.NoError(t, a.Resume("t"))
		queuetest.Advance(time.Second)
		assert.False(t, targetStatus(t, b, "t").Disabled, "a resume b missed is seen at the reload too")
	})
}

// TestFleetReloadKeepsNewerAnnouncement: a reload whose load read the
// state before a write that was announced while it ran does not undo the
// announced change (it did, for up to a second: a target an operator
// disabled with queuectl ran jobs again until the next reload).
func TestFleetReloadKeepsNewerAnnouncement(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub()
		q := fleetQueue(t, h)
		gate := make(chan struct{})
		h.mu.Lock()
		h.loadGate = gate
		h.mu.Unlock()
		queuetest.Advance(time.Second) // the reload reads nothing, and waits
		// Another process (queuectl) disables t and suspends u, due k of u.
		operator := fleetStore{memstore.New[int](), h}
		require.NoError(t, operator.SaveTargets(context.Background(), []storekit.TargetState{
			{Target: "t", Disabled: true, Reason: "down"},
			{Target: "u", SuspendedUntil: time.Now().Add(time.Hour)},
			{Target: "u", Key: "k", NextDue: time.Now().Add(time.Hour)},
		}))
		queuetest.Settle()
		assert.True(t, targetStatus(t, q, "t").Disabled, "announced")
		h.mu.Lock()
		h.loadGate = nil
		h.mu.Unlock()
		close(gate) // the reload applies what it read before the write
		queuetest.Settle()
		assert.True(t, targetStatus(t, q, "t").Disabled, "the older load does not enable t again")
		assert.False(t, targetStatus(t, q, "u").SuspendedUntil.IsZero(), "nor end u's suspension")
		assert.False(t, q.Due("u", "k"), "nor u's next-due time")
		queuetest.Advance(time.Second) // the next reload reads the write
		assert.True(t, targetStatus(t, q, "t").Disabled)
		assert.False(t, q.Due("u", "k"))
		// And it forgets the announcements: a later resume no process
		// heard of is seen at the next reload.
		h.mu.Lock()
		h.mute = true
		h.mu.Unlock()
		require.NoError(t, operator.SaveTargets(context.Background(), []storekit.TargetState{{Target: "t"}}))
		queuetest.Advance(time.Second)
		assert.False(t, targetStatus(t, q, "t").Disabled)
	})
}

// TestFleetRestartKeepsHealth: a queue started on a store that holds a
// disabled target has it disabled before its first job runs, and cancels
// that job.
func TestFleetRestartKeepsHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub()
		a := fleetQueue(t, h)
		require.NoError(t, a.Disable("t", errors.New("gone")))
		require.NoError(t, a.Stop(context.Background()))

		ran := make(chan struct{}, 1)
		q, err := queue.NewWithStore[int](fleetStore{memstore.New[int](), h}, func(context.Context, queue.Job[int]) error {
			ran <- struct{}{}
			return nil
		})
		require.NoError(t, err)
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "t"}))
		require.NoError(t, q.Start(context.Background()))
		t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
		queuetest.Settle()
		st := targetStatus(t, q, "t")
		assert.True(t, st.Disabled)
		assert.Equal(t, "gone", st.Reason)
		assert.Len(t, ran, 0, "the job of a disabled target does not run")
		assert.EqualValues(t, 1, q.Stats().Cancelled)
	})
}

// TestFleetWritesBatched: changes made while a write is in flight go in
// one later write, and a queue without changes writes nothing.
func TestFleetWritesBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHub()
		a := fleetQueue(t, h)
		queuetest.Advance(10 * time.Second)
		h.mu.Lock()
		assert.Zero(t, h.saves, "nothing changed, nothing written")
		h.mu.Unlock()
		gate := make(chan struct{})
		h.mu.Lock()
		h.gate = gate
		h.mu.Unlock()
		a.SetNextDue("t", "k", time.Now().Add(time.Second))
		queuetest.Settle() // the first write waits at the gate
		for i := 1; i < 100; i++ {
			a.SetNextDue("t", "k", time.Now().Add(time.Duration(i+1)*time.Second))
		}
		gate <- struct{}{}
		gate <- struct{}{}
		queuetest.Settle()
		h.mu.Lock()
		defer h.mu.Unlock()
		assert.Equal(t, 2, h.saves, "the first write, then one for the 99 changes made meanwhile")
		assert.Equal(t, time.Now().Add(100*time.Second), h.m[[2]string{"t", "k"}].NextDue, "the last write wins")
	})
}
