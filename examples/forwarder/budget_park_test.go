package main

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runParked starts b's loop in the bubble (it ends with the test) and
// lets it go idle for a second.
func runParked(t *testing.T, b *forwardBudget) {
	go b.run(t.Context(), nil)
	time.Sleep(time.Second)
	synctest.Wait()
	require.True(t, b.parked.Load(), "parked after an idle window")
}

// clients serves a client request a millisecond until the returned
// leave is called.
func clients(b *forwardBudget) (leave func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			b.served()
			time.Sleep(time.Millisecond)
		}
	})
	return func() { cancel(); wg.Wait() }
}

// An idle budget reads the scheduler's latency once, at its first
// window's end, and then parks: no ticks and no reads while nothing
// happens.
func TestForwardBudgetParksWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		s.set(1000, 0)
		b := newForwardBudget(time.Millisecond, s.read)
		runParked(t, b)
		assert.Equal(t, 1, s.count(), "one window in a second")
		assert.Equal(t, budgetState{limit: budgetFloor}, b.state(), "the metrics while parked")
		assert.Zero(t, b.allowed, "no allowance left for acquire's fast path")

		// Client requests keep it ticking; it parks at the end of the
		// first window after they stop.
		leave := clients(b)
		time.Sleep(10*budgetWindow + budgetWindow/2)
		assert.False(t, b.parked.Load())
		assert.Equal(t, 1+1+10, s.count(), "the park's sample dropped, then one a window")
		leave()
		time.Sleep(2 * budgetWindow)
		synctest.Wait()
		assert.True(t, b.parked.Load(), "parked again")
		reads := s.count()
		time.Sleep(time.Second)
		assert.Equal(t, reads, s.count())
	})
}

// A forward that comes to a parked budget wakes it, and goes through
// within the window that starts then.
func TestForwardBudgetWakesForAForward(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		runParked(t, b)
		start := time.Now()
		require.True(t, <-waiter(t.Context(), b))
		assert.LessOrEqual(t, time.Since(start), budgetWindow, "through within one window")
		assert.Equal(t, budgetState{limit: budgetFloor, started: 1}, b.state())

		// And the one after it, at its window's last tick: the forward
		// started in the last window keeps the budget ticking.
		start = time.Now()
		require.True(t, <-waiter(t.Context(), b))
		assert.Equal(t, budgetWindow, time.Since(start))
	})
}

// A client request wakes a parked budget. The wake-ups recorded while it
// was parked are not judged, however many waited; the windows after it
// are, and busy ones halve the limit as before.
func TestForwardBudgetWakesForAClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		s.set(1000, 0)
		b := newForwardBudget(time.Millisecond, s.read)
		b.limit = 16
		runParked(t, b)
		s.once(100_000, 50_000) // a second's wake-ups, half of them late
		leave := clients(b)
		defer leave()
		time.Sleep(2*budgetWindow + budgetWindow/2)
		assert.Equal(t, budgetState{limit: 16}, b.state(), "two quiet windows: the park's wake-ups dropped")
		s.set(1000, 500)
		time.Sleep(3 * budgetWindow)
		assert.Equal(t, budgetState{limit: 2, narrows: 3}, b.state(), "three busy windows: 16, 8, 4, 2")
	})
}

// The parked time counts as quiet windows toward the calm: a forwarder
// idle since its last load doubles at the first raise of its next
// backlog, as it does when it ticks through the idle spell
// (TestForwardBudgetIdleWindowsCountTowardCalm).
func TestForwardBudgetParkCountsTowardCalm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		s.set(1000, 0)
		b := newForwardBudget(time.Millisecond, s.read)
		b.limit = 4 // calm 0: as just after a busy window
		runParked(t, b)
		defer waiters(t, b, 100)() // more than the windows below let through
		time.Sleep((budgetRaiseAfter-1)*budgetWindow + budgetWindow/2)
		assert.Equal(t, 4, b.state().limit, "not raised yet")
		time.Sleep(budgetWindow)
		assert.Equal(t, 8, b.state().limit, "doubled at the first raise (by one had the park not counted)")
	})
}

// A span of few wake-ups open when the budget parks goes on through the
// parked windows, none recorded, and closes as idle at budgetMaxSpan
// windows, counting toward the calm with the rest of the park.
func TestForwardBudgetParkContinuesASpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s fakeSched
		b := newForwardBudget(time.Millisecond, s.read)
		b.limit = 8
		s.set(60, 2)
		b.served()
		b.adjust()
		b.resume(3*budgetWindow + budgetWindow/2)
		require.Equal(t, 4, b.span, "a window and three parked ones")
		b.served()
		b.adjust() // 120 wake-ups, 4 late, with a request: busy
		require.Equal(t, budgetState{limit: 4, narrows: 1}, b.state())
		assert.Zero(t, b.calm)

		b.adjust() // 60 wake-ups: a span opens
		b.resume(20 * budgetWindow)
		assert.Zero(t, b.span, "closed after nine parked windows")
		assert.Equal(t, 10+11, b.calm, "its ten windows and the eleven parked after it")
		b.resume(time.Hour)
		assert.Equal(t, budgetCalmAfter, b.calm, "capped")
		assert.Equal(t, budgetState{limit: 4, narrows: 1}, b.state(), "the limit kept")
	})
}
