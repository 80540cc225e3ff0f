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
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/fleetflow"
	"github.com/queuekit/queue/pgstore"
	"github.com/stretchr/testify/require"
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
		CREATE TABLE IF NOT EXISTS ` + t("runs") + ` (payload int NOT NULL, proc text NOT NULL)`
	start = `UPDATE ` + t("probe") + ` SET running = running + 1, peak = greatest(peak, running + 1) WHERE id = 1`
	end = `UPDATE ` + t("probe") + ` SET running = running - 1 WHERE id = 1`
	run = `INSERT INTO ` + t("runs") + ` (payload, proc) VALUES ($1, $2)`
	return
}

// slotHandler records each run in the schema's probe, as proc.
func slotHandler(pool *pgxpool.Pool, schema, proc string, block bool) queue.Handler[int] {
	_, start, end, run := slotProbe(schema)
	return func(ctx context.Context, j queue.Job[int]) error {
		bg := context.WithoutCancel(ctx)
		if _, err := pool.Exec(bg, start); err != nil {
			return err
		}
		if _, err := pool.Exec(bg, run, j.Payload, proc); err != nil {
			return err
		}
		if j.Payload == -1 && block {
			fmt.Println("RUNNING")
			<-make(chan struct{}) // until the process is killed
		}
		time.Sleep(2 * time.Millisecond) // the job's work: long enough for two runs to overlap
		_, err := pool.Exec(bg, end)
		return err
	}
}

// TestFleetConcurrencyHelper is the helper process of the fleet
// concurrency tests; it does nothing in a normal test run. Its
// environment gives the schema, its workers and its lease.
func TestFleetConcurrencyHelper(t *testing.T) {
	schema := os.Getenv(slotsEnv)
	if schema == "" {
		t.Skip("helper process of the fleet concurrency tests")
	}
	workers, _ := strconv.Atoi(os.Getenv(slotsEnv + "_WORKERS"))
	lease, _ := time.ParseDuration(os.Getenv(slotsEnv + "_LEASE"))
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgURL())
	require.NoError(t, err)
	defer pool.Close()
	s, err := pgstore.New[int](pool, pgstore.WithSchema(schema), pgstore.WithWorkerID("helper"), pgstore.WithLeaseTTL(lease))
	require.NoError(t, err)
	q, err := queue.NewWithStore(s, slotHandler(pool, schema, "helper", true), fleetflow.SlotOptions(workers)...)
	require.NoError(t, err)
	_ = fleetflow.RunHelper(t, q, nil) // until the parent closes stdin
}

// startSlotProc starts the helper process on e's schema.
func startSlotProc(t *testing.T, e *env, workers int, lease time.Duration) *fleetflow.Proc {
	t.Helper()
	return startHelperProc(t, "TestFleetConcurrencyHelper", slotsEnv+"="+e.schema,
		fmt.Sprint(slotsEnv, "_WORKERS=", workers), fmt.Sprint(slotsEnv, "_LEASE=", lease))
}

// slotQueue makes this process's queue on e's schema, started if start.
func slotQueue(t *testing.T, e *env, workers int, lease time.Duration, start bool) *queue.Queue[int] {
	t.Helper()
	q, err := queue.NewWithStore(newStore[int](t, e, pgstore.WithWorkerID("parent"), pgstore.WithLeaseTTL(lease)),
		slotHandler(e.pool, e.schema, "parent", false), fleetflow.SlotOptions(workers)...)
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
	p := startSlotProc(t, e, 4, pgstore.DefaultLeaseTTL)
	q := slotQueue(t, e, 4, pgstore.DefaultLeaseTTL, true)
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
	p := startSlotProc(t, e, 1, lease)
	q := slotQueue(t, e, 1, lease, false) // started once the helper runs the blocking job
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
