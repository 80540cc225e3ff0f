package pgstore_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storetest"
	"github.com/stretchr/testify/require"
)

// stmtTracer calls onEnd after each statement, alone or in a batch.
type stmtTracer struct{ onEnd func(sql string) }

type stmtKey struct{}

func (t stmtTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, stmtKey{}, d.SQL)
}

func (t stmtTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(stmtKey{}).(string)
	t.onEnd(sql)
}

func (t stmtTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (t stmtTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	t.onEnd(d.SQL)
}

func (t stmtTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// TestJobDueWhilePromotingStartsAtOnce: a job that becomes due while the
// promoter promotes the one before it is promoted at once, not after a
// wait. The fake clock moves on as the promotion statement ends, so the
// second job is due when the promoter reads the next due time; the
// promoter's timers are on the fake clock and its poll a minute away, so
// a wait of any length holds the job back for the whole test. (It waited
// 50 ms, or with LISTEN on for its own promotion's notification.)
func TestJobDueWhilePromotingStartsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	start := time.Now().Truncate(time.Second)
	clk := queuetest.NewFakeClock(start)
	var promoteSQL atomic.Pointer[string]
	var fired atomic.Bool
	looked := make(chan struct{}, 1) // the promoter read the next due time
	pool := newPool(t, pgURL(), 8, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = stmtTracer{onEnd: func(sql string) {
			p := promoteSQL.Load()
			switch {
			case p == nil:
			case strings.Contains(sql, "ORDER BY run_at LIMIT 1"):
				select {
				case looked <- struct{}{}:
				default:
				}
			// The promotion that the first job's timer started ends: the
			// second job falls due before the next due time is read.
			case sql == *p && clk.Now().Equal(start.Add(time.Second)) && fired.CompareAndSwap(false, true):
				clk.Advance(time.Second)
			}
		}}
	})
	// No LISTEN: the promotion's own notification would wake the
	// promoter too, a round trip later.
	s, err := pgstore.New[P](pool, pgstore.WithSchema(e.schema), pgstore.WithPollInterval(time.Minute),
		pgstore.WithJanitorInterval(time.Hour), pgstore.WithListen(false))
	if err != nil {
		t.Fatal(err)
	}
	_, promote, _ := pgstore.HotSQL(s)
	promoteSQL.Store(&promote)
	// Another process schedules the jobs before this one starts, so that
	// no wake-up of this one's is pending when the clock moves.
	producer := newStore[P](t, e)
	if err := producer.Init(storetest.Config("due-while-promoting", 100, clk, nil)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if _, err := producer.Add(bg, queue.Job[P]{Key: string(rune('0' + i)), RunAt: start.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := producer.Close(bg); err != nil {
		t.Fatal(err)
	}
	bind(t, s, "due-while-promoting", clk)
	<-looked // the promoter's first look: its timer is set for the first job
	clk.Advance(time.Second)
	for i := 1; i <= 2; i++ {
		j := claimWithin(t, s, 10*time.Second)
		if want := string(rune('0' + i)); j.Key != want {
			t.Fatalf("claimed job %q, want %q", j.Key, want)
		}
	}
	if !fired.Load() {
		t.Fatal("the clock did not move during a promotion; the test checked nothing")
	}
}

// TestJobPromotedAheadStartsAtItsDueTime: the promoter makes a job
// available shortly before its due time, no claim takes it early, and the
// fetcher claims it when it falls due, on a timer of its own (no poll, no
// notification: the poll is a minute away and LISTEN off).
func TestJobPromotedAheadStartsAtItsDueTime(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	start := time.Now().Truncate(time.Second)
	due := start.Add(time.Second)
	clk := queuetest.NewFakeClock(start)
	var promoteSQL atomic.Pointer[string]
	var store atomic.Pointer[pgstore.Store[P]]
	looked := make(chan struct{}, 1)   // the promoter read the next due time
	promoted := make(chan struct{}, 1) // a promotion statement ended
	claimed := make(chan struct{}, 1)  // a claim statement ended
	signal := func(c chan struct{}) {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	pool := newPool(t, pgURL(), 8, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = stmtTracer{onEnd: func(sql string) {
			p, st := promoteSQL.Load(), store.Load()
			switch {
			case p == nil || st == nil:
			case strings.Contains(sql, "ORDER BY run_at LIMIT 1"):
				signal(looked)
			case sql == *p:
				signal(promoted)
			case pgstore.IsClaimSQL(st, sql):
				signal(claimed)
			}
		}}
	})
	s, err := pgstore.New[P](pool, pgstore.WithSchema(e.schema), pgstore.WithPollInterval(time.Minute),
		pgstore.WithJanitorInterval(time.Hour), pgstore.WithListen(false))
	if err != nil {
		t.Fatal(err)
	}
	_, promote, _ := pgstore.HotSQL(s)
	promoteSQL.Store(&promote)
	store.Store(s)
	producer := newStore[P](t, e)
	if err := producer.Init(storetest.Config("promoted-ahead", 100, clk, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Add(bg, queue.Job[P]{Key: "k", RunAt: due}); err != nil {
		t.Fatal(err)
	}
	if err := producer.Close(bg); err != nil {
		t.Fatal(err)
	}
	bind(t, s, "promoted-ahead", clk)
	<-looked // the promoter's timer is set for the job
	select {
	case <-promoted: // the promotion at start, in the same batch
	default:
	}
	clk.Advance(time.Second - 10*time.Millisecond)
	<-promoted
	state := func() string {
		var st string
		if err := e.pool.QueryRow(bg, "SELECT state FROM "+e.schema+".queuekit_jobs WHERE queue = 'promoted-ahead'").Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := state(); st != "available" {
		t.Fatalf("10 ms before its due time the job is %s, want available (promoted ahead)", st)
	}
	got := make(chan queue.Job[P], 1)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	go func() {
		j, err := s.Claim(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- j
	}()
	<-claimed // the waiting worker's claim looked, 10 ms early
	if st := state(); st != "available" {
		t.Fatalf("10 ms before its due time the job is %s: claimed early", st)
	}
	clk.Advance(10 * time.Millisecond)
	if j := <-got; j.Key != "k" || clk.Now().Before(j.RunAt) {
		t.Fatalf("claimed %q due %v at %v", j.Key, j.RunAt, clk.Now())
	}
}

// TestPromotedAheadHandedToIdleProcess: a job one process promoted ahead
// of its due time, with no worker of its own waiting, is claimed at its
// due time by another process's idle worker, which the first process
// tells (it alone knows the due time; the other would otherwise find the
// job at its next poll, an hour away here).
func TestPromotedAheadHandedToIdleProcess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const name = "handed-on"
	start := time.Now().Truncate(time.Second)
	due := start.Add(time.Second)
	clk := queuetest.NewFakeClock(start)
	opts := []pgstore.Option{pgstore.WithSchema(e.schema), pgstore.WithPollInterval(time.Hour), pgstore.WithJanitorInterval(time.Hour)}

	producer := newStore[P](t, e)
	if err := producer.Init(storetest.Config(name, 100, clk, nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := producer.Add(bg, queue.Job[P]{Key: "k", RunAt: due}); err != nil {
		t.Fatal(err)
	}
	if err := producer.Close(bg); err != nil {
		t.Fatal(err)
	}
	state := func() string {
		var st string
		if err := e.pool.QueryRow(bg, "SELECT state FROM "+e.schema+".queuekit_jobs WHERE queue = $1", name).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}

	// The busy process: no Claim caller. Its promoter makes the job
	// available 10 ms before it is due.
	a, err := pgstore.New[P](newPool(t, pgURL(), 4), opts...)
	if err != nil {
		t.Fatal(err)
	}
	bind(t, a, name, clk)
	clk.Advance(time.Second - 10*time.Millisecond)
	require.Eventually(t, func() bool { return state() == "available" }, 10*time.Second, time.Millisecond,
		"the job promoted ahead by the busy process")

	// The idle process: its worker's claim finds nothing due yet.
	var store atomic.Pointer[pgstore.Store[P]]
	claimed := make(chan struct{}, 1)
	pool := newPool(t, pgURL(), 4, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = stmtTracer{onEnd: func(sql string) {
			if st := store.Load(); st != nil && pgstore.IsClaimSQL(st, sql) {
				select {
				case claimed <- struct{}{}:
				default:
				}
			}
		}}
	})
	b, err := pgstore.New[P](pool, opts...)
	if err != nil {
		t.Fatal(err)
	}
	store.Store(b)
	bind(t, b, name, clk)
	got := make(chan queue.Job[P], 1)
	ctx, cancel := context.WithTimeout(bg, 10*time.Second)
	defer cancel()
	go func() {
		j, err := b.Claim(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- j
	}()
	<-claimed
	// Its LISTEN connection's first wake-up (a look for what was sent
	// before it listened) is taken too.
	require.Eventually(t, func() bool { return pgstore.FetchSettled(b) }, 10*time.Second, time.Millisecond)
	if st := state(); st != "available" {
		t.Fatalf("before its due time the job is %s, want available", st)
	}

	// Due: the busy process hands it on.
	clk.Advance(10 * time.Millisecond)
	if j := <-got; j.Key != "k" || clk.Now().Before(j.RunAt) {
		t.Fatalf("the idle process claimed %q due %v at %v", j.Key, j.RunAt, clk.Now())
	}
}
