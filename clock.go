package queue

import (
	"github.com/queuekit/queue/queuetype"
)

// Clock is the queue's source of time: Now and NewTimer. Tests that can
// run inside a testing/synctest bubble need no Clock: the bubble fakes time
// for the standard library. A Clock serves tests that cannot (network
// stores) and hosts that already have a fake clock; queuetest.FakeClock is
// one. Without WithClock the queue calls package time.
type Clock = queuetype.Clock

// Timer is the part of *time.Timer the queue uses: C, Reset and Stop.
type Timer = queuetype.Timer

// systemClock is the Clock used when none is given: it calls package time.
type systemClock = queuetype.SystemClock
