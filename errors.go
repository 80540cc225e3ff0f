package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Errors returned by Enqueue and the lifecycle methods. Match them with
// errors.Is.
var (
	// ErrQueueFull: the ready queue is at capacity; the job was not
	// accepted and is counted as dropped_full.
	ErrQueueFull = queuetype.ErrQueueFull

	// ErrPendingLimit: the queue holds WithCapacity's pending bound of jobs (ready,
	// scheduled, coalesced reruns and jobs parked for a target's slot);
	// the job was not accepted and is counted as dropped_limit. It also
	// matches ErrQueueFull, so that code that backs off on a full queue
	// backs off on this one; match ErrPendingLimit to tell them apart.
	ErrPendingLimit = queuetype.ErrPendingLimit

	// ErrDuplicate is matched (with errors.Is) by the *DuplicateError
	// that Enqueue returns when a job with the same Key is already
	// queued, scheduled or running (see WithCoalesce), or was accepted
	// within its unique window (Job.UniqueFor), or a scheduled job of the
	// same Group is waiting.
	ErrDuplicate = queuetype.ErrDuplicate

	// ErrInvalidJob is wrapped by the error Enqueue returns for a job it
	// refuses as malformed: a negative MaxAttempts, an ID or Attempt set
	// by the caller (the queue assigns IDs and counts attempts), or a
	// negative UniqueFor or one without a Key, or a Target that is not
	// valid UTF-8, holds a NUL byte or is over 1 024 bytes. The error
	// names the field and its value.
	ErrInvalidJob = queuetype.ErrInvalidJob

	// ErrClosed: the queue is stopping or stopped.
	ErrClosed = queuetype.ErrClosed

	// ErrStarted: Start was called on a queue that was already started.
	ErrStarted = queuetype.ErrStarted

	// ErrRateLimited is matched (with errors.Is) by the error Admit
	// returns when it refuses a request; RetryDelay reads its retry hint.
	ErrRateLimited = errors.New("queue: rate limited")

	// ErrUnknownPriority: a job names a priority label that the queue
	// was not configured with.
	ErrUnknownPriority = queuetype.ErrUnknownPriority

	// ErrUnknownTarget: Resume named a target the queue has never seen,
	// or Suspend, Disable or Resume an empty name. Suspend and Disable
	// accept a target not seen yet: a host may learn that a downstream
	// is down before it sends it anything.
	ErrUnknownTarget = errors.New("queue: unknown target")

	// ErrInvalidConcurrency is wrapped by the error SetConcurrency
	// returns for a limit outside 0..WithWorkers' max; the error names
	// the value and the range.
	ErrInvalidConcurrency = errors.New("queue: invalid concurrency limit")
)

// DuplicateError is the error Enqueue returns for a duplicate job. It
// names what the job collided on (Key, Group) and matches ErrDuplicate;
// its message tells a key held by a unique window (Job.UniqueFor) from
// one held by a pending or running job.
// The in-memory store returns the same *DuplicateError for repeated
// duplicates of one key, so that refusing them allocates nothing: treat it
// as read-only.
type DuplicateError = queuetype.DuplicateError

// invalidJob returns the error for a job Enqueue refuses as malformed, or
// nil.
func invalidJob[T any](job *Job[T]) error {
	switch {
	case job.MaxAttempts < 0:
		return fmt.Errorf("%w: MaxAttempts is %d; it must be >= 0 (0 means the queue's WithRetry maxAttempts)", ErrInvalidJob, job.MaxAttempts)
	case job.ID != 0:
		return fmt.Errorf("%w: ID is %d; the queue assigns IDs, leave it zero (use Key to deduplicate)", ErrInvalidJob, job.ID)
	case job.Attempt != 0:
		return fmt.Errorf("%w: Attempt is %d; the queue counts attempts, leave it zero (use MaxAttempts to limit them)", ErrInvalidJob, job.Attempt)
	case job.UniqueFor < 0:
		return fmt.Errorf("%w: UniqueFor is %v; it must be >= 0 (0 means no unique window)", ErrInvalidJob, job.UniqueFor)
	case job.UniqueFor > 0 && job.Key == "":
		return fmt.Errorf("%w: UniqueFor is %v but Key is empty; a unique window holds a Key: set one, or leave UniqueFor zero", ErrInvalidJob, job.UniqueFor)
	}
	if p := storekit.TargetProblem(job.Target); p != "" {
		return fmt.Errorf("%w: %s", ErrInvalidJob, p)
	}
	if !job.Meta.IsZero() {
		if err := job.Meta.Check(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidJob, err)
		}
	}
	return nil
}

// OptionError reports an invalid option passed to New: the Option's
// name, the rejected Value and the Reason.
type OptionError = queuetype.OptionError

func optErr(option string, value any, reason string, args ...any) error {
	return queuetype.NewOptionError(option, value, reason, args...)
}

// PanicError is the error recorded for a job whose Handler panicked.
type PanicError struct {
	Value any    // the value passed to panic
	Stack []byte // the goroutine's stack at the panic
}

// Error returns "queue: handler panicked: " and the value passed to
// panic; the stack is in Stack.
func (e *PanicError) Error() string { return fmt.Sprintf("queue: handler panicked: %v", e.Value) }

// rateLimitError is Admit's refusal: it matches ErrRateLimited, carries
// the retry hint for RetryDelay, and its text is the client-facing
// message, built once.
type rateLimitError struct {
	retryAfter time.Duration
	msg        string
}

// defaultRefusalReason is the refusal's reason when the host sets none.
const defaultRefusalReason = "busy"

// newRateLimitError returns the refusal for retryAfter and reason: the
// reason, then the retry hint in whole seconds, rounded up, e.g. "busy,
// retry in 10 seconds".
func newRateLimitError(retryAfter time.Duration, reason string) *rateLimitError {
	secs := retryAfter / time.Second // rounded up below, without overflowing
	if retryAfter%time.Second > 0 {
		secs++
	}
	return &rateLimitError{retryAfter: retryAfter, msg: fmt.Sprintf("%s, retry in %d seconds", reason, int64(secs))}
}

func (e *rateLimitError) Error() string        { return e.msg }
func (e *rateLimitError) Is(target error) bool { return target == ErrRateLimited }

// StuckError is returned by Shutdown and Stop when their context ends
// while handlers are still running.
type StuckError struct {
	JobIDs []int64 // the jobs whose handlers had not returned
	Err    error   // the context's error
}

// Error returns how many jobs were still running and the context's
// error, e.g. "queue: 2 job(s) still running: context deadline exceeded".
func (e *StuckError) Error() string {
	return fmt.Sprintf("queue: %d job(s) still running: %v", len(e.JobIDs), e.Err)
}

// Unwrap returns the context's error.
func (e *StuckError) Unwrap() error { return e.Err }
