package queuetest_test

import (
	"fmt"
	"time"

	"github.com/queuekit/queue/queuetest"
)

// A FakeClock's timers fire only when the test advances it, in deadline
// order.
func ExampleFakeClock() {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := queuetest.NewFakeClock(start)
	t := clk.NewTimer(time.Minute)
	fmt.Println("armed timers:", clk.Timers())

	clk.Advance(59 * time.Second)
	select {
	case <-t.C():
		fmt.Println("fired early")
	default:
		fmt.Println("not yet at", clk.Now().Sub(start))
	}

	clk.Advance(time.Second)
	at := <-t.C()
	fmt.Println("fired at", at.Sub(start))
	// Output:
	// armed timers: 1
	// not yet at 59s
	// fired at 1m0s
}

// A Counter closes a channel when its count reaches a mark, so a test
// waits for the events themselves (with Await and a timeout against a
// hang) instead of sleeping and looking.
func ExampleCounter() {
	var done queuetest.Counter
	third := done.Reached(3)
	for range 3 {
		go done.Add() // a handler counting the jobs it finished
	}
	<-third // in a test: queuetest.Await(t, third, time.Minute, "3 jobs done")
	fmt.Println("done:", done.Load())
	// Output:
	// done: 3
}
