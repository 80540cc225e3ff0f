package queue

import (
	"context"

	"github.com/queuekit/queue/queuetype"
)

// Handler runs one job. Its return value decides what happens next:
//
//   - nil: the job is done; its key is released.
//   - [RetryAfter]: run again after the given delay (BEP 31 "retry in").
//   - [Permanent]: no retry; the job is dead-lettered.
//   - [Overloaded]: the job's target is suspended and the job waits for it
//     (using an attempt: dead-lettered at [WithRetry]).
//   - [Disable]: the job's target is disabled and the job is dead-lettered.
//   - any other error: retried with exponential backoff and jitter until
//     [WithRetry] is reached, then dead-lettered.
//
// A panic in a Handler is recovered and treated as an error of type
// [*PanicError]. ctx is cancelled by [Queue.Shutdown], when the job's
// per-job timeout ([WithJobTimeout]) passes, and, on durable stores, when the
// job's lease is lost.
type Handler[T any] func(ctx context.Context, job Job[T]) error

// Job is one unit of work and its routing information. Only Payload is
// required; every other field has a useful zero value:
//
//   - ID is assigned when the job is accepted; Enqueue refuses a set one.
//   - Key is the pending key: a duplicate is refused while the job waits,
//     and coalesced into one rerun while it runs ([WithCoalesce]).
//   - Group allows at most one scheduled job of the group at a time.
//   - Target names the downstream whose health the queue tracks.
//   - Priority is a label from [WithPriorities]; "" is the default.
//   - RunAt is when the job becomes due; zero means now.
//   - Attempt is the current attempt, from 1; Enqueue refuses a set one.
//   - MaxAttempts overrides [WithRetry] for the job (0: the default).
//   - UniqueFor holds Key for a window, even after the job ends.
//   - Meta is string key/value metadata (a trace context, a tenant)
//     that every store keeps with the job.
//   - Payload is the job's data, never inspected, logged or displayed.
//
// Job is defined in package queuetype, which the stores share with the
// engine; its documentation has each field in full.
type Job[T any] = queuetype.Job[T]

// Meta is a job's metadata ([Job].Meta): string key/value pairs, such as
// a trace context, a tenant or a request ID, that every store keeps with
// the job and hands back at every run. The zero Meta is empty; build one
// with Set or [queuetype.MetaOf]. See [queuetype.Meta] for its methods
// and limits.
type Meta = queuetype.Meta

// maxAttempts returns the job's attempt limit under the queue default def.
func maxAttempts[T any](j *Job[T], def int) int {
	if j.MaxAttempts > 0 {
		return j.MaxAttempts
	}
	return def
}
