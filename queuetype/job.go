package queuetype

import "time"

// Job is one unit of work and its routing information. Only Payload is
// required; every other field has a useful zero value.
type Job[T any] struct {
	// ID is assigned by the store when the job is accepted; it is set in
	// the Job a Handler receives. Enqueue refuses a Job whose ID is not
	// zero (ErrInvalidJob): to enqueue a received Job again, clear it.
	ID int64

	// Key is the pending key: while a job with this key is queued or
	// scheduled, another Enqueue with the same key returns ErrDuplicate;
	// while it runs, another Enqueue is coalesced into exactly one more run
	// (see [github.com/queuekit/queue.WithCoalesce]). "" means no deduplication.
	// A key is compared as bytes and may have any length and hold any
	// bytes (NUL, invalid UTF-8) on every store; it is handed back
	// unchanged.
	Key string

	// Group is a coarser key for scheduled jobs: at most one job of a group
	// may wait in the schedule at a time (a tracker forwarder groups by
	// infohash:forwarder, ignoring the peer). "" means no group. Like
	// Key, any bytes of any length.
	Group string

	// Target names the downstream the job talks to (a forwarder, an API
	// host). Target health — suspension, disabling, circuit breaking and
	// per-target concurrency — is tracked per Target. "" means none. A
	// target is a name: Enqueue refuses one that is not valid UTF-8, holds
	// a NUL byte or is over 1 024 bytes (ErrInvalidJob).
	Target string

	// Priority is a label from [github.com/queuekit/queue.WithPriorities]; "" means the default
	// priority. Higher priorities run first, strictly or by their shares
	// (see [github.com/queuekit/queue.WithPriorities]); jobs of one
	// priority run in FIFO order.
	Priority string

	// RunAt is when the job becomes due. The zero time or a time in the
	// past means now.
	RunAt time.Time

	// Attempt is the number of the current attempt, starting at 1. Runs
	// that end in [github.com/queuekit/queue.RetryAfter], and claims put back because the job's
	// target was suspended or busy, do not use up an attempt, so the next
	// run has the same number. Enqueue refuses a Job whose Attempt is not
	// zero (ErrInvalidJob).
	Attempt int

	// MaxAttempts overrides [github.com/queuekit/queue.WithRetry] for this job; 0 means the
	// queue's default. Enqueue refuses a negative one (ErrInvalidJob).
	MaxAttempts int

	// UniqueFor makes Key unique for a window: for UniqueFor after the job
	// is accepted, another job with the same Key is refused with
	// ErrDuplicate whether the first is still pending, running, or has
	// already ended (done, dead or cancelled). After the window the usual
	// pending-key rules apply. 0 means no window; a negative window, or a
	// window without a Key, is refused (ErrInvalidJob). Cancel,
	// CancelMatch and Purge end jobs, not windows: a cancelled job's
	// window stands. Within its window a running key takes no coalesced
	// rerun. The window is judged by the store's clock (see the package
	// documentation's Deduplication section).
	UniqueFor time.Duration

	// Meta is the job's metadata: string key/value pairs such as a trace
	// context, a tenant or a request ID, kept with the job by every store
	// and handed back unchanged at every run. The zero Meta is empty and
	// costs nothing. Enqueue refuses metadata that breaks the rules of
	// [Meta.Check] (ErrInvalidJob).
	Meta Meta

	// Payload is the job's data. The queue never inspects, logs or
	// displays it.
	Payload T
}
