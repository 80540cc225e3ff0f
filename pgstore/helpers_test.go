package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// The tests run against a real PostgreSQL server: QUEUE_PG_URL, or a local
// one with database test. Without a server they skip, except in CI
// (CI=true), where they fail.
const defaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func pgURL() string {
	if u := os.Getenv("QUEUE_PG_URL"); u != "" {
		return u
	}
	return defaultURL
}

var (
	reachOnce sync.Once
	reachErr  error
)

// requirePG skips (or, in CI, fails) the test when the server is not
// reachable.
func requirePG(tb testing.TB) {
	tb.Helper()
	reachOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgURL())
		if err != nil {
			reachErr = err
			return
		}
		defer conn.Close(ctx)
		reachErr = conn.Ping(ctx)
	})
	if reachErr == nil {
		return
	}
	msg := fmt.Sprintf("PostgreSQL not reachable at %s: %v\n"+
		"The pgstore tests need a real server: start one (e.g. database \"test\" on 127.0.0.1:5432, user postgres)\n"+
		"or point QUEUE_PG_URL at one, then run: cd pgstore && go test -race ./...", pgURL(), reachErr)
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

// newPool returns a pool on the test server, closed when the test ends.
// Keep maxConns small: many tests run at once against one server. mutate
// may change the configuration (a tracer, say).
func newPool(tb testing.TB, url string, maxConns int32, mutate ...func(*pgxpool.Config)) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("parse %s: %v", url, err)
	}
	cfg.MaxConns = maxConns
	for _, m := range mutate {
		m(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatalf("pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// newSchema creates and migrates a schema of its own for the test and
// drops it when the test ends.
func newSchema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.ToLower(tb.Name())
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)
	if len(name) > 40 {
		name = name[len(name)-40:]
	}
	schema := "qt_" + hex.EncodeToString(b[:]) + "_" + name
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(schema)); err != nil {
		tb.Fatalf("Migrate: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Logf("drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// env is one test's database: a pool and a migrated schema.
type env struct {
	pool   *pgxpool.Pool
	schema string
}

func newEnv(tb testing.TB) *env {
	tb.Helper()
	requirePG(tb)
	pool := newPool(tb, pgURL(), 8)
	return &env{pool: pool, schema: newSchema(tb, pool)}
}

// store returns a store in the env's schema with opts after the schema.
func newStore[T any](tb testing.TB, e *env, opts ...pgstore.Option) *pgstore.Store[T] {
	tb.Helper()
	s, err := pgstore.New[T](e.pool, append([]pgstore.Option{pgstore.WithSchema(e.schema)}, opts...)...)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return s
}

// bind initialises s as the suite's stores are, with a fake clock and an
// event log, starts it, and closes it when the test ends.
func bind[T any](tb testing.TB, s *pgstore.Store[T], name string, clk queue.Clock, mutate ...func(*storekit.Config)) *storetest.EventLog {
	tb.Helper()
	log := &storetest.EventLog{}
	cfg := storetest.Config(name, 100, clk, log.Report)
	for _, m := range mutate {
		m(&cfg)
	}
	if err := s.Init(cfg); err != nil {
		tb.Fatalf("Init: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return log
}

// Polling: a condition that lives in the server (rows written by another
// process, leases and leadership that expire in database time) has no
// event to wait on; the tests poll for it with require.Eventually(WithT)
// at pollTick.
const pollTick = 10 * time.Millisecond

// count runs a count query. tb may be a *assert.CollectT inside
// require.EventuallyWithT: a failed query then fails that try only.
func count(tb require.TestingT, pool *pgxpool.Pool, sql string, args ...any) int {
	if h, ok := tb.(interface{ Helper() }); ok {
		h.Helper()
	}
	var n int
	err := pool.QueryRow(context.Background(), sql, args...).Scan(&n)
	require.NoError(tb, err, sql)
	return n
}

// queryTracer calls onEnd when a statement of the pool ends (alone or in
// a batch), so that a
// test can wait for the store's own statements (LISTEN acknowledged, a
// claim that found no job) instead of polling for their effect.
type queryTracer struct {
	onEnd func(sql string, tag pgconn.CommandTag, err error)
}

type tracedSQL struct{}

func (t queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, tracedSQL{}, data.SQL)
}

func (t queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(tracedSQL{}).(string)
	t.onEnd(sql, data.CommandTag, data.Err)
}

func (t queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

// TraceBatchQuery reports each statement of a batch (a write batch's
// claim, a promotion) as it ends.
func (t queryTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	t.onEnd(data.SQL, data.CommandTag, data.Err)
}

func (t queryTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// tracedStore returns a store on a pool of its own, polling once a
// minute (then opts), that calls onEnd after each of its statements with the
// statement, whether it is one of the store's claim statements (a write
// batch's or the fetcher's; false until New returns) and the statement's
// outcome.
func tracedStore(t *testing.T, e *env, onEnd func(sql string, claim bool, tag pgconn.CommandTag, err error), opts ...pgstore.Option) *pgstore.Store[P] {
	t.Helper()
	var store atomic.Pointer[pgstore.Store[P]]
	pool := newPool(t, pgURL(), 8, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = queryTracer{onEnd: func(sql string, tag pgconn.CommandTag, err error) {
			s := store.Load()
			onEnd(sql, s != nil && pgstore.IsClaimSQL(s, sql), tag, err)
		}}
	})
	s, err := pgstore.New[P](pool, append([]pgstore.Option{pgstore.WithSchema(e.schema), pgstore.WithPollInterval(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	store.Store(s)
	return s
}

// work simulates a handler's work of d; it ends early when ctx does.
func work(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// claimWithin claims a job from s, failing tb if none comes within d.
func claimWithin[T any](tb testing.TB, s *pgstore.Store[T], d time.Duration) queue.Job[T] {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	j, err := s.Claim(ctx)
	if err != nil {
		tb.Fatalf("Claim: %v", err)
	}
	return j
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var bg = context.Background()
