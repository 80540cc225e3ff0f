// Package jobkinds is a catalog of deterministic job behaviours for this
// repository's own crash, pressure and soak tests: a handler whose runs
// take a set time and end a set way, as a function of the attempt only,
// so that a run replays the same way every time. It is internal: a
// program tests its own handlers, and a store author runs the contract in
// package storetest.
package jobkinds

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/queuekit/queue"
)

// Kind is a deterministic job behaviour: how long a run takes and how it
// ends, as a function of the attempt only.
type Kind struct {
	// Duration is how long each run takes; it returns early with the
	// context's error if the job's context ends first.
	Duration time.Duration
	// FailAttempts makes attempts 1..FailAttempts fail with a retryable
	// error; later attempts end with Outcome.
	FailAttempts int
	// Outcome is how a run that does not fail ends.
	Outcome Outcome
	// RetryIn is the delay of OutcomeRetryAfter.
	RetryIn time.Duration
}

// Outcome is how a Kind's run ends.
type Outcome int

// The outcomes a Kind can have.
const (
	OutcomeSucceed    Outcome = iota // return nil
	OutcomePermanent                 // return queue.Permanent: dead-lettered at once
	OutcomeFail                      // return a retryable error on every attempt: dead after max attempts
	OutcomeRetryAfter                // return queue.RetryAfter(RetryIn) on the first run, then succeed
	OutcomePanic                     // panic: recovered by the queue, counted as a failure
)

// Catalog maps kind names to behaviours.
type Catalog map[string]Kind

// DefaultCatalog returns a catalog covering every outcome: "noop", "quick"
// (1 ms), "slow" (1 s), "flaky" (fails twice, then succeeds), "fatal"
// (permanent error), "failing" (always fails), "retry-in" (asks to be
// retried in 1 s, once) and "panic".
func DefaultCatalog() Catalog {
	return Catalog{
		"noop":     {},
		"quick":    {Duration: time.Millisecond},
		"slow":     {Duration: time.Second},
		"flaky":    {Duration: time.Millisecond, FailAttempts: 2},
		"fatal":    {Outcome: OutcomePermanent},
		"failing":  {Outcome: OutcomeFail},
		"retry-in": {Outcome: OutcomeRetryAfter, RetryIn: time.Second},
		"panic":    {Outcome: OutcomePanic},
	}
}

// ErrFailed is the retryable error a Kind's failing runs return.
var ErrFailed = fmt.Errorf("jobkinds: kind failed (retryable)")

// Handler returns a handler that runs each job as the Kind kindOf names.
// An unknown kind is a permanent error naming it. The handler is safe for
// concurrent use. A RetryAfter kind tells its first run from its rerun by
// the job IDs it has seen.
func Handler[T any](c Catalog, kindOf func(T) string) queue.Handler[T] {
	var seen idSet
	return func(ctx context.Context, j queue.Job[T]) error {
		name := kindOf(j.Payload)
		k, ok := c[name]
		if !ok {
			return queue.Permanent(fmt.Errorf("jobkinds: unknown kind %q", name))
		}
		if k.Duration > 0 {
			t := time.NewTimer(k.Duration)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		if j.Attempt <= k.FailAttempts {
			return fmt.Errorf("attempt %d of kind %q: %w", j.Attempt, name, ErrFailed)
		}
		switch k.Outcome {
		case OutcomePermanent:
			return queue.Permanent(fmt.Errorf("kind %q fails for good", name))
		case OutcomeFail:
			return fmt.Errorf("kind %q: %w", name, ErrFailed)
		case OutcomeRetryAfter:
			if seen.add(j.ID) {
				return queue.RetryAfter(k.RetryIn, fmt.Errorf("kind %q asks to come back", name))
			}
		case OutcomePanic:
			panic(fmt.Sprintf("kind %q panics", name))
		}
		return nil
	}
}

// idSet is a concurrency-safe set of job IDs. The zero value is empty.
type idSet struct {
	mu  sync.Mutex
	ids map[int64]struct{}
}

// add adds id and reports whether it was new.
func (s *idSet) add(id int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.ids[id]; ok {
		return false
	}
	if s.ids == nil {
		s.ids = map[int64]struct{}{}
	}
	s.ids[id] = struct{}{}
	return true
}
