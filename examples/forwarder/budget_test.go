package main

import (
	"context"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/queuekit/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSched is a schedSample a test sets: each read returns the window
// it holds.
type fakeSched struct {
	mu          sync.Mutex
	total, over uint64
}

func (s *fakeSched) set(total, over uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total, s.over = total, over
}

func (s *fakeSched) read(time.Duration) (uint64, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total, s.over
}

// waiter starts an acquire and reports through the returned channel
// whether it was let through.
func waiter(ctx context.Context, b *forwardBudget) <-chan bool {
	ch := make(chan bool, 1)
	go func() { ch <- b.acquire(ctx) }()
	return ch
}

// window ends one window and lets the next one's forwards through: the
// budget's loop, by hand.
func window(b *forwardBudget) {
	b.adjust()
	for i := range budgetTicks {
		b.tick(i)
	}
}

// through counts the waiters let through, waiting for the bubble to
// settle first.
func through(chs []<-chan bool) int {
	synctest.Wait()
	n := 0
	for _, ch := range chs {
		select {
		case ok := <-ch:
			if ok {
				n++
			}
		default:
		}
	}
	return n
}

func TestForwardBudgetRaisesAfterQuietWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		b.raise = 2
		var chs []<-chan bool
		for range 10 {
			chs = append(chs, waiter(t.Context(), b))
		}
		assert.Zero(t, through(chs), "nothing before the first window's ticks")
		assert.Equal(t, budgetState{limit: budgetFloor, waiting: 10}, b.state())
		window(b) // one quiet window: not raised yet, the floor's one through
		assert.Equal(t, 1, through(chs))
		window(b) // two: two forwards per window
		assert.Equal(t, 2, through(chs))
		window(b)
		assert.Equal(t, 2, through(chs), "the limit holds between raises")
		window(b)
		assert.Equal(t, 3, through(chs))
		assert.Equal(t, budgetState{limit: 3, started: 3, waiting: 2}, b.state())
	})
}

func TestForwardBudgetSpreadsAWindowsForwards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		b.limit = 20
		var chs []<-chan bool
		for range 30 {
			chs = append(chs, waiter(t.Context(), b))
		}
		synctest.Wait()
		b.adjust() // the window starts: nothing let through yet
		assert.Zero(t, through(chs))
		for i := range budgetTicks {
			b.tick(i)
			assert.Equal(t, 2, through(chs), "tick %d lets a tenth through", i)
		}
		assert.Equal(t, budgetState{limit: 20, started: 20, waiting: 10}, b.state())
	})
}

func TestForwardBudgetHalvesInBusyWindows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		b.limit = 16
		s.set(1000, 11) // p99 above the budget
		window(b)
		assert.Equal(t, budgetState{limit: 8, narrows: 1}, b.state())
		s.set(1000, 10) // at 1 %: not above
		window(b)
		assert.Equal(t, 8, b.state().limit)
		s.set(99, 99) // too few wake-ups to judge: idle
		window(b)
		assert.Equal(t, 8, b.state().limit)

		s.set(1000, 500)
		for range 4 {
			window(b)
		}
		assert.Equal(t, budgetState{limit: budgetFloor, narrows: 4}, b.state(), "8, 4, 2, 1: never below the floor")
		window(b) // at the floor already: not counted again
		assert.Equal(t, uint64(4), b.state().narrows)

		// However long the scheduler stays busy, the floor's forward a
		// window goes through.
		var late []<-chan bool
		for range 5 {
			late = append(late, waiter(t.Context(), b))
		}
		require.Equal(t, 1, through(late), "the last window's unused allowance")
		for i := range 4 {
			window(b)
			require.Equal(t, 1, through(late), "busy window %d lets the floor's one forward through", i)
		}
		assert.Equal(t, budgetState{limit: budgetFloor, started: 1, narrows: 4}, b.state())
	})
}

// Windows of too few wake-ups to judge are judged together: a lean
// announce path wakes few goroutines, and its windows are not idle.
func TestForwardBudgetJudgesFewWakeUpsTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		b.limit = 16
		s.set(30, 1) // 3 % of the wake-ups waited longer than the budget
		for i := range 3 {
			window(b)
			require.Equal(t, 16, b.state().limit, "window %d: %d wake-ups so far, not judged", i, 30*(i+1))
		}
		window(b) // 120 wake-ups, 4 over: busy
		assert.Equal(t, budgetState{limit: 8, narrows: 1}, b.state())

		// Quiet spans count their windows toward a raise: with a forward
		// waiting, ten quiet windows raise the limit, however they were
		// judged.
		ctx, cancel := context.WithCancel(t.Context())
		for range 200 { // more than the windows below let through
			waiter(ctx, b)
		}
		synctest.Wait()
		s.set(30, 0)
		for range 8 {
			window(b)
		}
		assert.Equal(t, 8, b.state().limit, "two quiet spans of four windows: not raised yet")
		for range 4 {
			window(b)
		}
		assert.Equal(t, 9, b.state().limit, "a third: twelve quiet windows")
		cancel()
		synctest.Wait()

		// A span that never reaches budgetMinSamples is judged after
		// budgetMaxSpan windows, as idle; a window with none at once.
		s.set(1, 1)
		for range budgetMaxSpan {
			window(b)
		}
		assert.Equal(t, 9, b.state().limit, "idle, and no forward waiting: unchanged")
		assert.Zero(t, b.span, "judged")
		s.set(0, 0)
		window(b)
		assert.Zero(t, b.span)
	})
}

func TestForwardBudgetWaiterLeavesWhenCtxEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		b.raise = 1
		ctx, cancel := context.WithCancel(t.Context())
		gone := waiter(ctx, b)
		synctest.Wait()
		stays := waiter(t.Context(), b)
		synctest.Wait()
		cancel()
		synctest.Wait()
		require.False(t, <-gone)
		assert.Equal(t, budgetState{limit: budgetFloor, waiting: 1}, b.state())
		window(b)
		synctest.Wait()
		require.True(t, <-stays)
		assert.Equal(t, budgetState{limit: budgetFloor + 1, started: 1}, b.state())
	})
}

func TestForwardBudgetGateReturnsCtxErr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		ctx, cancel := context.WithCancel(t.Context())
		got := make(chan error, 1)
		go func() { got <- b.gate(ctx) }()
		synctest.Wait()
		assert.Equal(t, budgetState{limit: budgetFloor, waiting: 1}, b.state(), "the gate waits for the budget")
		cancel() // the worker retires, or the queue stops
		assert.ErrorIs(t, <-got, context.Canceled)
		assert.Equal(t, budgetState{limit: budgetFloor}, b.state())
		go func() { got <- b.gate(t.Context()) }()
		synctest.Wait()
		b.tick(budgetTicks - 1)
		assert.NoError(t, <-got, "let through")
	})
}

// countingAnnouncer answers every announce with an empty reply and counts
// them.
type countingAnnouncer struct{ n atomic.Int64 }

func (c *countingAnnouncer) announce(context.Context, *Announce, Event) (*Reply, error) {
	c.n.Add(1)
	return &Reply{Interval: time.Hour}, nil
}

// A forwarder whose scheduler is busy answers every announce and holds
// its forwards to the budget's floor; the rest run once the scheduler is
// quiet again.
func TestForwarderHoldsForwardsWhileSchedulerBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		s.set(1000, 500)
		up := &countingAnnouncer{}
		f, err := NewForwarder(Options{Upstreams: []*Upstream{{Name: "up", client: up}}, schedSample: s.read},
			queue.WithWorkers(2, 2))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		require.NoError(t, f.Start(ctx))
		const peers = 40
		for i := range peers {
			w := httptest.NewRecorder()
			f.ServeAnnounce(w, httptest.NewRequest("GET", "/announce?"+clientQuery(1, i, 7000+i, nil), nil))
			require.Contains(t, w.Body.String(), "8:interval", "answered at once")
		}
		time.Sleep(100 * time.Millisecond) // fake time: 10 busy windows
		synctest.Wait()
		n := up.n.Load()
		assert.True(t, n >= 5 && n <= 11, "%d forwards in 10 busy windows: the floor's one a window", n)
		assert.Equal(t, 2, f.budget.state().waiting, "both workers wait for the budget")
		st := f.q.Stats()
		assert.Equal(t, 2, st.AtGate, "at the queue's claim gate")
		assert.Zero(t, st.Running, "holding no forward")
		assert.Positive(t, st.Depth, "the forwards wait in the queue")

		s.set(1000, 0)
		time.Sleep(2 * time.Second) // quiet: 200 windows, the limit rising by one every 10
		synctest.Wait()
		assert.Equal(t, int64(peers), up.n.Load(), "every forward ran")
		require.NoError(t, f.Shutdown(ctx))
	})
}

func TestRuntimeSchedSampleCountsWakeUps(t *testing.T) {
	read := newRuntimeSchedSample()
	read(time.Millisecond) // everything so far
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(runtime.Gosched)
	}
	wg.Wait()
	total, over := read(time.Hour)
	assert.Positive(t, total, "goroutines ran since the last read")
	assert.Zero(t, over, "none waited an hour")
}
