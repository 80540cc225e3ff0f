package queuetest

import (
	"testing/synctest"
	"time"
)

// Advance lets fake time pass inside a testing/synctest bubble: it sleeps
// d of the bubble's time and then waits until every goroutine in the
// bubble is blocked, so the effects of that time (due jobs run, workers
// scaled, suspensions expired) are visible when it returns. Call it only
// from inside synctest.Test.
func Advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// Settle waits, inside a testing/synctest bubble, until every goroutine
// in the bubble is blocked: the queue has done all it can without time
// passing.
func Settle() { synctest.Wait() }
