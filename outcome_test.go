package queue_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

func TestRetryAfterHelper(t *testing.T) {
	cause := errors.New("tracker busy")
	err := queue.RetryAfter(30*time.Second, cause)
	d, ok := queue.RetryDelay(err)
	assert.True(t, ok)
	assert.Equal(t, 30*time.Second, d)
	assert.ErrorIs(t, err, cause)
	assert.Equal(t, "retry in 30s: tracker busy", err.Error())

	d, ok = queue.RetryDelay(fmt.Errorf("wrapped: %w", queue.RetryAfter(-time.Second, nil)))
	assert.True(t, ok, "found through wrapping")
	assert.Zero(t, d, "a negative delay is now")
	assert.Equal(t, "retry in 0s", queue.RetryAfter(0, nil).Error())

	_, ok = queue.RetryDelay(cause)
	assert.False(t, ok)
	_, ok = queue.RetryDelay(nil)
	assert.False(t, ok)
}

func TestPermanentHelper(t *testing.T) {
	assert.NoError(t, queue.Permanent(nil))
	cause := errors.New("malformed")
	err := queue.Permanent(cause)
	assert.True(t, queue.IsPermanent(err))
	assert.True(t, queue.IsPermanent(fmt.Errorf("ctx: %w", err)))
	assert.False(t, queue.IsPermanent(cause))
	assert.False(t, queue.IsPermanent(nil))
	assert.ErrorIs(t, err, cause)
	assert.Equal(t, "permanent: malformed", err.Error())
}

func TestOverloadedAndDisableHelpers(t *testing.T) {
	assert.Equal(t, "target overloaded", queue.Overloaded(nil).Error())
	assert.Equal(t, "target disabled", queue.Disable(nil).Error())
	cause := errors.New("retry in: never")
	assert.ErrorIs(t, queue.Disable(cause), cause)
	assert.Equal(t, "target disabled: retry in: never", queue.Disable(cause).Error())
	assert.ErrorIs(t, queue.Overloaded(cause), cause)
}

// outcome names what a handler error makes the queue do, as far as the
// public surface shows it.
func outcome(err error) string {
	switch {
	case err == nil:
		return "done"
	case strings.HasPrefix(err.Error(), "target overloaded"):
		return "overload"
	case strings.HasPrefix(err.Error(), "target disabled"):
		return "disable"
	case queue.IsPermanent(err):
		return "permanent"
	default:
		return "retry"
	}
}

func TestClassifyHTTP(t *testing.T) {
	dnsNotFound := &net.DNSError{Err: "no such host", Name: "tracker.invalid", IsNotFound: true}
	dnsTimeout := &net.DNSError{Err: "i/o timeout", Name: "tracker.example", IsTimeout: true}
	dnsTemp := &net.DNSError{Err: "server misbehaving", Name: "tracker.example", IsTemporary: true}
	opErr := func(errno syscall.Errno) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: errno}}
	}
	cases := []struct {
		status int
		err    error
		want   string
	}{
		{200, nil, "done"},
		{204, nil, "done"},
		{299, nil, "done"},
		{429, nil, "overload"},
		{400, nil, "disable"},
		{403, nil, "disable"},
		{404, nil, "disable"},
		{401, nil, "permanent"},
		{408, nil, "retry"}, // Request Timeout
		{410, nil, "permanent"},
		{418, nil, "permanent"},
		{500, nil, "retry"},
		{502, nil, "retry"},
		{503, nil, "retry"},
		{504, nil, "retry"},
		{0, dnsNotFound, "disable"},
		{0, fmt.Errorf("announce: %w", dnsNotFound), "disable"},
		{0, dnsTimeout, "retry"},
		{0, dnsTemp, "retry"},
		{0, opErr(syscall.ECONNREFUSED), "disable"},
		{0, opErr(syscall.EHOSTUNREACH), "disable"},
		{0, opErr(syscall.ENETUNREACH), "disable"},
		{0, opErr(syscall.ECONNRESET), "retry"},
		{0, context.DeadlineExceeded, "retry"},
		{0, os.ErrDeadlineExceeded, "retry"},
		{200, errors.New("read body: unexpected EOF"), "retry"},
	}
	for _, tc := range cases {
		name := fmt.Sprint(tc.status)
		if tc.err != nil {
			name = tc.err.Error()
		}
		t.Run(name, func(t *testing.T) {
			got := queue.ClassifyHTTP(tc.status, tc.err)
			assert.Equal(t, tc.want, outcome(got), "%v", got)
			if tc.err != nil && got != nil {
				assert.ErrorIs(t, got, tc.err, "the transport error stays in the chain")
			}
			if tc.err == nil && got != nil {
				var he *queue.HTTPError
				require.ErrorAs(t, got, &he)
				assert.Equal(t, tc.status, he.Status)
				assert.Contains(t, got.Error(), fmt.Sprint(tc.status))
			}
		})
	}
}

func TestClassifyWithShouldSuspend(t *testing.T) {
	q, err := queue.New(nop, queue.WithSuspend(0, func(status int, err error) bool {
		return status == 429 || status == 503
	}))
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Stop(bg)) }()
	assert.Equal(t, "overload", outcome(q.Classify(503, nil)))
	assert.Equal(t, "overload", outcome(q.Classify(429, nil)))
	assert.Equal(t, "retry", outcome(q.Classify(500, nil)))
	assert.Equal(t, "disable", outcome(q.Classify(404, nil)))
	assert.Equal(t, "done", outcome(q.Classify(200, nil)))

	q2, err := queue.New(nop)
	require.NoError(t, err)
	defer func() { require.NoError(t, q2.Stop(bg)) }()
	assert.Equal(t, "retry", outcome(q2.Classify(503, nil)), "without the hook, ClassifyHTTP")
}

func TestErrorTypes(t *testing.T) {
	rl := refusal(t, queue.RateLimit{RetryAfter: 10 * time.Second})
	assert.ErrorIs(t, rl, queue.ErrRateLimited)
	assert.Equal(t, "busy, retry in 10 seconds", rl.Error())
	d, ok := queue.RetryDelay(rl)
	assert.True(t, ok)
	assert.Equal(t, 10*time.Second, d)
	assert.Equal(t, "busy, retry in 2 seconds", refusal(t, queue.RateLimit{RetryAfter: 1500 * time.Millisecond}).Error(), "rounded up")
	assert.Equal(t, "server busy, retry in 3 seconds", refusal(t, queue.RateLimit{RetryAfter: 3 * time.Second, Reason: "server busy"}).Error())

	st := &queue.StuckError{JobIDs: []int64{1, 2}, Err: context.DeadlineExceeded}
	assert.ErrorIs(t, st, context.DeadlineExceeded)
	assert.Contains(t, st.Error(), "2 job(s)")

	pe := &queue.PanicError{Value: "boom"}
	assert.Equal(t, "queue: handler panicked: boom", pe.Error())

	oe := &queue.OptionError{Option: "WithCapacity", Value: -1, Reason: "must be >= 1"}
	assert.Equal(t, "queue: invalid option WithCapacity(-1): must be >= 1", oe.Error())
}
