package pgstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// asyncMark is in every statement that turns synchronous_commit off.
const asyncMark = "set_config('synchronous_commit', 'off', true)"

// sentUnit is what one round trip sent: a statement alone (its own
// implicit transaction, or a part of an explicit one), or a batch (one
// implicit transaction).
type sentUnit struct {
	batch bool
	sqls  []string
	rows  []int64 // rows affected, per statement
}

// unitTracer records every statement and batch of a pool, as sent.
type unitTracer struct {
	mu    sync.Mutex
	units []sentUnit
}

type unitKey struct{}

func (t *unitTracer) add(u sentUnit) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.units = append(t.units, u)
}

func (t *unitTracer) sent() []sentUnit {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]sentUnit(nil), t.units...)
}

func (t *unitTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, unitKey{}, d.SQL)
}

func (t *unitTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	sql, _ := ctx.Value(unitKey{}).(string)
	t.add(sentUnit{sqls: []string{sql}, rows: []int64{d.CommandTag.RowsAffected()}})
}

func (t *unitTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return context.WithValue(ctx, unitKey{}, &sentUnit{batch: true})
}

func (t *unitTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	if u, ok := ctx.Value(unitKey{}).(*sentUnit); ok {
		u.sqls = append(u.sqls, d.SQL)
		u.rows = append(u.rows, d.CommandTag.RowsAffected())
	}
}

func (t *unitTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchEndData) {
	if u, ok := ctx.Value(unitKey{}).(*sentUnit); ok {
		t.add(*u)
	}
}

// TestOnlyClaimOnlyStatementsCommitAsync: the only statement the store
// sends that commits without waiting for the WAL flush is the fetcher's
// claim, sent alone (its own transaction, which only claims: the batch
// holds the plan-cache setting before it, which writes nothing). The write
// batches, which end runs (Complete, Retry, Dead), claim nothing (the
// fetcher claims the workers' next jobs beside them) and never turn
// synchronous_commit off, nor do enqueues, alone, many or in the caller's
// transaction.
func TestOnlyClaimOnlyStatementsCommitAsync(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := &unitTracer{}
	pool := newPool(t, pgURL(), 8, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = tr })
	s, err := pgstore.New[P](pool, pgstore.WithSchema(e.schema))
	require.NoError(t, err)
	bind(t, s, "async", nil, func(c *storekit.Config) { c.Capacity = 1000 })
	completeSQL, _ := pgstore.OutcomeSQL(s)

	const n, workers = 200, 8
	jobs := make([]queue.Job[P], 0, n)
	for i := range n - 2 {
		jobs = append(jobs, queue.Job[P]{Payload: P{N: i}})
	}
	_, err = s.EnqueueMany(bg, jobs)
	require.NoError(t, err)
	_, err = s.Add(bg, queue.Job[P]{Payload: P{N: n - 2}})
	require.NoError(t, err)
	tx, err := pool.Begin(bg)
	require.NoError(t, err)
	_, err = s.EnqueueTx(bg, tx, queue.Job[P]{Payload: P{N: n - 1}})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(bg))

	// Workers claim and end every job: most complete, a few retry (due
	// later than the test lasts) or die.
	var (
		mu    sync.Mutex
		ended int
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				done := ended == n
				mu.Unlock()
				if done {
					return
				}
				cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
				j, err := s.Claim(cctx)
				ccancel()
				if err != nil {
					if ctx.Err() != nil {
						t.Errorf("Claim: %v", err)
						return
					}
					continue // another worker took the last jobs
				}
				switch j.Payload.N % 50 {
				case 1:
					err = s.Retry(ctx, j, time.Now().Add(time.Hour), errors.New("again"))
				case 2:
					err = s.Dead(ctx, j, errors.New("dead"))
				default:
					err = s.Complete(ctx, j)
				}
				if err != nil {
					t.Errorf("outcome of job %d: %v", j.ID, err)
					return
				}
				mu.Lock()
				ended++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, n, ended)

	var fetched, batchClaims int64
	for _, u := range tr.sent() {
		for i, sql := range u.sqls {
			if strings.Contains(sql, asyncMark) {
				if len(u.sqls) != 2 || u.sqls[0] != pgstore.GenericPlansSQL || !pgstore.IsClaimSQL(s, u.sqls[1]) {
					t.Fatalf("synchronous_commit turned off by a statement other than the fetcher's claim alone (batch %v):\n%s", u.batch, sql)
				}
				fetched += u.rows[i]
			}
		}
		if u.batch && slices.Contains(u.sqls, completeSQL) {
			for i, sql := range u.sqls {
				if pgstore.IsClaimSQL(s, sql) {
					batchClaims += u.rows[i]
				}
			}
		}
	}
	if fetched != n {
		t.Fatalf("%d jobs claimed by the fetcher's own statement, want all %d", fetched, n)
	}
	if batchClaims != 0 {
		t.Fatalf("%d jobs claimed in write batches with completions, want none", batchClaims)
	}
}

// TestClaimStatementsCommitAsServed: run on the server, the fetcher's
// claims (strict and weighted, from the claim hint or not) turn
// synchronous_commit off for their own transaction only, once they
// claimed a job; the completion leaves it on.
func TestClaimStatementsCommitAsServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	require.NoError(t, s.Init(storetest.Config("served", 100, nil, nil))) // not started: nothing claims but the test
	fetchSQL, fetchWeightedSQL := pgstore.FetchClaimSQL(s)
	fromSQL, weightedFromSQL := pgstore.ClaimFromSQL(s)
	completeSQL, _ := pgstore.OutcomeSQL(s)
	lease := time.Minute.Microseconds()
	strict := func() []any { return []any{"served", time.Now(), 1, "me", lease} }
	weighted := func() []any {
		return []any{"served", time.Now(), 1, "me", lease, []int32{0, 5, 10}, []int64{0, 0, 0}, []int64{1, 2, 6}, int32(0)}
	}
	start := time.Now().Add(-time.Hour)
	strictFrom := func() []any { return append(strict(), 0, start, int64(0)) }
	weightedFrom := func() []any { return append(weighted(), start, int64(0)) }

	conn, err := e.pool.Acquire(bg)
	require.NoError(t, err)
	defer conn.Release()
	setting := func() string {
		t.Helper()
		var v string
		require.NoError(t, conn.QueryRow(bg, "SELECT current_setting('synchronous_commit')").Scan(&v))
		return v
	}
	require.Equal(t, "on", setting())
	for _, c := range []struct {
		name, sql string
		args      func() []any
		want      string
	}{
		{"fetcher's claim", fetchSQL, strict, "off"},
		{"fetcher's weighted claim", fetchWeightedSQL, weighted, "off"},
		{"fetcher's claim from the hint", fromSQL, strictFrom, "off"},
		{"fetcher's weighted claim from the hint", weightedFromSQL, weightedFrom, "off"},
	} {
		a, err := s.Add(bg, queue.Job[P]{})
		require.NoError(t, err)
		tx, err := conn.Begin(bg)
		require.NoError(t, err)
		var id int64
		var attempt int32
		rows, err := tx.Query(bg, c.sql, c.args()...)
		require.NoError(t, err)
		got := 0
		for rows.Next() {
			vals, err := rows.Values()
			require.NoError(t, err)
			id, attempt = vals[0].(int64), vals[4].(int32)
			got++
		}
		require.NoError(t, rows.Err())
		require.Equal(t, 1, got, c.name)
		require.Equal(t, a.ID, id, c.name)
		require.Equal(t, c.want, setting(), "%s: synchronous_commit in its transaction", c.name)
		// The completion, in the same transaction as the claim, leaves
		// the setting as the claim made it.
		var done int64
		require.NoError(t, tx.QueryRow(bg, completeSQL, []int64{id}, []int32{attempt}, "me", time.Now()).Scan(&done))
		require.Equal(t, id, done)
		require.Equal(t, c.want, setting(), "%s: synchronous_commit after the completion", c.name)
		require.NoError(t, tx.Commit(bg))
		require.Equal(t, "on", setting(), "%s: synchronous_commit after its transaction", c.name)
	}
	// The completion alone commits sync.
	tx, err := conn.Begin(bg)
	require.NoError(t, err)
	_, err = tx.Exec(bg, completeSQL, []int64{0}, []int32{0}, "me", time.Now())
	require.NoError(t, err)
	require.Equal(t, "on", setting())
	require.NoError(t, tx.Rollback(bg))
}

// forgetClaim makes the server forget the claim of job id, as a
// PostgreSQL crash forgets a commit that did not wait for the WAL flush:
// the row is back as it was before, available at attempt.
func forgetClaim(t *testing.T, e *env, id int64, attempt int) {
	t.Helper()
	_, err := e.pool.Exec(bg, "UPDATE "+jobsTable(e)+
		" SET state = 'available', attempt = $2, lease_owner = NULL, lease_expires_at = NULL WHERE id = $1", id, attempt)
	require.NoError(t, err)
}

// jobRow is the part of a job's row the forgotten-claim tests check.
type jobRow struct {
	state, owner string
	attempt      int
}

func readJob(t *testing.T, e *env, id int64) jobRow {
	t.Helper()
	var r jobRow
	var owner *string
	require.NoError(t, e.pool.QueryRow(bg, "SELECT state, attempt, lease_owner FROM "+jobsTable(e)+" WHERE id = $1", id).
		Scan(&r.state, &r.attempt, &owner))
	if owner != nil {
		r.owner = *owner
	}
	return r
}

// TestForgottenClaim: a claim that a PostgreSQL crash forgot (the
// fetcher's claims commit without waiting for the WAL flush) leaves the
// job available at its earlier attempt. The run handed out meanwhile has
// lost its lease, as to a rescue: the heartbeat reports it lost and its
// outcomes return ErrLeaseLost, writing nothing; another process claims
// the job again and ends it once. (The first process neither listens nor
// polls within the test, so that only the second claims the job again.)
func TestForgottenClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newStore[P](t, e, pgstore.WithListen(false), pgstore.WithPollInterval(time.Minute), pgstore.WithJanitorInterval(time.Hour))
	b := newStore[P](t, e, pgstore.WithJanitorInterval(time.Hour))
	bind(t, a, "forgot", nil)
	added, err := a.Add(bg, queue.Job[P]{Key: "k", Payload: P{N: 1}})
	require.NoError(t, err)
	before := readJob(t, e, added.ID)
	j := claimWithin(t, a, 10*time.Second)
	require.Equal(t, added.ID, j.ID)
	require.Equal(t, "running", readJob(t, e, j.ID).state)
	forgetClaim(t, e, j.ID, before.attempt)

	lost, err := a.Heartbeat(bg, []int64{j.ID})
	require.NoError(t, err)
	require.Equal(t, []int64{j.ID}, lost, "the heartbeat of a run whose claim was forgotten")

	bind(t, b, "forgot", nil)
	j2 := claimWithin(t, b, 10*time.Second)
	require.Equal(t, j.ID, j2.ID)
	require.Equal(t, j.Attempt, j2.Attempt, "the forgotten claim's attempt is used again")
	lost, err = a.Heartbeat(bg, []int64{j.ID})
	require.NoError(t, err)
	require.Equal(t, []int64{j.ID}, lost, "the heartbeat of a run whose job another process claimed again")
	require.ErrorIs(t, a.Retry(bg, j, time.Now(), errors.New("late")), storekit.ErrLeaseLost)
	require.ErrorIs(t, a.Complete(bg, j), storekit.ErrLeaseLost)
	if r := readJob(t, e, j.ID); r.state != "running" || r.attempt != j.Attempt {
		t.Fatalf("after the refused outcomes the job is %+v, want still running at attempt %d", r, j.Attempt)
	}
	require.NoError(t, b.Complete(bg, j2))
	require.Equal(t, jobRow{state: "completed", attempt: j.Attempt}, readJob(t, e, j.ID))
}

// TestForgottenClaimClaimedAgainHere: a job whose claim was forgotten
// and that the same process claims again has two runs there under one
// lease (same owner, same attempt): the heartbeat keeps it, the first
// run to end writes the job's outcome and the other's is refused with
// ErrLeaseLost. The job ran twice, and ends once.
func TestForgottenClaimClaimedAgainHere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newStore[P](t, e, pgstore.WithListen(false), pgstore.WithPollInterval(time.Minute), pgstore.WithJanitorInterval(time.Hour))
	bind(t, a, "forgot", nil)
	added, err := a.Add(bg, queue.Job[P]{Payload: P{N: 1}})
	require.NoError(t, err)
	before := readJob(t, e, added.ID)
	j := claimWithin(t, a, 10*time.Second)
	forgetClaim(t, e, j.ID, before.attempt)
	lost, err := a.Heartbeat(bg, []int64{j.ID})
	require.NoError(t, err)
	require.Equal(t, []int64{j.ID}, lost)

	j2 := claimWithin(t, a, 10*time.Second)
	require.Equal(t, j.ID, j2.ID)
	require.Equal(t, j.Attempt, j2.Attempt)
	lost, err = a.Heartbeat(bg, []int64{j.ID})
	require.NoError(t, err)
	require.Empty(t, lost, "the job is this process's again")
	require.NoError(t, a.Complete(bg, j), "the first run to end")
	require.ErrorIs(t, a.Complete(bg, j2), storekit.ErrLeaseLost)
	require.Equal(t, jobRow{state: "completed", attempt: j.Attempt}, readJob(t, e, j.ID))
}

// TestClaimsUseGenericPlans: the fetcher's and the write batches' claims
// and outcomes run cached generic plans (sqlGenericPlans), never a plan
// made for each execution's parameters: planned each time, the weighted
// claim spent about ten times the strict claim's planning, a quarter of
// the database's CPU in a burn-down.
func TestClaimsUseGenericPlans(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	pool := newPool(t, pgURL(), 4)
	s, err := pgstore.New[P](pool, pgstore.WithSchema(e.schema))
	require.NoError(t, err)
	bind(t, s, "generic", nil, func(c *storekit.Config) { c.Priorities = queue.DefaultPriorities() })
	_, fetchWeightedSQL := pgstore.FetchClaimSQL(s)
	_, weightedFromSQL := pgstore.ClaimFromSQL(s)
	completeSQL, _ := pgstore.OutcomeSQL(s)

	// More rounds than PostgreSQL's five custom plans before it weighs a
	// generic one.
	for i := range 12 {
		jobs := make([]queue.Job[P], 4)
		for k := range jobs {
			jobs[k] = queue.Job[P]{Payload: P{N: i*10 + k}, Priority: []string{"high", "normal", "low", "normal"}[k]}
		}
		_, err := s.EnqueueMany(bg, jobs)
		require.NoError(t, err)
		for range jobs {
			ctx, cancel := context.WithTimeout(bg, 10*time.Second)
			j, err := s.Claim(ctx)
			cancel()
			require.NoError(t, err)
			require.NoError(t, s.Complete(bg, j))
		}
	}

	plans := map[string][2]int64{} // statement → generic, custom plans, over the pool's connections
	for _, c := range pool.AcquireAllIdle(bg) {
		rows, err := c.Query(bg, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements
			WHERE statement = ANY ($1::text[])`, []string{fetchWeightedSQL, weightedFromSQL, completeSQL})
		require.NoError(t, err)
		var (
			sql             string
			generic, custom int64
		)
		_, err = pgx.ForEachRow(rows, []any{&sql, &generic, &custom}, func() error {
			p := plans[sql]
			plans[sql] = [2]int64{p[0] + generic, p[1] + custom}
			return nil
		})
		c.Release()
		require.NoError(t, err)
	}
	for name, sql := range map[string]string{"fetcher's weighted claim": fetchWeightedSQL,
		"fetcher's weighted claim from the hint": weightedFromSQL, "completion": completeSQL} {
		p, ok := plans[sql]
		switch {
		case !ok && sql == weightedFromSQL:
			t.Logf("%s: not used", name) // the hint holds only between wake-ups
		case !ok:
			t.Errorf("%s: not prepared on any idle connection", name)
		case p[1] != 0 || p[0] == 0:
			t.Errorf("%s: %d generic and %d custom plans, want generic only", name, p[0], p[1])
		default:
			t.Logf("%s: %d generic plans", name, p[0])
		}
	}
}
