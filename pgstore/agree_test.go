package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storetest"
	"github.com/stretchr/testify/require"
)

// TestStoresAgreeOnQueueNames: pgstore and redisstore accept the same queue
// names and refuse the others with the same words (redisstore's test of the
// same name checks its side).
func TestStoresAgreeOnQueueNames(t *testing.T) {
	t.Parallel()
	requirePG(t)
	pool := newPool(t, pgURL(), 2)
	for name, ok := range map[string]bool{
		"q": true, "mail.outbox:v2-b_1": true, strings.Repeat("a", 63): true,
		"a b": false, " a": false, "bad{name}": false, "": false, "-a": false, "a\n": false,
		strings.Repeat("a", 64): false, "päckchen": false,
	} {
		s, err := pgstore.New[P](pool)
		require.NoError(t, err)
		err = s.Init(storetest.Config(name, 10, queuetest.NewFakeClock(epoch), func(queue.Event) {}))
		if ok {
			require.NoError(t, err, "name %q", name)
			continue
		}
		require.Error(t, err, "name %q", name)
		want := `pgstore: queue name "` + strings.ReplaceAll(name, "\n", `\n`) + `" is not valid: ` +
			"use 1 to 63 letters, digits, '_', '.', ':' or '-', starting with a letter, digit or '_'"
		require.Equal(t, want, err.Error())
	}
}

// TestAddCancelledContext: Add with a context already done refuses the job
// with an error matching ctx.Err() and stores nothing, as redisstore does.
func TestAddCancelledContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "agree", nil)
	ctx := context.Background()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := s.Add(cctx, queue.Job[P]{})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, "pgstore: add: context canceled", err.Error())
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Second))
	defer cancel()
	_, err = s.Add(dctx, queue.Job[P]{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Ready+st.Scheduled, "nothing stored: %+v", st)
}

// TestStoresAgreeOnOptions: the options every durable store has refuse the
// same bad values with the same words, the option named with its package
// (redisstore's test of the same name checks its side).
func TestStoresAgreeOnOptions(t *testing.T) {
	t.Parallel()
	requirePG(t)
	pool := newPool(t, pgURL(), 2)
	for _, tc := range []struct {
		opt  pgstore.Option
		want string
	}{
		{pgstore.WithCodec(nil), "WithCodec(<nil>): must not be nil"},
		{pgstore.WithMaxPayload(0), "WithMaxPayload(0): must be >= 1"},
		{pgstore.WithLeaseTTL(99 * time.Millisecond), "WithLeaseTTL(99ms): must be >= 100ms"},
		{pgstore.WithLeaderTTL(99 * time.Millisecond), "WithLeaderTTL(99ms): must be >= 100ms"},
		{pgstore.WithPollInterval(time.Microsecond), "WithPollInterval(1µs): must be >= 1ms"},
		{pgstore.WithJanitorInterval(0), "WithJanitorInterval(0s): must be >= 1ms"},
		{pgstore.WithDeadRetention(-time.Second), "WithDeadRetention(-1s): must be >= 0s"},
		{pgstore.WithWorkerID(""), `WithWorkerID(""): must be 1..200 bytes`},
	} {
		_, err := pgstore.New[P](pool, tc.opt)
		var oe *queue.OptionError
		require.ErrorAs(t, err, &oe)
		require.Equal(t, "queue: invalid option pgstore."+tc.want, err.Error())
	}
	// The bounds themselves are accepted.
	_, err := pgstore.New[P](pool, pgstore.WithMaxPayload(1), pgstore.WithLeaseTTL(100*time.Millisecond),
		pgstore.WithLeaderTTL(100*time.Millisecond), pgstore.WithPollInterval(time.Millisecond),
		pgstore.WithJanitorInterval(time.Millisecond), pgstore.WithDeadRetention(0), pgstore.WithWorkerID("w"))
	require.NoError(t, err)
}
