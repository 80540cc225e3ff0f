package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storetest/fleettest"
)

// The fleet concurrency tests run a queue with a per-target limit of 1 in
// this process and another in a helper process (TestFleetConcurrencyHelper,
// this test binary re-run), on one schema. Each job's handler records, in
// the database, that it runs: a counter of the target's running jobs,
// raised when the handler starts and lowered when it ends, keeps its peak,
// and a row per run names the job. A job with payload -1 blocks in the
// helper until the process is killed.

const slotsEnv = "PGSTORE_SLOTS"

// slotProbe is the schema's record of the runs.
func slotProbe(schema string) (setup, start, end, run string) {
	t := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	setup = `CREATE TABLE IF NOT EXISTS ` + t("probe") + ` (id int PRIMARY KEY, running int NOT NULL, peak int NOT NULL);
		INSERT INTO ` + t("probe") + ` VALUES (1, 0, 0) ON CONFLICT DO NOTHING;
		CREATE TABLE IF NOT EXISTS ` + t("runs") + ` (seq bigserial, payload int NOT NULL, proc text NOT NULL, parked int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`
	start = `UPDATE ` + t("probe") + ` SET running = running + 1, peak = greatest(peak, running + 1) WHERE id = 1`
	end = `UPDATE ` + t("probe") + ` SET running = running - 1 WHERE id = 1`
	run = `INSERT INTO ` + t("runs") + ` (payload, proc, parked) VALUES ($1, $2, $3)`
	return
}

// slotHandler records each run in the schema's probe, as proc, with the
// jobs of its target that parked reports; a run takes work.
func slotHandler(pool *pgxpool.Pool, schema, proc string, block bool, work time.Duration, parked func() int) queue.Handler[int] {
	_, start, end, run := slotProbe(schema)
	return func(ctx context.Context, j queue.Job[int]) error {
		bg := context.WithoutCancel(ctx)
		if _, err := pool.Exec(bg, start); err != nil {
			return err
		}
		if _, err := pool.Exec(bg, run, j.Payload, proc, parked()); err != nil {
			return err
		}
		if j.Payload == -1 && block {
			fmt.Println("RUNNING")
			<-make(chan struct{}) // until the process is killed
		}
		time.Sleep(work) // the job's work: long enough for two runs to overlap
		_, err := pool.Exec(bg, end)
		return err
	}
}

// TestFleetConcurrencyHelper is the helper process of the fleet
// concurrency tests; it does nothing in a normal test run. Its
// environment gives the schema, its name, workers, limit, lease and the
// work of a job.
func TestFleetConcurrencyHelper(t *testing.T) {
	schema := os.Getenv(slotsEnv)
	if schema == "" {
		t.Skip("helper process of the fleet concurrency tests")
	}
	name := os.Getenv(slotsEnv + "_NAME")
	workers, _ := strconv.Atoi(os.Getenv(slotsEnv + "_WORKERS"))
	limit, _ := strconv.Atoi(os.Getenv(slotsEnv + "_LIMIT"))
	lease, _ := time.ParseDuration(os.Getenv(slotsEnv + "_LEASE"))
	work, _ := time.ParseDuration(os.Getenv(slotsEnv + "_WORK"))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgURL())
	require.NoError(t, err)
	defer pool.Close()
	s, err := pgstore.New[int](pool, pgstore.WithSchema(schema), pgstore.WithWorkerID(name), pgstore.WithLeaseTTL(lease))
	require.NoError(t, err)
	var q *queue.Queue[int]
	q, err = queue.NewWithStore(s, slotHandler(pool, schema, name, true, work, fleettest.Parked(&q, "x")), fleettest.SlotOptions(workers, limit)...)
	require.NoError(t, err)
	_ = fleettest.RunHelper(t, q, nil) // until the parent closes stdin
}

// slotProc is a process of the fleet concurrency tests: its name, its
// workers, the target's limit, its lease and the work of a job.
type slotProc struct {
	name           string
	workers, limit int
	lease, work    time.Duration
}

// defaultSlotProc is the helper of the limit and crash tests: a limit of
// 1, jobs of 2 ms.
func defaultSlotProc(workers int, lease time.Duration) slotProc {
	return slotProc{name: "helper", workers: workers, limit: 1, lease: lease, work: 2 * time.Millisecond}
}

// startSlotProc starts a helper process as sp on e's schema.
func startSlotProc(t *testing.T, e *env, sp slotProc) *fleettest.Proc {
	t.Helper()
	return startHelperProc(t, "TestFleetConcurrencyHelper", slotsEnv+"="+e.schema, slotsEnv+"_NAME="+sp.name,
		fmt.Sprint(slotsEnv, "_WORKERS=", sp.workers), fmt.Sprint(slotsEnv, "_LIMIT=", sp.limit),
		fmt.Sprint(slotsEnv, "_LEASE=", sp.lease), fmt.Sprint(slotsEnv, "_WORK=", sp.work))
}

// slotQueue makes this process's queue on e's schema, as sp (named
// "parent"), started if start.
func slotQueue(t *testing.T, e *env, sp slotProc, start bool) *queue.Queue[int] {
	t.Helper()
	var q *queue.Queue[int]
	q, err := queue.NewWithStore(newStore[int](t, e, pgstore.WithWorkerID("parent"), pgstore.WithLeaseTTL(sp.lease)),
		slotHandler(e.pool, e.schema, "parent", false, sp.work, fleettest.Parked(&q, "x")), fleettest.SlotOptions(sp.workers, sp.limit)...)
	require.NoError(t, err)
	if start {
		require.NoError(t, q.Start(context.Background()))
	}
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	return q
}

func setupProbe(t *testing.T, e *env) {
	t.Helper()
	setup, _, _, _ := slotProbe(e.schema)
	_, err := e.pool.Exec(context.Background(), setup)
	require.NoError(t, err)
}

// awaitRuns waits, at most 60 s, until n runs are recorded.
func awaitRuns(t *testing.T, e *env, n int) {
	t.Helper()
	q := `SELECT count(*) FROM ` + pgx.Identifier{e.schema, "runs"}.Sanitize()
	require.Eventually(t, func() bool {
		var got int
		return e.pool.QueryRow(context.Background(), q).Scan(&got) == nil && got >= n
	}, 60*time.Second, pollTick, "%d runs", n)
}

// TestFleetConcurrencyLimit: with a limit of 1 on a target in each of two
// processes, and four workers in each, never more than one of the
// target's jobs runs at once across both, and every job runs once.
func TestFleetConcurrencyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	setupProbe(t, e)
	sp := defaultSlotProc(4, pgstore.DefaultLeaseTTL)
	p := startSlotProc(t, e, sp)
	q := slotQueue(t, e, sp, true)
	const n = 100
	for i := range n {
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
	}
	awaitRuns(t, e, n)
	var peak, running int
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT peak, running FROM `+pgx.Identifier{e.schema, "probe"}.Sanitize()).Scan(&peak, &running))
	require.Equal(t, 1, peak, "jobs of the target running at once, at most, across both processes")
	rows, err := e.pool.Query(context.Background(), `SELECT payload, count(*), string_agg(DISTINCT proc, ',') FROM `+
		pgx.Identifier{e.schema, "runs"}.Sanitize()+` GROUP BY payload ORDER BY payload`)
	require.NoError(t, err)
	byProc := map[string]int{}
	jobs := 0
	for rows.Next() {
		var payload, count int
		var procs string
		require.NoError(t, rows.Scan(&payload, &count, &procs))
		require.Equal(t, 1, count, "job %d runs once", payload)
		byProc[procs]++
		jobs++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, n, jobs, "every job ran")
	t.Logf("runs by process: %v", byProc)
	p.Stop(t)
}

// TestFleetConcurrencyCrash: a process killed (SIGKILL) while a job of
// the target runs holds its slot until the lease expires (2 s here); the
// other process's job of the target waits, parked, until then, and runs
// after.
func TestFleetConcurrencyCrash(t *testing.T) {
	t.Parallel()
	const lease = 2 * time.Second
	e := newEnv(t)
	setupProbe(t, e)
	sp := defaultSlotProc(1, lease)
	p := startSlotProc(t, e, sp)
	q := slotQueue(t, e, sp, false) // started once the helper runs the blocking job
	require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: -1}))
	p.Expect(t, func(l string) bool { return l == "RUNNING" }, "the helper to run the blocking job")
	require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: 1}))
	require.NoError(t, q.Start(context.Background()))
	require.Eventually(t, func() bool { st, _ := q.Target("x"); return st.Parked == 1 }, 10*time.Second, pollTick,
		"the job parked for the slot the helper holds")
	require.Zero(t, q.Stats().Done)
	killed := p.Kill(t)
	awaitRuns(t, e, 2) // the helper's run of -1, and 1 here
	waited := time.Since(killed)
	t.Logf("the parked job ran %s after the kill (lease %s)", waited.Round(time.Millisecond), lease)
	require.Eventually(t, func() bool { return q.Stats().Done >= 1 }, 10*time.Second, pollTick)
}

// TestFleetConcurrencyFair: three processes, a limit of 2 on one target,
// 4 workers each, and 90 jobs of 20 ms enqueued at once, which the three
// claim and park: the slots go round the processes that wait, so that
// none waits for the others' backlogs (before, a process holding a slot
// handed it to its own next parked job, and one that held none ran its
// jobs only once the others had run all of theirs). The line is FIFO by
// process and each process gets a slot in turn; a job waits for at most
// one slot per process per job parked before it in its own process. So
// each process runs, in the first half of the runs, at least 20 % of its
// own jobs (a fair share gives each about half; a starved process none),
// no process with jobs parked waits for more than fairMaxWait runs of
// the others in a row, and the limit holds.
func TestFleetConcurrencyFair(t *testing.T) {
	// A process in the line gets a slot once the (at most 2) processes
	// ahead of it have had one each; the runs the others hand on before
	// they learn that it waits come on top (3 to 9 seen in a row, in
	// all; a starved process waits for a holder's whole backlog).
	const fairMaxWait = 24
	t.Parallel()
	e := newEnv(t)
	setupProbe(t, e)
	sp := slotProc{name: "p1", workers: 4, limit: 2, lease: pgstore.DefaultLeaseTTL, work: 20 * time.Millisecond}
	p1 := startSlotProc(t, e, sp)
	sp.name = "p2"
	p2 := startSlotProc(t, e, sp)
	q := slotQueue(t, e, sp, true)
	const n = 90
	for i := range n {
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
	}
	awaitRuns(t, e, n)
	var peak int
	require.NoError(t, e.pool.QueryRow(context.Background(),
		`SELECT peak FROM `+pgx.Identifier{e.schema, "probe"}.Sanitize()).Scan(&peak))
	require.LessOrEqual(t, peak, 2, "jobs of the target running at once, at most, across the processes")
	rows, err := e.pool.Query(context.Background(), `SELECT payload, proc, parked FROM `+
		pgx.Identifier{e.schema, "runs"}.Sanitize()+` ORDER BY seq`)
	require.NoError(t, err)
	var order []fleettest.SlotRun
	ran := map[int]int{}
	for rows.Next() {
		var payload int
		var r fleettest.SlotRun
		require.NoError(t, rows.Scan(&payload, &r.Proc, &r.Parked))
		order = append(order, r)
		ran[payload]++
	}
	require.NoError(t, rows.Err())
	require.Len(t, ran, n, "every job ran")
	for payload, c := range ran {
		require.Equal(t, 1, c, "job %d runs once", payload)
	}
	var span time.Duration
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT max(at) - min(at) FROM `+
		pgx.Identifier{e.schema, "runs"}.Sanitize()).Scan(&span))
	t.Logf("the runs started over %s", span.Round(time.Millisecond))
	fleettest.CheckFairSlots(t, order, fairMaxWait)
	p1.Stop(t)
	p2.Stop(t)
}
