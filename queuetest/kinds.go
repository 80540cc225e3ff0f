package queuetest

import (
	"context"
	"fmt"
	"time"

	"github.com/queuekit/queue"
)

// Kind is a deterministic job behaviour (the work-kind catalog of the
// original Postgres queue design): how long a run takes and how it ends,
// as a function of the attempt only, so that crash, pressure and soak
// tests replay the same way every time.
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

// ErrKindFailed is the retryable error a Kind's failing runs return.
var ErrKindFailed = fmt.Errorf("queuetest: kind failed (retryable)")

// Handler returns a handler that runs each job as the Kind kindOf names.
// An unknown kind is a permanent error naming it. The handler is safe for
// concurrent use. A RetryAfter kind tells its first run from its rerun by
// seen, which the handler keeps per job ID.
func Handler[T any](c Catalog, kindOf func(T) string) queue.Handler[T] {
	seen := newIDSet()
	return func(ctx context.Context, j queue.Job[T]) error {
		name := kindOf(j.Payload)
		k, ok := c[name]
		if !ok {
			return queue.Permanent(fmt.Errorf("queuetest: unknown kind %q", name))
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
			return fmt.Errorf("attempt %d of kind %q: %w", j.Attempt, name, ErrKindFailed)
		}
		switch k.Outcome {
		case OutcomePermanent:
			return queue.Permanent(fmt.Errorf("kind %q fails for good", name))
		case OutcomeFail:
			return fmt.Errorf("kind %q: %w", name, ErrKindFailed)
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
