package sqlitestore_test

import (
	"context"
	"strings"
	"testing"
)

// TestQueryPlans: the statements on the hot paths find their rows through
// an index (a partial index is used only when the statement repeats its
// predicate), never by scanning the jobs table.
func TestQueryPlans(t *testing.T) {
	db := openDB(t)
	for name, q := range map[string]string{
		"add: the key's jobs": `SELECT state FROM queuekit_jobs WHERE queue = 'q' AND key = x'6b' AND key <> x''
			AND state IN ('scheduled', 'available', 'running', 'retryable')
			UNION ALL SELECT state FROM queuekit_jobs WHERE queue = 'q' AND key = x'6b' AND key <> x'' AND state = 'pending'`,
		"put back: the key's rerun": `SELECT 1 FROM queuekit_jobs r WHERE r.queue = 'q' AND r.key = x'6b' AND r.key <> x'' AND r.state = 'pending'`,
		"claim":                     `SELECT id FROM queuekit_jobs WHERE queue = 'q' AND state = 'available' AND run_at <= 5 ORDER BY priority, run_at, id LIMIT 10`,
		"promote":                   `SELECT id FROM queuekit_jobs WHERE queue = 'q' AND state IN ('scheduled', 'retryable') AND run_at <= 5 ORDER BY run_at, id LIMIT 1000`,
		"rescue": `SELECT id FROM queuekit_jobs WHERE queue = 'q' AND lease_expires_at IS NOT NULL AND lease_expires_at < 5
				AND state = 'running' ORDER BY lease_expires_at, id LIMIT 1000`,
	} {
		rows, err := db.SQL().QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		for _, step := range plan {
			if strings.HasPrefix(step, "SCAN") && !strings.Contains(step, "USING") {
				t.Errorf("%s scans the table: %q", name, plan)
			}
		}
	}
}
