package pgstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// Multi-process tests re-run this test binary as a worker process:
// TestHelperProcess does the worker's part when PGSTORE_HELPER is set.

// child is a worker process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	mu     sync.Mutex
	lines  []string
	exited chan struct{}
}

// startChild starts a worker process: mode is "block" (handlers never
// finish), "record" (handlers record completions) or "lead" (no jobs; it
// takes part in leader election).
func startChild(t *testing.T, e *env, mode, id string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), "PGSTORE_HELPER="+mode, "PGSTORE_SCHEMA="+e.schema, "PGSTORE_ID="+id, "QUEUE_PG_URL="+pgURL())
	cmd.Env = append(cmd.Env, env...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
		}
		_ = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("child %s output:\n%s", id, c.output())
		}
	})
	return c
}

func (c *child) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.exited
}

// stop asks the child to stop (by closing its stdin) and waits.
func (c *child) stop(t *testing.T) {
	t.Helper()
	c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("child did not stop")
	}
	if code := c.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("child exited %d:\n%s", code, c.output())
	}
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// TestHelperProcess is a worker process for the multi-process tests; it
// does nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("PGSTORE_HELPER")
	if mode == "" {
		t.Skip("helper process for the multi-process tests")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pgURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema, id := os.Getenv("PGSTORE_SCHEMA"), os.Getenv("PGSTORE_ID")
	if mode == "admit" {
		admitChild(t, pool, schema, id)
		return
	}
	s, err := pgstore.New[int](pool, pgstore.WithSchema(schema), pgstore.WithWorkerID(id),
		pgstore.WithLeaseTTL(envDuration("PGSTORE_LEASE", 2*time.Second)),
		pgstore.WithLeaderTTL(envDuration("PGSTORE_LEADER", 2*time.Second)),
		pgstore.WithJanitorInterval(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var dups atomic.Int64
	handler := func(ctx context.Context, j queue.Job[int]) error {
		switch mode {
		case "block":
			if _, err := pool.Exec(ctx, "INSERT INTO "+schema+".started (job_id, worker) VALUES ($1, $2)", j.ID, id); err != nil {
				return err
			}
			<-ctx.Done() // never finishes: the process is killed mid-job
			return ctx.Err()
		case "periodic":
			_, err := pool.Exec(ctx, "INSERT INTO "+schema+".periodic_runs (key, attempt, worker) VALUES ($1, $2, $3)", j.Key, j.Attempt, id)
			return err
		default:
			_, err := pool.Exec(ctx, "INSERT INTO "+schema+".completions (job_id, worker) VALUES ($1, $2)", j.ID, id)
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" {
				dups.Add(1)
				fmt.Printf("DUPLICATE job %d\n", j.ID)
				return nil
			}
			return err
		}
	}
	workers := 8
	if mode == "block" {
		workers = 4
	}
	logger := quietLogger()
	if mode == "periodic" { // its warnings (a missed period) show when the test fails
		logger = slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	q, err := queue.NewWithStore(s, handler, queue.WithName("proc"), queue.WithWorkers(workers, workers), queue.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	if mode == "periodic" {
		if err := q.Periodic("tick", queue.Every(time.Second), queue.Job[int]{}, queue.PeriodicOptions{CatchUp: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	fmt.Println("READY")
	_, _ = io.Copy(io.Discard, os.Stdin) // run until the parent closes stdin (or kills us)
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := q.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("STOPPED dups=%d done=%d\n", dups.Load(), q.Stats().Done)
}

func createTables(t *testing.T, e *env) {
	t.Helper()
	for _, sql := range []string{
		"CREATE TABLE " + e.schema + ".started (job_id bigint NOT NULL, worker text NOT NULL)",
		"CREATE TABLE " + e.schema + ".completions (job_id bigint PRIMARY KEY, worker text NOT NULL)",
	} {
		if _, err := e.pool.Exec(bg, sql); err != nil {
			t.Fatal(err)
		}
	}
}

// producer returns a bound store for enqueueing into queue "proc".
func producer(t *testing.T, e *env) *pgstore.Store[int] {
	t.Helper()
	s := newStore[int](t, e, pgstore.WithWorkerID("producer"))
	if err := s.Init(storekit.Config{Name: "proc", Priorities: queue.DefaultPriorities(), DefaultPriority: "normal",
		Capacity: 1 << 30, RequeueDelay: time.Second, Coalesce: true, MaxAttempts: 3, Clock: nil,
		Logger: quietLogger(), Report: func(queue.Event) {}}); err != nil {
		t.Fatal(err)
	}
	return s
}

func enqueue(t *testing.T, s *pgstore.Store[int], n int) {
	t.Helper()
	for i := 0; i < n; i += 1000 {
		batch := make([]queue.Job[int], 0, 1000)
		for j := i; j < min(n, i+1000); j++ {
			batch = append(batch, queue.Job[int]{Payload: j})
		}
		if _, err := s.EnqueueMany(bg, batch); err != nil {
			t.Fatal(err)
		}
	}
}

// TestKilledWorkerJobsRerun: a worker process SIGKILLed mid-job leaves
// its jobs leased; another process rescues them when the lease expires and
// runs them. No job is lost.
func TestKilledWorkerJobsRerun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createTables(t, e)
	const n, lease = 40, 2 * time.Second
	enqueue(t, producer(t, e), n)
	victim := startChild(t, e, "block", "victim", "PGSTORE_LEASE="+lease.String(), "PGSTORE_LEADER=1s")
	// The rows are written by the other process: polled.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, count(c, e.pool, "SELECT count(*) FROM "+e.schema+".started"), 4)
	}, 20*time.Second, pollTick, "the victim to start 4 jobs")
	victim.kill(t)
	killed := time.Now()
	var started []int64
	rows, _ := e.pool.Query(bg, "SELECT job_id FROM "+e.schema+".started")
	started, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}

	// The survivor, in this process. It runs every job (the victim
	// finished none): EventDone, reported once the outcome is written,
	// says when.
	var done queuetest.Counter
	s := newStore[int](t, e, pgstore.WithWorkerID("survivor"), pgstore.WithLeaseTTL(lease),
		pgstore.WithLeaderTTL(time.Second), pgstore.WithJanitorInterval(100*time.Millisecond))
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[int]) error {
		_, err := e.pool.Exec(ctx, "INSERT INTO "+e.schema+".completions (job_id, worker) VALUES ($1, 'survivor')", j.ID)
		return err
	}, queue.WithName("proc"), queue.WithWorkers(4, 4), queue.WithLogger(quietLogger()), queue.WithObserver(func(ev queue.Event) {
		if ev.Kind == queue.EventDone && ev.Err == nil {
			done.Add()
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(bg); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(bg)
	queuetest.Await(t, done.Reached(n), 30*time.Second, "every job done by the survivor")
	recovered := time.Since(killed)
	if c := count(t, e.pool, "SELECT count(*) FROM "+jobsTable(e)+" WHERE queue = 'proc' AND state = 'completed'"); c != n {
		t.Fatalf("%d jobs completed in the table, want %d", c, n)
	}
	if c := count(t, e.pool, "SELECT count(*) FROM "+e.schema+".completions"); c != n {
		t.Fatalf("%d jobs recorded completions, want %d", c, n)
	}
	for _, id := range started {
		var attempt int
		var state string
		if err := e.pool.QueryRow(bg, "SELECT attempt, state FROM "+jobsTable(e)+" WHERE id = $1", id).Scan(&attempt, &state); err != nil {
			t.Fatal(err)
		}
		if attempt != 2 || state != "completed" {
			t.Fatalf("killed job %d: attempt %d, state %s; want re-run to completion at attempt 2", id, attempt, state)
		}
	}
	t.Logf("%d jobs killed mid-run; all %d jobs completed %s after the kill (lease %s)", len(started), n, recovered.Round(time.Millisecond), lease)
	if recovered > lease+2*time.Second {
		t.Fatalf("recovery took %s, want within lease + 2s", recovered)
	}
}

// TestTwoProcessesExactlyOnce: two worker processes share one queue of
// 10 000 jobs; each job completes exactly once (the completions table has
// a unique constraint, and duplicates are counted).
func TestTwoProcessesExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createTables(t, e)
	n := 10000
	if testing.Short() {
		n = 2000
	}
	start := time.Now()
	enqueue(t, producer(t, e), n)
	a := startChild(t, e, "record", "a", "PGSTORE_LEASE=30s", "PGSTORE_LEADER=10s")
	b := startChild(t, e, "record", "b", "PGSTORE_LEASE=30s", "PGSTORE_LEADER=10s")
	// The rows are written by the worker processes: polled.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, n, count(c, e.pool, "SELECT count(*) FROM "+e.schema+".completions"))
	}, 90*time.Second, pollTick, "all jobs completed")
	took := time.Since(start)
	a.stop(t)
	b.stop(t)
	for _, c := range []*child{a, b} {
		if out := c.output(); strings.Contains(out, "DUPLICATE") || !strings.Contains(out, "dups=0") {
			t.Fatalf("a job ran twice:\n%s", out)
		}
	}
	if c := count(t, e.pool, "SELECT count(*) FROM "+jobsTable(e)+" WHERE state = 'completed'"); c != n {
		t.Fatalf("%d completed in the jobs table, want %d", c, n)
	}
	var ca, cb int
	ca = count(t, e.pool, "SELECT count(*) FROM "+e.schema+".completions WHERE worker = 'a'")
	cb = count(t, e.pool, "SELECT count(*) FROM "+e.schema+".completions WHERE worker = 'b'")
	if ca == 0 || cb == 0 {
		t.Fatalf("one process did all the work: a %d, b %d", ca, cb)
	}
	t.Logf("%d jobs, each completed once: a %d, b %d, in %s (%.0f jobs/s with -race and a DB insert per job)",
		n, ca, cb, took.Round(time.Millisecond), float64(n)/took.Seconds())
}

// TestLeaderKilledFailover: the leader process is SIGKILLed; the standby
// leads within TTL + 1 s.
func TestLeaderKilledFailover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createTables(t, e)
	const ttl = 2 * time.Second
	old := startChild(t, e, "lead", "old-leader", "PGSTORE_LEADER="+ttl.String())
	leaderRow := func() string {
		var id string
		_ = e.pool.QueryRow(bg, "SELECT leader_id FROM "+e.schema+".queuekit_leaders WHERE queue = 'proc' AND expires_at > now()").Scan(&id)
		return id
	}
	// Leadership is a row in the database that expires in database time,
	// taken and renewed by other processes: polled.
	require.Eventually(t, func() bool { return leaderRow() == "old-leader" }, 20*time.Second, pollTick, "the child to lead")
	standby := newStore[int](t, e, pgstore.WithWorkerID("standby"), pgstore.WithLeaderTTL(ttl))
	bind(t, standby, "proc", nil)
	// Once the leader has renewed its row twice, the standby (which tries
	// every TTL/10) has tried and lost.
	var exp0 time.Time
	renewals := 0
	require.Eventually(t, func() bool {
		var exp time.Time
		_ = e.pool.QueryRow(bg, "SELECT expires_at FROM "+e.schema+".queuekit_leaders WHERE queue = 'proc'").Scan(&exp)
		if exp.After(exp0) {
			exp0 = exp
			renewals++
		}
		return renewals > 2
	}, 2*ttl, pollTick, "the leader to renew twice")
	if leaderRow() != "old-leader" || standby.Leader() {
		t.Fatal("standby leads while the leader is alive")
	}
	old.kill(t)
	killed := time.Now()
	require.Eventually(t, standby.Leader, 2*ttl+2*time.Second, pollTick, "the standby to lead")
	took := time.Since(killed)
	t.Logf("leader killed; standby led %s later (TTL %s)", took.Round(time.Millisecond), ttl)
	if took > ttl+time.Second {
		t.Fatalf("failover took %s, want within TTL + 1s = %s", took, ttl+time.Second)
	}
	if st, _ := standby.Stats(bg); !st.Leader {
		t.Fatal("Stats.Leader false on the new leader")
	}
}

// TestConnectionCut: every connection of a working queue is cut, twice,
// through a proxy; the workers reconnect and every job completes.
func TestConnectionCut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createTables(t, e)
	const n, lease = 400, 2 * time.Second
	enqueue(t, producer(t, e), n)
	p := storetest.NewProxy(t, pgHostPort(t))
	s, err := pgstore.New[int](proxiedPool(t, p, 6), pgstore.WithSchema(e.schema), pgstore.WithLeaseTTL(lease),
		pgstore.WithLeaderTTL(time.Second), pgstore.WithJanitorInterval(100*time.Millisecond), pgstore.WithPollInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	var recorded queuetest.Counter // runs whose completion is in the table
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[int]) error {
		runs.Add(1)
		work(ctx, 2*time.Millisecond) // some work, so that cuts land mid-job
		// Recorded over a direct connection: the cut is the store's problem.
		_, err := e.pool.Exec(context.WithoutCancel(ctx), "INSERT INTO "+e.schema+".completions (job_id, worker) VALUES ($1, 'w') ON CONFLICT DO NOTHING", j.ID)
		if err == nil {
			recorded.Add()
		}
		return err
	}, queue.WithName("proc"), queue.WithWorkers(6, 6), queue.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(bg); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(bg)
	completions := func() int { return count(t, e.pool, "SELECT count(*) FROM "+e.schema+".completions") }
	queuetest.Await(t, recorded.Reached(100), 20*time.Second, "100 completions")
	cut := p.Cut()
	queuetest.Await(t, recorded.Reached(200), 20*time.Second, "200 completions")
	cut += p.Cut()
	if cut < 2 {
		t.Fatalf("cut %d connections; the test needs the store's connections open", cut)
	}
	// An outcome lost in a cut is made good only when the job's lease
	// expires in the table and it runs again: the table is the truth, and
	// polled.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, n, count(c, e.pool, "SELECT count(*) FROM "+jobsTable(e)+" WHERE state = 'completed'"))
	}, 30*time.Second, pollTick, "every job completed in the table")
	if c := completions(); c != n {
		t.Fatalf("%d distinct jobs ran, want %d", c, n)
	}
	t.Logf("2 cuts (%d connections): %d jobs, %d runs (%d re-runs after lost outcomes)", cut, n, runs.Load(), runs.Load()-n)
}

// TestKilledLeaderAndWorkerJobsRerun: the leader process and a worker
// process, each running jobs, are SIGKILLed together. The surviving
// process, which does not lead (the dead leader's row holds for up to its
// 10 s TTL), rescues their jobs when their leases expire and runs them
// within the lease + 2 s, with the default janitor interval: rescue does
// not wait for a new leader. (It used to: only the leader rescued, and
// the jobs waited up to a leader TTL more.)
func TestKilledLeaderAndWorkerJobsRerun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	createTables(t, e)
	const n, lease, leaderTTL = 8, 2 * time.Second, 10 * time.Second
	enqueue(t, producer(t, e), n)
	startedBy := func(c *assert.CollectT, worker string) int {
		return count(c, e.pool, "SELECT count(*) FROM "+e.schema+".started WHERE worker = $1", worker)
	}
	// The rows are written by the other processes, and leadership lives
	// in the database: polled.
	leader := startChild(t, e, "block", "leader", "PGSTORE_LEASE="+lease.String(), "PGSTORE_LEADER="+leaderTTL.String())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var id string
		_ = e.pool.QueryRow(bg, "SELECT leader_id FROM "+e.schema+".queuekit_leaders WHERE queue = 'proc'").Scan(&id)
		assert.Equal(c, "leader", id)
		assert.Equal(c, 4, startedBy(c, "leader"))
	}, 20*time.Second, pollTick, "the first child to lead and start 4 jobs")
	worker := startChild(t, e, "block", "worker", "PGSTORE_LEASE="+lease.String(), "PGSTORE_LEADER="+leaderTTL.String())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 4, startedBy(c, "worker"))
	}, 20*time.Second, pollTick, "the second child to start 4 jobs")

	// The survivor, in this process, with the default janitor interval.
	// It finds no job until the others' leases expire.
	var (
		mu       sync.Mutex
		rerunAt  = map[int64]time.Time{}
		whileLed []int64 // jobs rerun while the survivor led
		reran    queuetest.Counter
	)
	s := newStore[int](t, e, pgstore.WithWorkerID("survivor"), pgstore.WithLeaseTTL(lease), pgstore.WithLeaderTTL(leaderTTL))
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[int]) error {
		mu.Lock()
		if _, ok := rerunAt[j.ID]; !ok {
			rerunAt[j.ID] = time.Now()
			if s.Leader() {
				whileLed = append(whileLed, j.ID)
			}
			reran.Add()
		}
		mu.Unlock()
		_, err := e.pool.Exec(ctx, "INSERT INTO "+e.schema+".completions (job_id, worker) VALUES ($1, 'survivor')", j.ID)
		return err
	}, queue.WithName("proc"), queue.WithWorkers(4, 4), queue.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(bg); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(bg)

	for _, c := range []*child{leader, worker} {
		if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	killed := time.Now()
	<-leader.exited
	<-worker.exited
	queuetest.Await(t, reran.Reached(n), lease+leaderTTL+20*time.Second, "every killed job to run again")
	mu.Lock()
	defer mu.Unlock()
	var last time.Duration
	for _, at := range rerunAt {
		last = max(last, at.Sub(killed))
	}
	t.Logf("leader and worker killed with %d jobs running; all ran again %s after the kill (lease %s, leader TTL %s, janitor %s)",
		n, last.Round(time.Millisecond), lease, leaderTTL, pgstore.DefaultJanitorInterval)
	if len(whileLed) > 0 {
		t.Errorf("jobs %v ran again only once the survivor led", whileLed)
	}
	if last > lease+2*time.Second {
		t.Fatalf("the killed jobs ran again %s after the kill, want within lease + 2s = %s", last, lease+2*time.Second)
	}
}
