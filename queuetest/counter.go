package queuetest

import (
	"sync"
	"testing"
	"time"
)

// Counter counts events (jobs done, runs, enqueues) and closes a channel
// when the count reaches a mark, so that a test against a real server
// waits for the event itself rather than polling for its effect. The zero
// value is ready to use; it is safe for concurrent use.
type Counter struct {
	mu    sync.Mutex
	n     int
	marks map[int]chan struct{}
}

// Add counts one event.
func (c *Counter) Add() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	if ch, ok := c.marks[c.n]; ok {
		close(ch)
		delete(c.marks, c.n)
	}
}

// Load returns the count.
func (c *Counter) Load() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Reached returns a channel that is closed once the count reaches n (at
// once if it has).
func (c *Counter) Reached(n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n >= n {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if c.marks == nil {
		c.marks = map[int]chan struct{}{}
	}
	ch, ok := c.marks[n]
	if !ok {
		ch = make(chan struct{})
		c.marks[n] = ch
	}
	return ch
}

// Await waits until ch is closed or receives, and fails the test if that
// takes longer than timeout: the channel says when, the timeout only
// guards against a hang. what names the awaited event in the failure.
func Await(tb testing.TB, ch <-chan struct{}, timeout time.Duration, what string) {
	tb.Helper()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
		tb.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}
