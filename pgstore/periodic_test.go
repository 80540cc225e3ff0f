package pgstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/storetest/fleettest"
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
	fleettest.CheckPeriodicRuns(t, len(got), 9, func(i int) (string, int, string) { return got[i].Key, got[i].Attempt, got[i].Worker })
	if t.Failed() {
		rows, _ := e.pool.Query(bg, "SELECT key || ' ' || state || ' attempt ' || attempt FROM "+jobsTable(e)+" ORDER BY id")
		jobs, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		t.Logf("jobs:\n%s", strings.Join(jobs, "\n"))
	}
}
