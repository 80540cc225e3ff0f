package queue

import (
	"errors"
	"fmt"
	"time"
)

// RetryAfter tells the queue to run the job again after d (BEP 31 "retry
// in"). A delay at or above the ceiling of [WithRetryAfterBounds] (default
// 10 minutes) is treated as done: the job is not retried. A delay below
// its floor (default 1 second), zero and negative delays included, is
// raised to the floor: a downstream that keeps answering "retry now" gets
// one run per floor, not a busy loop. err, which may be nil, is recorded
// as the reason. A retry requested this way does not count against
// [WithRetry], so a job may be retried this way without end, as
// river's JobSnooze allows; its rerun waits in the schedule, and is kept
// by Stop as scheduled jobs are.
func RetryAfter(d time.Duration, err error) error {
	if d < 0 {
		d = 0
	}
	return &retryAfterError{delay: d, err: err}
}

// Permanent marks err as not worth retrying: the job is dead-lettered at
// once. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// Overloaded reports that the job's target is overloaded (HTTP 429 and the
// like): the target is suspended for [WithSuspend] and the job waits
// until the suspension ends. The run counts as an attempt: a job whose
// target is still overloaded at its last attempt is dead-lettered rather
// than held forever. err may be nil.
func Overloaded(err error) error { return &overloadError{err: err} }

// Disable reports that the job's target refused the job for good (a
// tracker's "retry in: never", HTTP 404, DNS failure): the target is
// disabled with err as its reason and the job is dead-lettered. err may be
// nil.
func Disable(err error) error { return &disableError{err: err} }

type retryAfterError struct {
	delay time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("retry in %s", e.delay)
	}
	return fmt.Sprintf("retry in %s: %v", e.delay, e.err)
}
func (e *retryAfterError) Unwrap() error { return e.err }

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

type overloadError struct{ err error }

func (e *overloadError) Error() string {
	if e.err == nil {
		return "target overloaded"
	}
	return "target overloaded: " + e.err.Error()
}
func (e *overloadError) Unwrap() error { return e.err }

type disableError struct{ err error }

func (e *disableError) Error() string {
	if e.err == nil {
		return "target disabled"
	}
	return "target disabled: " + e.err.Error()
}
func (e *disableError) Unwrap() error { return e.err }

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// RetryDelay returns the delay asked for by RetryAfter somewhere in err's
// chain, or, for a refusal by Admit, how long the client should wait
// before trying again (RateLimit.RetryAfter).
func RetryDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.delay, true
	}
	var rl *rateLimitError
	if errors.As(err, &rl) {
		return rl.retryAfter, true
	}
	return 0, false
}
