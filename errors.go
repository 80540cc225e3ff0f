package queue

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by Enqueue and the lifecycle methods. Match them with
// errors.Is.
var (
	// ErrQueueFull: the ready queue is at capacity; the job was not
	// accepted and is counted as dropped_full.
	ErrQueueFull = errors.New("queue: ready queue is full")

	// ErrPendingLimit: the queue holds WithMaxPending jobs (ready,
	// scheduled, coalesced reruns and jobs parked for a target's slot);
	// the job was not accepted and is counted as dropped_limit. It also
	// matches ErrQueueFull, so that code that backs off on a full queue
	// backs off on this one; match ErrPendingLimit to tell them apart.
	ErrPendingLimit error = pendingLimitError{}

	// ErrDuplicate is matched (with errors.Is) by the *DuplicateError
	// that Enqueue returns when a job with the same Key is already
	// queued, scheduled or running (see WithCoalesce), or a scheduled job
	// of the same Group is waiting.
	ErrDuplicate = errors.New("queue: duplicate job")

	// ErrInvalidJob is wrapped by the error Enqueue returns for a job it
	// refuses as malformed: a negative MaxAttempts, or an ID or Attempt
	// set by the caller (the queue assigns IDs and counts attempts). The
	// error names the field and its value.
	ErrInvalidJob = errors.New("queue: invalid job")

	// ErrClosed: the queue is stopping or stopped.
	ErrClosed = errors.New("queue: closed")

	// ErrStarted: Start was called on a queue that was already started.
	ErrStarted = errors.New("queue: already started")

	// ErrRateLimited is matched (with errors.Is) by the *RateLimitError
	// that Admit returns when it refuses a request.
	ErrRateLimited = errors.New("queue: rate limited")

	// ErrUnknownPriority: a job names a priority label that the queue
	// was not configured with.
	ErrUnknownPriority = errors.New("queue: unknown priority")

	// ErrUnknownTarget: Resume named a target the queue has never seen,
	// or Suspend, Disable or Resume an empty name. Suspend and Disable
	// accept a target not seen yet: a host may learn that a downstream
	// is down before it sends it anything.
	ErrUnknownTarget = errors.New("queue: unknown target")
)

// pendingLimitError is ErrPendingLimit's type: a sentinel that also
// matches ErrQueueFull.
type pendingLimitError struct{}

func (pendingLimitError) Error() string {
	return "queue: pending-job limit reached (WithMaxPending): no room for another job"
}

func (pendingLimitError) Is(target error) bool { return target == ErrQueueFull }

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
}

// Error names the key or group; e.g. `queue: duplicate job: key "k" is
// held by a queued, scheduled or running job`.
func (e *DuplicateError) Error() string {
	switch {
	case e.Group == "":
		return fmt.Sprintf("queue: duplicate job: key %q is held by a queued, scheduled or running job", e.Key)
	case e.Key == "":
		return fmt.Sprintf("queue: duplicate job: group %q already has a scheduled job", e.Group)
	}
	return fmt.Sprintf("queue: duplicate job: key %q is held by another job, or group %q already has a scheduled job", e.Key, e.Group)
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// invalidJob returns the error for a job Enqueue refuses as malformed, or
// nil.
func invalidJob(id int64, attempt, maxAttempts int) error {
	switch {
	case maxAttempts < 0:
		return fmt.Errorf("%w: MaxAttempts is %d; it must be >= 0 (0 means the queue's WithMaxAttempts)", ErrInvalidJob, maxAttempts)
	case id != 0:
		return fmt.Errorf("%w: ID is %d; the queue assigns IDs, leave it zero (use Key to deduplicate)", ErrInvalidJob, id)
	case attempt != 0:
		return fmt.Errorf("%w: Attempt is %d; the queue counts attempts, leave it zero (use MaxAttempts to limit them)", ErrInvalidJob, attempt)
	}
	return nil
}

// OptionError reports an invalid option passed to New.
type OptionError struct {
	Option string // the option's name, e.g. "WithCapacity"
	Value  any    // the rejected value
	Reason string // why it was rejected
}

// Error returns "queue: invalid option " followed by the option, the
// rejected value and the reason.
func (e *OptionError) Error() string {
	return fmt.Sprintf("queue: invalid option %s(%v): %s", e.Option, e.Value, e.Reason)
}

func optErr(option string, value any, reason string, args ...any) error {
	return &OptionError{Option: option, Value: value, Reason: fmt.Sprintf(reason, args...)}
}

// PanicError is the error recorded for a job whose Handler panicked.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the goroutine's stack at the panic
}

// Error returns "queue: handler panicked: " and the value passed to
// panic; the stack is in Stack.
func (e *PanicError) Error() string { return fmt.Sprintf("queue: handler panicked: %v", e.Value) }

// RateLimitError is returned by Admit when the admission limiter refuses a
// request. It matches ErrRateLimited.
type RateLimitError struct {
	// RetryAfter is how long the client should wait before trying again.
	RetryAfter time.Duration
	// Reason is the host's text shown before the retry hint, set with
	// WithRateLimitRefusal; "" means "busy".
	Reason string
}

// defaultRefusalReason is RateLimitError's Reason when the host sets none.
const defaultRefusalReason = "busy"

// Error returns the same text as Message.
func (e *RateLimitError) Error() string { return e.Message() }

// Message is a ready client-facing message: the Reason, then the retry
// hint in whole seconds, rounded up, e.g. "busy, retry in 10 seconds".
func (e *RateLimitError) Message() string {
	secs := e.RetryAfter / time.Second // rounded up below, without overflowing
	if e.RetryAfter%time.Second > 0 {
		secs++
	}
	reason := e.Reason
	if reason == "" {
		reason = defaultRefusalReason
	}
	return fmt.Sprintf("%s, retry in %d seconds", reason, int64(secs))
}

// Is reports whether target is ErrRateLimited.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }
