package queuetest

import (
	"sort"
	"sync"
	"time"

	"github.com/queuekit/queue"
)

// FakeClock is a queue.Clock whose time moves only when told to. It is
// for tests that cannot run in a testing/synctest bubble, such as tests of
// network stores; inside a bubble, prefer the bubble's own fake time. The
// zero value is not usable; call NewFakeClock. Safe for concurrent use.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
}

// NewFakeClock returns a clock reading start.
func NewFakeClock(start time.Time) *FakeClock { return &FakeClock{now: start} }

var _ queue.Clock = (*FakeClock)(nil)

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and fires, in deadline order, the
// timers that come due. The ticks are sent before Advance releases the
// clock's lock, so a Reset or Stop that returns after them has drained
// them, and one that returns before them kept its timer from firing.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	now := c.now
	var due []*fakeTimer
	keep := c.timers[:0]
	for _, t := range c.timers {
		if !t.at.After(now) {
			due = append(due, t)
		} else {
			keep = append(keep, t)
		}
	}
	clear(c.timers[len(keep):])
	c.timers = keep
	sort.Slice(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	for _, t := range due {
		select {
		case t.c <- now:
		default: // the previous tick was not received; like time.Timer, do not block
		}
	}
}

// NewTimer returns a timer that fires when the clock has advanced by d.
func (c *FakeClock) NewTimer(d time.Duration) queue.Timer {
	t := &fakeTimer{clock: c, c: make(chan time.Time, 1)}
	t.Reset(d)
	return t
}

// Timers returns the number of timers waiting to fire, so a test can wait
// until the code under test has armed one before advancing.
func (c *FakeClock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

type fakeTimer struct {
	clock *FakeClock
	c     chan time.Time
	at    time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) bool {
	active := t.Stop()
	c := t.clock
	c.mu.Lock()
	t.at = c.now.Add(d)
	if d <= 0 {
		now := c.now
		c.mu.Unlock()
		select {
		case t.c <- now:
		default:
		}
		return active
	}
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	return active
}

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			// Like time.Timer since Go 1.23: no stale tick after Stop.
			select {
			case <-t.c:
			default:
			}
			return true
		}
	}
	select {
	case <-t.c:
	default:
	}
	return false
}
