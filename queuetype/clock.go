package queuetype

import "time"

// Clock is the queue's source of time. Tests that can run inside a
// testing/synctest bubble need no Clock: the bubble fakes time for the
// standard library. A Clock serves tests that cannot (network stores) and
// hosts that already have a fake clock; queuetest.FakeClock is one.
type Clock interface {
	// Now returns the current time. The queue reads it for due times,
	// backoff, suspensions and the times in events and stats.
	Now() time.Time
	// NewTimer returns a started timer that fires once, after d.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer the queue uses.
type Timer interface {
	// C returns the channel on which the timer delivers the time it
	// fired, as time.Timer's C field does.
	C() <-chan time.Time
	// Reset changes the timer to fire after d. It reports whether the
	// timer was active.
	Reset(d time.Duration) bool
	// Stop prevents the timer from firing. It reports whether the timer
	// was active.
	Stop() bool
}

// SystemClock is the Clock used when none is given: it calls package
// time. It is exported for the packages under internal/ (the durable
// stores' defaults); the queue's users never need it, since a nil Clock
// means the system clock.
type SystemClock struct{}

type sysTimer struct{ t *time.Timer }

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a timer backed by time.NewTimer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

func (t sysTimer) C() <-chan time.Time { return t.t.C }

func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }

func (t sysTimer) Stop() bool { return t.t.Stop() }
