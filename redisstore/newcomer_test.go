package redisstore

import (
	"context"
	"fmt"
	"log"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

// A payload type the codec cannot encode is refused by New, not by every
// Enqueue.
func TestNewRefusesUnencodablePayloadType(t *testing.T) {
	c := needRedis(t)
	_, err := New[func()](c)
	require.Error(t, err)
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "redisstore.New", oe.Option)
	assert.Contains(t, err.Error(), "payload type func()")
	_, err = New[complex128](c)
	assert.ErrorContains(t, err, "complex128")
}

// quietRedis records what go-redis logs through its process-wide logger
// (by default to stderr), for the tests below; it is put back to a
// stderr logger when the test ends. Tests using it must not run in
// parallel.
type quietRedis struct {
	mu    sync.Mutex
	lines []string
}

func (q *quietRedis) Printf(_ context.Context, format string, v ...any) {
	q.mu.Lock()
	q.lines = append(q.lines, fmt.Sprintf(format, v...))
	q.mu.Unlock()
}

type stderrLogger struct{ l *log.Logger }

func (s stderrLogger) Printf(_ context.Context, format string, v ...any) { s.l.Printf(format, v...) }

// A configuration that cannot work is New's error, at once, even when
// WithConnect allows starting degraded, and go-redis prints nothing; an
// outage (nothing listens) follows WithConnect.
func TestNewTellsMisconfigurationFromOutage(t *testing.T) {
	needRedis(t)
	rec := &quietRedis{}
	redis.SetLogger(rec)
	t.Cleanup(func() { redis.SetLogger(stderrLogger{log.New(os.Stderr, "redis: ", log.LstdFlags)}) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	free := l.Addr().String()
	require.NoError(t, l.Close())
	for _, tc := range []struct {
		name string
		opt  redis.Options
		want string // in the error; "" for an outage
	}{
		{"unknown user", redis.Options{Addr: redisAddr(), Username: "queuekit_no_such_user", Password: "x"}, "WRONGPASS"},
		{"DB out of range", redis.Options{Addr: redisAddr(), DB: 100000}, "DB index is out of range"},
		{"unknown host", redis.Options{Addr: "no-such-host.invalid:6379"}, "no such host"},
		{"not a port", redis.Options{Addr: "127.0.0.1:notaport"}, "unknown port"},
		{"nothing listens", redis.Options{Addr: free}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, degraded := range []bool{false, true} {
				c := redis.NewClient(&tc.opt)
				began := time.Now()
				s, err := New[int](c, WithConnect(time.Second, degraded))
				took := time.Since(began)
				c.Close()
				switch {
				case tc.want != "":
					require.Error(t, err, "degraded %v", degraded)
					assert.Contains(t, err.Error(), tc.want)
					assert.Contains(t, err.Error(), "not an outage")
				case degraded:
					require.NoError(t, err)
					assert.True(t, s.down, "starts on the fallback")
				default:
					require.Error(t, err)
					assert.Contains(t, err.Error(), "unreachable")
				}
				assert.Less(t, took, 500*time.Millisecond, "degraded %v", degraded)
			}
		})
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Empty(t, rec.lines, "go-redis printed")
}
