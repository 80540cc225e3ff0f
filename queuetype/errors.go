package queuetype

import (
	"errors"
	"fmt"
)

// Errors the engine and the in-memory store share; the root package
// re-exports each under the same name, with its documentation.
var (
	// ErrQueueFull: the ready queue is at capacity; the job was not
	// accepted and is counted as dropped_full.
	ErrQueueFull = errors.New("queue: ready queue is full")

	// ErrPendingLimit: the queue holds WithCapacity's pending bound of jobs (ready,
	// scheduled, coalesced reruns and jobs parked for a target's slot);
	// the job was not accepted and is counted as dropped_limit. It also
	// matches ErrQueueFull, so that code that backs off on a full queue
	// backs off on this one; match ErrPendingLimit to tell them apart.
	ErrPendingLimit error = pendingLimitError{}

	// ErrDuplicate is matched (with errors.Is) by the *DuplicateError
	// that Enqueue returns when a job with the same Key is already
	// queued, scheduled or running (see WithCoalesce), or was accepted
	// within its unique window (Job.UniqueFor), or a scheduled job of the
	// same Group is waiting.
	ErrDuplicate = errors.New("queue: duplicate job")

	// ErrClosed: the queue is stopping or stopped.
	ErrClosed = errors.New("queue: closed")

	// ErrStarted: Start was called on a queue that was already started.
	ErrStarted = errors.New("queue: already started")

	// ErrUnknownPriority: a job names a priority label that the queue
	// was not configured with.
	ErrUnknownPriority = errors.New("queue: unknown priority")
)

// pendingLimitError is ErrPendingLimit's type: a sentinel that also
// matches ErrQueueFull.
type pendingLimitError struct{}

// DuplicateError is the error Enqueue returns for a duplicate job. It
// names what the job collided on and matches ErrDuplicate. The in-memory
// store returns the same *DuplicateError for repeated duplicates of one
// key, so that refusing them allocates nothing: treat it as read-only.
type DuplicateError struct {
	// Key is the job's Key when a job holding it is queued, scheduled or
	// running; "" when the collision was on Group alone.
	Key string
	// Group is the job's Group when a scheduled job of the group is
	// waiting; "" when the collision was on Key alone.
	Group string

	window bool // the key is held by a unique window (Job.UniqueFor)
}

// OptionError reports an invalid option passed to New.
type OptionError struct {
	Option string // the option's name, e.g. "WithCapacity"
	Value  any    // the rejected value
	Reason string // why it was rejected
}

func (pendingLimitError) Error() string {
	return "queue: pending-job limit reached (WithCapacity's pending bound): no room for another job"
}

func (pendingLimitError) Is(target error) bool { return target == ErrQueueFull }

// WindowDuplicate returns the error for a job refused because key is held
// by a unique window (Job.UniqueFor) that has not ended.
func WindowDuplicate(key string) *DuplicateError {
	return &DuplicateError{Key: key, window: true}
}

// Error names the key or group; e.g. `queue: duplicate job: key "k" is
// held by a queued, scheduled or running job`.
func (e *DuplicateError) Error() string {
	switch {
	case e.window:
		return fmt.Sprintf("queue: duplicate job: key %q is held by a unique window (Job.UniqueFor) that has not ended", e.Key)
	case e.Group == "":
		return fmt.Sprintf("queue: duplicate job: key %q is held by a queued, scheduled or running job", e.Key)
	case e.Key == "":
		return fmt.Sprintf("queue: duplicate job: group %q already has a scheduled job", e.Group)
	}
	return fmt.Sprintf("queue: duplicate job: key %q is held by another job, or group %q already has a scheduled job", e.Key, e.Group)
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// Error returns "queue: invalid option " followed by the option, the
// rejected value and the reason.
func (e *OptionError) Error() string {
	return fmt.Sprintf("queue: invalid option %s(%v): %s", e.Option, e.Value, e.Reason)
}

// OptErr returns an *OptionError for option and value, its reason
// formatted from reason and args.
func NewOptionError(option string, value any, reason string, args ...any) error {
	return &OptionError{Option: option, Value: value, Reason: fmt.Sprintf(reason, args...)}
}

// ErrInvalidJob is wrapped by the error Enqueue returns for a job it
// refuses as malformed: a negative MaxAttempts, an ID or Attempt set
// by the caller (the queue assigns IDs and counts attempts), or a
// negative UniqueFor or one without a Key, or a Target that is not
// valid UTF-8, holds a NUL byte or is over 1 024 bytes. The error
// names the field and its value.
var ErrInvalidJob = errors.New("queue: invalid job")
