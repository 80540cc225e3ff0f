package pgstore_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storetest"
)

// TestExplainUsesIndexes fills the table with a realistic mix — mostly
// finished history, a backlog in three priorities, scheduled and running
// jobs, two queues — and checks that the plans of the claim, promotion and
// rescue statements use their partial indexes, those of a batch of
// outcomes and of heartbeats the primary key, and that none scans the
// table.
//
// The default is 200 000 rows, which loads in a few seconds and is far past
// the size where PostgreSQL would pick a sequential scan if it could; set
// PGSTORE_EXPLAIN_ROWS=1000000 for the million.
func TestExplainUsesIndexes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rows := benchEnv("PGSTORE_EXPLAIN_ROWS", 200000)
	table := jobsTable(e)
	start := time.Now()
	// 85% completed, 10% available (3 priorities), 3% scheduled, 2% running;
	// every other row in a second queue.
	_, err := e.pool.Exec(bg, `
INSERT INTO `+table+` (queue, state, priority, run_at, scheduled_at, payload, lease_owner, lease_expires_at, finalized_at)
SELECT CASE WHEN i % 2 = 0 THEN 'explain' ELSE 'other' END,
       s.state, (i % 3) * 5,
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 hour' ELSE now() - (i || ' ms')::interval END,
       CASE WHEN s.state = 'scheduled' THEN now() + interval '1 hour' END,
       '0'::bytea,
       CASE WHEN s.state = 'running' THEN 'w' END,
       CASE WHEN s.state = 'running' THEN now() + interval '1 minute' END,
       CASE WHEN s.state = 'completed' THEN now() END
FROM generate_series(1, $1::integer) AS i,
LATERAL (SELECT CASE WHEN i % 100 < 85 THEN 'completed' WHEN i % 100 < 95 THEN 'available'
                     WHEN i % 100 < 98 THEN 'scheduled' ELSE 'running' END AS state) s`, rows)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(bg, "ANALYZE "+table); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded and analysed %d rows in %s", rows, time.Since(start).Round(time.Millisecond))

	s := newStore[int](t, e)
	claimSQL, promoteSQL, rescueSQL := pgstore.HotSQL(s)
	completeSQL, heartbeatSQL := pgstore.OutcomeSQL(s)
	fetchSQL, fetchWeightedSQL := pgstore.FetchClaimSQL(s)
	fromSQL, weightedFromSQL := pgstore.ClaimFromSQL(s)
	// A write batch of a few hundred outcomes: their rows are found by
	// primary key, never by reading the table or every running job.
	var ids []int64
	var attempts []int32
	for i := range 500 {
		ids, attempts = append(ids, int64(1+200*i)), append(attempts, 1)
	}
	now := time.Now()
	for _, c := range []struct {
		name, sql, index string
		args             []any
	}{
		{"claim", claimSQL, "queuekit_jobs_claim_idx", []any{"explain", now, 100, "me", time.Minute.Microseconds()}},
		{"weighted claim", pgstore.WeightedClaimSQL(s), "queuekit_jobs_claim_idx", []any{"explain", now, 100, "me", time.Minute.Microseconds(),
			[]int32{0, 5, 10}, []int64{0, 0, 0}, []int64{1, 2, 6}, int32(0)}},
		{"claim from the hint", fromSQL, "queuekit_jobs_claim_idx", []any{"explain", now, 100, "me", time.Minute.Microseconds(), 0, now.Add(-time.Hour), int64(5000)}},
		{"weighted claim from the hint", weightedFromSQL, "queuekit_jobs_claim_idx", []any{"explain", now, 100, "me", time.Minute.Microseconds(),
			[]int32{0, 5, 10}, []int64{0, 0, 0}, []int64{1, 2, 6}, int32(0), now.Add(-time.Hour), int64(5000)}},
		{"fetcher's claim", fetchSQL, "queuekit_jobs_claim_idx", []any{"explain", now, 100, "me", time.Minute.Microseconds()}},
		{"fetcher's weighted claim", fetchWeightedSQL, "queuekit_jobs_claim_idx", []any{"explain", now, 100, "me", time.Minute.Microseconds(),
			[]int32{0, 5, 10}, []int64{0, 0, 0}, []int64{1, 2, 6}, int32(0)}},
		{"promote", promoteSQL, "queuekit_jobs_due_idx", []any{"explain", now, 1000, 10000, now.Add(10 * time.Second), "chan", now}},
		{"rescue", rescueSQL, "queuekit_jobs_lease_idx", []any{"explain", now, 1000, 3, 0}},
		{"complete", completeSQL, "queuekit_jobs_pkey", []any{ids, attempts, "w", now}},
		{"heartbeat", heartbeatSQL, "queuekit_jobs_pkey", []any{ids, "w", now, time.Minute.Microseconds()}},
	} {
		var plan []map[string]any
		if err := e.pool.QueryRow(bg, "EXPLAIN (FORMAT JSON) "+c.sql, c.args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var seq, idx []string
		walkPlan(plan[0]["Plan"].(map[string]any), func(n map[string]any) {
			if n["Node Type"] == "Seq Scan" && n["Relation Name"] == "queuekit_jobs" {
				seq = append(seq, fmt.Sprint(n["Relation Name"]))
			}
			if name, ok := n["Index Name"].(string); ok {
				idx = append(idx, name)
			}
		})
		js, _ := json.MarshalIndent(plan, "", " ")
		if len(seq) > 0 || !strings.Contains(strings.Join(idx, ","), c.index) {
			t.Fatalf("%s plan: seq scans %v, indexes %v; want %s and no seq scan:\n%s", c.name, seq, idx, c.index, js)
		}
		t.Logf("%s uses %v", c.name, idx)
	}
}

func walkPlan(n map[string]any, f func(map[string]any)) {
	f(n)
	if kids, ok := n["Plans"].([]any); ok {
		for _, k := range kids {
			walkPlan(k.(map[string]any), f)
		}
	}
}

// TestNextDueReadsOneEntry: the promoter's next-due statement reads the
// first entry of the due index, not every scheduled job's, also on a table
// never analysed (a new schema, as in BenchmarkScheduleLateness), where
// min(run_at) was planned as an aggregate over the whole index.
func TestNextDueReadsOneEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	table := jobsTable(e)
	if _, err := e.pool.Exec(bg, `
INSERT INTO `+table+` (queue, state, run_at, scheduled_at, payload)
SELECT 'due', 'scheduled', now() + i * interval '1 ms', now() + i * interval '1 ms', '0'::bytea
FROM generate_series(1, 5000) AS i`); err != nil {
		t.Fatal(err)
	}
	s := newStore[int](t, e)
	var plan []map[string]any
	if err := e.pool.QueryRow(bg, "EXPLAIN (ANALYZE, FORMAT JSON) "+pgstore.NextDueSQL(s), "due").Scan(&plan); err != nil {
		t.Fatal(err)
	}
	read := -1.0
	walkPlan(plan[0]["Plan"].(map[string]any), func(n map[string]any) {
		if n["Relation Name"] == "queuekit_jobs" {
			read = max(read, n["Actual Rows"].(float64))
		}
	})
	if read != 1 {
		js, _ := json.MarshalIndent(plan, "", " ")
		t.Fatalf("the next-due statement read %v entries of 5 000 scheduled jobs; want 1:\n%s", read, js)
	}
}

// TestExplainBoundedList: a filtered admin listing (a rare target, a key
// prefix matching nothing) reads at most admin.MaxExamined rows of the
// state through the state's index, with no sequential scan and no sort
// of the whole state, on a table whose statistics are absent (loaded and
// never analysed, autovacuum off): issue #32 measured such pages at
// 0.8–1.2 s when the planner, without statistics, chose to scan and sort
// 333 000 rows.
func TestExplainBoundedList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rows := benchEnv("PGSTORE_EXPLAIN_ROWS", 200000)
	table := jobsTable(e)
	if _, err := e.pool.Exec(bg, "ALTER TABLE "+table+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	// Ready jobs in three targets and priorities, the last one of a rare
	// target; a tenth of the rows dead.
	if _, err := e.pool.Exec(bg, `
INSERT INTO `+table+` (queue, state, priority, target, key, run_at, created_at, finalized_at, payload)
SELECT 'bounded', CASE WHEN i % 10 = 0 THEN 'dead' ELSE 'available' END, (i % 3) * 5,
       CASE WHEN i = $1::integer THEN 'rare' ELSE 't' || (i % 3) END, 'job-' || i,
       now(), now() - ($1::integer - i) * interval '1 ms',
       CASE WHEN i % 10 = 0 THEN now() END, '0'::bytea
FROM generate_series(1, $1::integer) AS i`, rows); err != nil {
		t.Fatal(err)
	}
	s := newStore[int](t, e)
	// Initialised (not started): the ready listing's branches are the
	// configured priorities' (0, 5, 10, as loaded above).
	if err := s.Init(storetest.Config("bounded", 100, nil, func(queue.Event) {})); err != nil {
		t.Fatal(err)
	}
	mid := &admin.Cursor{At: time.Now().Add(-time.Duration(rows/2) * time.Millisecond), ID: int64(rows / 2)}
	for _, c := range []struct {
		name   string
		f      admin.Filter
		oldest bool
		after  *admin.Cursor
	}{
		{"rare target, oldest first", admin.Filter{State: admin.Ready, Target: "rare"}, true, nil},
		{"rare target, from the middle", admin.Filter{State: admin.Ready, Target: "rare"}, true, mid},
		{"key prefix matching nothing, newest first", admin.Filter{State: admin.Ready, KeyPrefix: "nothing/"}, false, nil},
		{"dead, rare target", admin.Filter{State: admin.Dead, Target: "rare"}, false, nil},
	} {
		sql, args := pgstore.ListSQL(s, c.f, c.oldest, c.after, admin.DefaultLimit+1)
		args[0] = "bounded"
		var plan []map[string]any
		if err := e.pool.QueryRow(bg, "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var bad []string
		walkPlan(plan[0]["Plan"].(map[string]any), func(n map[string]any) {
			// Rows a node read: those it returned and those its filter
			// dropped.
			out, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			read := out + removed
			switch {
			case n["Node Type"] == "Seq Scan" && n["Relation Name"] == "queuekit_jobs":
				bad = append(bad, "a sequential scan")
			case n["Relation Name"] == "queuekit_jobs" && read > admin.MaxExamined:
				bad = append(bad, fmt.Sprintf("%v read %v rows", n["Node Type"], read))
			case n["Node Type"] == "Sort" && read > admin.MaxExamined:
				bad = append(bad, fmt.Sprintf("a sort of %v rows", read))
			}
		})
		if len(bad) > 0 {
			js, _ := json.MarshalIndent(plan, "", " ")
			t.Fatalf("%s: %v; want at most %d rows read through the index:\n%s", c.name, bad, admin.MaxExamined, js)
		}
		t.Logf("%s: %.1f ms", c.name, plan[0]["Execution Time"])
	}
}
