package pgstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storetest/fleettest"
)

// TestFleetWholeFlow runs the whole flow of a fleet of managers
// (fleettest.RunFlow) on one PostgreSQL schema: two managers with leader
// election, a standby killed mid-job (the janitor runs its jobs again),
// the leader killed mid-job (the standby takes over), replacements
// started, jobs at once and scheduled across the failover; every job
// runs, each once but the jobs in flight at a kill. Its priorities are
// not sharded (pgstore has no sharding across servers): both live in the
// one database, as the records do (table flow_records).
func TestFleetWholeFlow(t *testing.T) {
	e := newEnv(t)
	_, err := e.pool.Exec(bg, "CREATE TABLE "+e.schema+".flow_records (seq bigserial PRIMARY KEY, list text NOT NULL, line text NOT NULL)")
	require.NoError(t, err)
	fleettest.RunFlow(t, fleettest.Driver{
		Start: func(t *testing.T) *fleettest.Proc {
			return fleettest.StartProc(t, "^TestFleetWholeFlowHelper$", flowEnv+"="+e.schema, "QUEUE_PG_URL="+pgURL())
		},
		Read: func(t *testing.T) map[string][]string {
			rows, err := e.pool.Query(bg, "SELECT list, line FROM "+e.schema+".flow_records ORDER BY seq")
			require.NoError(t, err)
			lists := map[string][]string{}
			var list, line string
			_, err = pgx.ForEachRow(rows, []any{&list, &line}, func() error {
				lists[list] = append(lists[list], line)
				return nil
			})
			require.NoError(t, err)
			return lists
		},
		Leases: func(t *testing.T, owner string) map[fleettest.Ref]time.Time {
			rows, err := e.pool.Query(bg, "SELECT id, attempt, lease_expires_at FROM "+e.schema+
				".queuekit_jobs WHERE queue = 'q' AND state = 'running' AND lease_owner = $1", owner)
			require.NoError(t, err)
			held := map[fleettest.Ref]time.Time{}
			var ref fleettest.Ref
			var exp time.Time
			_, err = pgx.ForEachRow(rows, []any{&ref.ID, &ref.Attempt, &exp}, func() error {
				held[ref] = exp
				return nil
			})
			require.NoError(t, err)
			return held
		},
		Leader: func(t *testing.T) string {
			var id string
			require.NoError(t, e.pool.QueryRow(bg, "SELECT leader_id FROM "+e.schema+".queuekit_leaders WHERE queue = 'q'").Scan(&id))
			return id
		},
		// Every job completed, and none is left in another state.
		Ended: func(t *testing.T, f *fleettest.Flow, _ fleettest.Records) {
			rows, err := e.pool.Query(bg, "SELECT state, count(*) FROM "+e.schema+".queuekit_jobs WHERE queue = 'q' GROUP BY state")
			require.NoError(t, err)
			states := map[string]int{}
			var state string
			var n int
			_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
				states[state] = n
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, map[string]int{"completed": len(f.Jobs)}, states, "jobs by state at the end")
		},
	})
}

// flowEnv names the schema of TestFleetWholeFlow's managers.
const flowEnv = "PGSTORE_WHOLEFLOW"

// TestFleetWholeFlowHelper is a manager of TestFleetWholeFlow
// (fleettest.Serve); it does nothing in a normal test run.
func TestFleetWholeFlowHelper(t *testing.T) {
	schema := os.Getenv(flowEnv)
	if schema == "" {
		t.Skip("helper process of TestFleetWholeFlow")
	}
	pool := newPool(t, pgURL(), 16)
	s, err := pgstore.New[int](pool, pgstore.WithSchema(schema), pgstore.WithLeaseTTL(fleettest.LeaseTTL),
		pgstore.WithLeaderTTL(fleettest.LeaderTTL), pgstore.WithJanitorInterval(fleettest.Janitor))
	require.NoError(t, err)
	fleettest.Serve(t, s, s.WorkerID(), func(list, line string) error {
		_, err := pool.Exec(context.Background(), "INSERT INTO "+schema+".flow_records (list, line) VALUES ($1, $2)", list, line)
		return err
	})
}
