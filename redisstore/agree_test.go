package redisstore

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// TestInitWithoutLogger: a storekit.Config built by hand without a Logger (or
// Clock, or Report) is defaulted as queue.New does; the store used to
// panic in the leader loop once it led, logging to a nil logger.
func TestInitWithoutLogger(t *testing.T) {
	c := needRedis(t)
	s, err := New[int](c, WithPrefix(testPrefix(t, c)), WithLeaderTTL(300*time.Millisecond),
		WithLeaseTTL(100*time.Millisecond), WithJanitorInterval(10*time.Millisecond))
	require.NoError(t, err)
	cfg := storetest.Config("q", 10, nil, nil)
	cfg.Logger, cfg.Clock = nil, nil
	require.NoError(t, s.Init(cfg))
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, s.Close(ctx))
	})
	ctx := context.Background()
	_, err = s.Add(ctx, queue.Job[int]{Payload: 1})
	require.NoError(t, err)
	j := claimWithin(t, s, 5*time.Second)
	// Leadership is the leader key in Redis, taken with SET NX: polled.
	// The leader logs the change and its janitor rescues the lease the
	// claim lets expire, reporting it (to the defaulted Report).
	require.Eventually(t, s.lead.Leading, 10*time.Second, pollTick, "leadership")
	require.Eventually(t, func() bool {
		st, err := s.Stats(ctx)
		return err == nil && st.Running == 0 && st.Ready == 1
	}, 10*time.Second, pollTick, "the expired lease rescued")
	require.ErrorIs(t, s.Complete(ctx, j), storekit.ErrLeaseLost)
}

// TestStoresAgreeOnQueueNames: redisstore and pgstore accept the same queue
// names and refuse the others with the same words: a name with a space
// (or a brace, which would break the key's hash tag) is refused.
func TestStoresAgreeOnQueueNames(t *testing.T) {
	c := needRedis(t)
	for name, ok := range map[string]bool{
		"q": true, "mail.outbox:v2-b_1": true, strings.Repeat("a", 63): true,
		"a b": false, " a": false, "bad{name}": false, "": false, "-a": false, "a\n": false,
		strings.Repeat("a", 64): false, "päckchen": false,
	} {
		s, err := New[int](c)
		require.NoError(t, err)
		cfg := storetest.Config(name, 10, nil, func(queue.Event) {})
		err = s.Init(cfg)
		if ok {
			require.NoError(t, err, "name %q", name)
			continue
		}
		require.Error(t, err, "name %q", name)
		want := `redisstore: queue name "` + strings.ReplaceAll(name, "\n", `\n`) + `" is not valid: ` +
			"use 1 to 63 letters, digits, '_', '.', ':' or '-', starting with a letter, digit or '_'"
		require.Equal(t, want, err.Error())
	}
}

// TestStoresAgreeOnOptions: the options every durable store has refuse the
// same bad values with the same words, the option named with its package
// (pgstore's test of the same name checks its side).
func TestStoresAgreeOnOptions(t *testing.T) {
	c := needRedis(t)
	for _, tc := range []struct {
		opt  Option
		want string
	}{
		{WithCodec(nil), "WithCodec(<nil>): must not be nil"},
		{WithMaxPayload(0), "WithMaxPayload(0): must be >= 1"},
		{WithLeaseTTL(99 * time.Millisecond), "WithLeaseTTL(99ms): must be >= 100ms"},
		{WithLeaderTTL(99 * time.Millisecond), "WithLeaderTTL(99ms): must be >= 100ms"},
		{WithPollInterval(time.Microsecond), "WithPollInterval(1µs): must be >= 1ms"},
		{WithJanitorInterval(0), "WithJanitorInterval(0s): must be >= 1ms"},
		{WithDeadRetention(-time.Second), "WithDeadRetention(-1s): must be >= 0s"},
		{WithWorkerID(""), `WithWorkerID(""): must be 1..200 bytes`},
	} {
		_, err := New[int](c, tc.opt)
		var oe *queue.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "queue: invalid option redisstore."+tc.want, err.Error())
	}
	// The bounds themselves are accepted.
	s, err := New[int](c, WithMaxPayload(1), WithLeaseTTL(100*time.Millisecond),
		WithLeaderTTL(100*time.Millisecond), WithPollInterval(time.Millisecond),
		WithJanitorInterval(time.Millisecond), WithDeadRetention(0), WithWorkerID("w"))
	require.NoError(t, err)
	require.Equal(t, "w", s.WorkerID())
}

// TestAddCancelledContext: Add with a context already done refuses the
// job with an error matching ctx.Err() and stores nothing, as pgstore
// does; it used to add the job (or fail only when it had to reserve IDs).
func TestAddCancelledContext(t *testing.T) {
	c := needRedis(t)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	_, err := s.Add(ctx, queue.Job[int]{Payload: 1}) // IDs reserved
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Add(cctx, queue.Job[int]{Payload: 2})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "redisstore: add: context canceled", err.Error())
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, err = s.Add(dctx, queue.Job[int]{Payload: 3})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Ready, "only the first job stored")
}

// TestLogsNameQueueOnce: the queue's logger already carries queue=<name>
// (queue.New adds it); the store's records must not add it again.
func TestLogsNameQueueOnce(t *testing.T) {
	c := needRedis(t)
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New[int](c, WithPrefix(testPrefix(t, c)))
	require.NoError(t, err)
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }, queue.WithName("agree"), queue.WithLogger(log))
	require.NoError(t, err)
	require.NoError(t, q.Start(context.Background()))
	// Leadership is the leader key in Redis, taken with SET NX: polled.
	// Taking it logs "redisstore: leading".
	require.Eventually(t, func() bool { return strings.Contains(buf.String(), "redisstore: leading") },
		10*time.Second, pollTick, "the store's leadership record")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, q.Stop(ctx))
	require.NoError(t, s.Close(ctx))
	n := 0
	for _, l := range strings.Split(buf.String(), "\n") {
		if !strings.Contains(l, "redisstore:") {
			continue
		}
		n++
		if k := strings.Count(l, " queue="); k != 1 {
			t.Errorf("record with queue= %d times: %s", k, l)
		}
	}
	require.NotZero(t, n, "no record of the store")
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
