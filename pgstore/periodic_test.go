package pgstore_test

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPeriodicTwoProcessesAcrossKill: two processes run the same
// one-second schedule on one queue; one is SIGKILLed and replaced. Every
// period from the first run to the last runs, and none is enqueued twice
// (a rescued run of a killed process comes back with the next attempt).
// The processes catch up (PeriodicOptions.CatchUp), so that a loop woken
// late on a loaded machine still runs its period, and a restart's catch-up
// meets the unique window of a period already run.
func TestPeriodicTwoProcessesAcrossKill(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.pool.Exec(bg, "CREATE TABLE "+e.schema+".periodic_runs (key text NOT NULL, attempt int NOT NULL, worker text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	runs := func() int { return count(t, e.pool, "SELECT count(DISTINCT key) FROM "+e.schema+".periodic_runs") }
	// The rows are written by the other processes: polled.
	waitRuns := func(n int, what string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.GreaterOrEqual(c, count(c, e.pool, "SELECT count(DISTINCT key) FROM "+e.schema+".periodic_runs"), n)
		}, 30*time.Second, pollTick, what)
	}
	env := []string{"PGSTORE_LEASE=2s", "PGSTORE_LEADER=1s"}
	a := startChild(t, e, "periodic", "a", env...)
	b := startChild(t, e, "periodic", "b", env...)
	waitRuns(3, "three periods run by the pair")
	a.kill(t)
	waitRuns(runs()+3, "three periods after the kill")
	a2 := startChild(t, e, "periodic", "a2", env...)
	waitRuns(runs()+3, "three periods after the restart")
	b.stop(t)
	a2.stop(t)

	type row struct {
		Key     string
		Attempt int
		Worker  string
	}
	rows, _ := e.pool.Query(bg, "SELECT key, attempt, worker FROM "+e.schema+".periodic_runs")
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	checkPeriodicRuns(t, len(got), func(i int) (string, int, string) { return got[i].Key, got[i].Attempt, got[i].Worker })
	if t.Failed() {
		rows, _ := e.pool.Query(bg, "SELECT key || ' ' || state || ' attempt ' || attempt FROM "+jobsTable(e)+" ORDER BY id")
		jobs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		t.Logf("jobs:\n%s", strings.Join(jobs, "\n"))
	}
}

// checkPeriodicRuns checks n recorded runs (key, attempt, worker) of a
// one-second schedule: no period enqueued twice (the same attempt twice),
// and no period missing between the first and the last.
func checkPeriodicRuns(t *testing.T, n int, run func(int) (key string, attempt int, worker string)) {
	t.Helper()
	attempts := map[int64]map[int]string{}
	byWorker := map[string]int{}
	for i := range n {
		key, attempt, worker := run(i)
		stamp, ok := strings.CutPrefix(key, "periodic:tick:")
		require.True(t, ok, key)
		sec, err := strconv.ParseInt(stamp, 10, 64)
		require.NoError(t, err, key)
		if attempts[sec] == nil {
			attempts[sec] = map[int]string{}
		}
		if w, dup := attempts[sec][attempt]; dup {
			t.Errorf("period %s enqueued twice: attempt %d ran in %s and %s", key, attempt, w, worker)
		}
		attempts[sec][attempt] = worker
		byWorker[worker]++
	}
	periods := make([]int64, 0, len(attempts))
	for p := range attempts {
		periods = append(periods, p)
	}
	sort.Slice(periods, func(i, j int) bool { return periods[i] < periods[j] })
	require.GreaterOrEqual(t, len(periods), 9)
	var missing []string
	for p := periods[0]; p <= periods[len(periods)-1]; p++ {
		if attempts[p] == nil {
			missing = append(missing, fmt.Sprint(p))
		}
	}
	assert.Empty(t, missing, "periods not run")
	t.Logf("%d periods, each run once, by worker: %v", len(periods), byWorker)
}
