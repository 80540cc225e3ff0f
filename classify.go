package queue

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
)

// ClassifyHTTP maps the result of an HTTP call to a handler outcome:
//
//	2xx                      → nil (done)
//	429                      → Overloaded (suspend the target)
//	400, 403, 404            → Disable (the target rejects us)
//	other 4xx but 408        → Permanent
//	5xx, 408, timeouts,
//	other err                → the error itself (retried with backoff)
//	DNS "no such host", connection refused, no route to host,
//	network unreachable      → Disable (non-retryable)
//
// err, if non-nil, is the transport error and status is ignored.
func ClassifyHTTP(status int, err error) error {
	if err != nil {
		if isNonRetryable(err) {
			return Disable(err)
		}
		return err
	}
	switch {
	case status >= 200 && status < 300:
		return nil
	case status == http.StatusTooManyRequests:
		return errOverloaded429
	case status == http.StatusBadRequest:
		return errDisable400
	case status == http.StatusForbidden:
		return errDisable403
	case status == http.StatusNotFound:
		return errDisable404
	case status == http.StatusRequestTimeout:
		return &HTTPError{Status: status} // a timeout: retried
	case status >= 400 && status < 500:
		return Permanent(&HTTPError{Status: status})
	default:
		return &HTTPError{Status: status}
	}
}

// The outcomes of the statuses that decide a target's health, built once:
// ClassifyHTTP returns them without allocating. They are shared; do not
// modify them.
var (
	errOverloaded429 = Overloaded(&HTTPError{Status: http.StatusTooManyRequests})
	errDisable400    = Disable(&HTTPError{Status: http.StatusBadRequest})
	errDisable403    = Disable(&HTTPError{Status: http.StatusForbidden})
	errDisable404    = Disable(&HTTPError{Status: http.StatusNotFound})
)

// Classify is ClassifyHTTP with the queue's WithSuspend overload test.
func (q *Queue[T]) Classify(status int, err error) error {
	if fn := q.cfg.targets.shouldSuspend; fn != nil && fn(status, err) {
		if err == nil {
			err = &HTTPError{Status: status}
		}
		return Overloaded(err)
	}
	return ClassifyHTTP(status, err)
}

// HTTPError is an HTTP status treated as a failure by ClassifyHTTP.
type HTTPError struct {
	Status int // the HTTP status code, e.g. 503
}

// Error returns the status code and its text, e.g. "HTTP 503 Service
// Unavailable".
func (e *HTTPError) Error() string {
	return fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
}

// isNonRetryable reports DNS failures and refused or unreachable
// connections: errors that retrying soon will not fix.
func isNonRetryable(err error) bool {
	switch e := err.(type) { // unwrapped: no errors.As, no allocation
	case nil:
		return false
	case *disableError:
		return true
	case *net.DNSError:
		return e.IsNotFound || (!e.IsTimeout && !e.IsTemporary)
	}
	var dis *disableError
	if errors.As(err, &dis) {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsNotFound || (!dns.IsTimeout && !dns.IsTemporary)
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}
