package queue

import (
	"time"

	"github.com/queuekit/queue/internal/core"
)

// Clock is the queue's source of time: Now and NewTimer. Tests that can
// run inside a testing/synctest bubble need no Clock: the bubble fakes time
// for the standard library. A Clock serves tests that cannot (network
// stores) and hosts that already have a fake clock; queuetest.FakeClock is
// one.
type Clock = core.Clock

// Timer is the part of *time.Timer the queue uses: C, Reset and Stop.
type Timer = core.Timer

// SystemClock is the Clock used when none is given: it calls package time.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a timer backed by time.NewTimer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time        { return t.t.C }
func (t sysTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t sysTimer) Stop() bool                 { return t.t.Stop() }
