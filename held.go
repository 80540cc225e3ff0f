package queue

import (
	"context"
	"sync"

	"github.com/queuekit/queue/storekit"
)

// Held jobs: a claimed job whose target is suspended, or whose breaker is
// open, goes back to the store until the end of it (holdJob). On a
// HoldStore it goes back held, and when the target may run again before
// that end (a Resume or Enable, here or in any process of the queue) the
// queue asks the store to make the target's held jobs due now. The store
// call runs on a goroutine of its own: Resume does not wait for a round
// trip, and a store's announcement (fleet.go) must not block.

// heldRelease runs the store's ReleaseHeld calls and lets the stop wait
// for them before the store closes.
type heldRelease struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// releaseHeld makes the jobs held for target due now, in the background;
// a failure is logged (the jobs then run at the end of their hold).
func (q *Queue[T]) releaseHeld(target string) {
	hs, ok := q.store.(storekit.HoldStore[T])
	if !ok || target == "" {
		return
	}
	r := &q.held
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), targetSyncTimeout)
		defer cancel()
		n, err := hs.ReleaseHeld(ctx, target)
		switch {
		case err != nil:
			q.log.Warn("queue: releasing the jobs held for a resumed target failed; they run when their hold ends", "target", target, "err", err)
		case n > 0:
			q.log.Info("held jobs released", "target", target, "jobs", n)
		}
	}()
}

// stop waits for the releases under way and starts no more.
func (r *heldRelease) stop() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
}
