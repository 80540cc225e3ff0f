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
// it holds, or once the one a test queued (once), and is counted.
type fakeSched struct {
	mu          sync.Mutex
	total, over uint64
	next        *[2]uint64 // once
	reads       int
}

func (s *fakeSched) set(total, over uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total, s.over = total, over
}

// once has the next read return total and over, and the ones after it
// what set gave: the wake-ups since the last read, however long ago.
func (s *fakeSched) once(total, over uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = &[2]uint64{total, over}
}

func (s *fakeSched) read(time.Duration) (uint64, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	if n := s.next; n != nil {
		s.next = nil
		return n[0], n[1]
	}
	return s.total, s.over
}

func (s *fakeSched) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// waiter starts an acquire and reports through the returned channel
// whether it was let through.
func waiter(ctx context.Context, b *forwardBudget) <-chan bool {
	ch := make(chan bool, 1)
	go func() { ch <- b.acquire(ctx) }()
	return ch
}

// window ends one window in which a client request was served and lets
// the next one's forwards through: the budget's loop, by hand.
func window(b *forwardBudget) {
	b.served()
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

// waiters starts n acquires that outlast the test's windows; they leave
// when the returned cancel is called.
func waiters(t *testing.T, b *forwardBudget, n int) context.CancelFunc {
	ctx, cancel := context.WithCancel(t.Context())
	for range n {
		waiter(ctx, b)
	}
	synctest.Wait()
	return cancel
}

// windows runs n windows and returns the limit after each.
func windows(b *forwardBudget, n int) []int {
	var limits []int
	for range n {
		window(b)
		limits = append(limits, b.state().limit)
	}
	return limits
}

// Once the scheduler has been quiet for budgetCalmAfter windows (the
// load has gone), each raise doubles the limit: a backlog drains many
// forwards at a time within a second, not one more every tenth of one.
func TestForwardBudgetDoublesOnceCalm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		s.set(1000, 500)
		window(b) // busy: the calm starts after it
		s.set(1000, 0)
		defer waiters(t, b, 5000)()
		var at []int
		for range 8 {
			at = append(at, windows(b, budgetRaiseAfter)[budgetRaiseAfter-1])
		}
		assert.Equal(t, []int{2, 3, 6, 12, 24, 48, 96, 192}, at,
			"the limit every %d windows: by one within %d windows of the busy one, then doubled", budgetRaiseAfter, budgetCalmAfter)
		assert.Zero(t, b.state().narrows)
	})
}

// Quiet windows in which no forward waited count toward the calm, not
// toward a raise: a forwarder idle since its last load doubles at the
// first raise of its next backlog.
func TestForwardBudgetIdleWindowsCountTowardCalm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		b.limit = 4
		s.set(1000, 500)
		window(b)
		s.set(1000, 0)
		windows(b, budgetCalmAfter) // nothing waits
		assert.Equal(t, 2, b.state().limit, "not raised with no forward waiting")
		defer waiters(t, b, 100)()
		limits := windows(b, budgetRaiseAfter)
		assert.Equal(t, 2, limits[budgetRaiseAfter-2])
		assert.Equal(t, 4, limits[budgetRaiseAfter-1], "doubled at the first raise")
	})
}

// A busy window halves a limit opened by doubling as it halves any other,
// and puts the budget back to raising by one: under load it closes in as
// many busy windows as the limit has doublings, and stays near its floor.
func TestForwardBudgetClosesAgainOnLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		defer waiters(t, b, 6000)()
		s.set(1000, 0)
		windows(b, 7*budgetRaiseAfter)
		require.Equal(t, 96, b.state().limit, "opened by doubling")

		s.set(1000, 500) // the load is back
		assert.Equal(t, []int{48, 24, 12, 6, 3, 1, 1}, windows(b, 7))
		assert.Equal(t, uint64(6), b.state().narrows)

		// Load that leaves the scheduler quiet for less than
		// budgetCalmAfter windows at a time: raises by one only, each
		// undone by the next busy windows.
		for i := range 20 {
			s.set(1000, 0)
			limits := windows(b, budgetCalmAfter-1)
			require.Equal(t, budgetFloor+2, limits[len(limits)-1], "round %d: two raises by one", i)
			s.set(1000, 500)
			window(b)
			require.Equal(t, budgetFloor, b.state().limit, "round %d: 3 halved", i)
		}

		// Windows of few wake-ups, judged together, close it as well: a
		// busy span halves the limit as a busy window does.
		s.set(1000, 0)
		windows(b, 6*budgetRaiseAfter)
		require.Equal(t, 48, b.state().limit, "2, 3, then doubled: 6, 12, 24, 48")
		s.set(30, 2) // 120 wake-ups in four windows, 1.7 % over
		assert.Equal(t, []int{48, 48, 48, 24, 24, 24, 24, 12}, windows(b, 8))
	})
}

// With no client request served, a busy scheduler is the forwards' own
// doing (a forwarder draining its queue after the load has gone): the
// budget opens as after quiet windows, and closes again at the first busy
// window with a request.
func TestForwardBudgetIgnoresLatencyWithoutClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		defer waiters(t, b, 3000)()
		s.set(1000, 500)
		window(b)
		var at []int
		for range 6 {
			for range budgetRaiseAfter {
				b.adjust() // no request: not busy
				for i := range budgetTicks {
					b.tick(i)
				}
			}
			at = append(at, b.state().limit)
		}
		assert.Equal(t, []int{2, 3, 6, 12, 24, 48}, at)
		assert.Zero(t, b.state().narrows)

		// A request in a span of few wake-ups judged together counts.
		s.set(40, 1)
		b.adjust()
		b.served()
		b.adjust()
		require.Equal(t, 48, b.state().limit, "80 wake-ups: not judged yet")
		b.adjust()
		assert.Equal(t, budgetState{limit: 24, waiting: b.state().waiting, narrows: 1}, b.state(),
			"a request in the span's second window: busy")
		s.set(1000, 500)
		b.adjust()
		assert.Equal(t, 24, b.state().limit, "no request since: not busy")
		b.served()
		b.adjust()
		assert.Equal(t, 12, b.state().limit)
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

// A forwarder whose scheduler is busy while it answers clients answers
// every announce and holds its forwards to the budget's floor; the rest
// run once the clients have gone, though the scheduler stays busy (with
// its own forwards), and at once when it is quiet.
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
		const peers = 100
		for i := range peers {
			w := httptest.NewRecorder()
			f.ServeAnnounce(w, httptest.NewRequest("GET", "/announce?"+clientQuery(1, i, 7000+i, nil), nil))
			require.Contains(t, w.Body.String(), "8:interval", "answered at once")
		}
		// The clients stay: a scrape a millisecond.
		clients, leave := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			for clients.Err() == nil {
				f.ServeScrape(httptest.NewRecorder(), httptest.NewRequest("GET", "/scrape", nil))
				time.Sleep(time.Millisecond)
			}
		})
		time.Sleep(100 * time.Millisecond) // fake time: 10 busy windows
		synctest.Wait()
		n := up.n.Load()
		assert.True(t, n >= 5 && n <= 11, "%d forwards in 10 busy windows: the floor's one a window", n)
		assert.Equal(t, 2, f.budget.state().waiting, "both workers wait for the budget")
		st := f.q.Stats()
		assert.Equal(t, 2, st.AtGate, "at the queue's claim gate")
		assert.Zero(t, st.Running, "holding no forward")
		assert.Positive(t, st.Depth, "the forwards wait in the queue")

		leave()
		wg.Wait()
		time.Sleep(500 * time.Millisecond) // 50 windows, busy but without clients
		synctest.Wait()
		assert.Equal(t, int64(peers), up.n.Load(), "every forward ran: at the floor, at most 61 would have")
		assert.Zero(t, f.budget.state().narrows)
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
