package pgstore_test

import (
	"context"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
)

// A payload type the codec cannot encode is refused by New, not by every
// Enqueue. New does no I/O: a pool that was never connected will do.
func TestNewRefusesUnencodablePayloadType(t *testing.T) {
	pool, err := pgxpool.New(t.Context(), "postgres://nobody@127.0.0.1:1/none")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pgstore.New[func()](pool)
	require.Error(t, err)
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "pgstore.New", oe.Option)
	assert.Contains(t, err.Error(), "payload type func()")
	_, err = pgstore.New[struct{ C chan int }](pool)
	assert.ErrorContains(t, err, "chan int")
	_, err = pgstore.New[*struct{ C chan int }](pool) // nil encodes: fine
	assert.NoError(t, err)
	_, err = pgstore.New[any](pool)
	assert.NoError(t, err)
}

// freePort returns a local TCP port where nothing listens.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	require.NoError(t, l.Close())
	return port
}

// withURL returns the test server's URL changed by f.
func withURL(t *testing.T, f func(u *url.URL)) string {
	u, err := url.Parse(pgURL())
	require.NoError(t, err)
	f(u)
	return u.String()
}

// A configuration that cannot work is an error from Start, at once, and
// is never retried; an outage (nothing listens) starts the store, which
// retries in the background as documented, without waiting 5 s first.
func TestStartTellsMisconfigurationFromOutage(t *testing.T) {
	requirePG(t)
	for _, tc := range []struct {
		name string
		url  string
		want string // in the error; "" for an outage
	}{
		{"unknown database", withURL(t, func(u *url.URL) { u.Path = "/queuekit_no_such_db" }), `database "queuekit_no_such_db" does not exist`},
		{"unknown user", withURL(t, func(u *url.URL) { u.User = url.User("queuekit_no_such_user") }), `"queuekit_no_such_user" does not exist`},
		{"unknown host", withURL(t, func(u *url.URL) { u.Host = "no-such-host.invalid:5432" }), "no such host"},
		{"nothing listens", withURL(t, func(u *url.URL) { u.Host = "127.0.0.1:" + freePort(t) }), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(tc.url)
			require.NoError(t, err)
			cfg.ConnConfig.ConnectTimeout = 2 * time.Second
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			s, err := pgstore.New[int](pool)
			require.NoError(t, err)
			q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil },
				queue.WithName("misconf"), queue.WithLogger(quietLogger()))
			require.NoError(t, err)
			began := time.Now()
			err = q.Start(t.Context())
			took := time.Since(began)
			defer q.Shutdown(context.Background())
			if tc.want == "" {
				require.NoError(t, err, "an outage starts the store, which retries")
				assert.Less(t, took, 2*time.Second, "no wait for a LISTEN connection that cannot come")
				assert.False(t, q.Stats().Store.Healthy)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "not an outage")
			assert.Less(t, took, 2*time.Second)
		})
	}
}
