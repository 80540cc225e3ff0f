package pgstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/dashboard"
)

// BenchmarkDashboardState polls the dashboard's api/state (WithAdmin) of
// a queue holding PGSTORE_BENCH_ADMIN_N jobs (default 1 000 000: 900 000
// ready, 100 000 dead, loaded with generate_series), as every open tab
// does each second. It reports the first poll, which waits for the first
// count of jobs per state (first-poll-ms); later polls answer with that
// count and never wait for another.
//
//	go test -run '^$' -bench DashboardState -benchtime 50x ./pgstore
func BenchmarkDashboardState(b *testing.B) {
	n := benchEnv("PGSTORE_BENCH_ADMIN_N", 1_000_000)
	e := newEnv(b)
	s := newStore[int](b, e)
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := e.pool.Exec(bg, `INSERT INTO `+jobsTable(e)+` (queue, state, priority, run_at, created_at, finalized_at, attempt, key, payload, last_error)
		SELECT 'bench', CASE WHEN i <= $2 THEN 'dead' ELSE 'available' END, (i % 3) * 5,
			$3::timestamptz + i * interval '1 millisecond', $3::timestamptz + i * interval '1 millisecond',
			CASE WHEN i <= $2 THEN $3::timestamptz + i * interval '1 millisecond' END,
			CASE WHEN i <= $2 THEN 3 ELSE 0 END, 'job-' || i, '\x7b7d'::bytea,
			CASE WHEN i <= $2 THEN 'boom' END
		FROM generate_series(1, $1::bigint) AS i`, n, n/10, start); err != nil {
		b.Fatal(err)
	}
	if _, err := e.pool.Exec(bg, "ANALYZE "+jobsTable(e)); err != nil {
		b.Fatal(err)
	}
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }, queue.WithName("bench"))
	if err != nil {
		b.Fatal(err)
	}
	pollState(b, q)
}

// pollState mounts the dashboard of q with its admin API and polls
// api/state, reporting the first poll apart.
func pollState(b *testing.B, q *queue.Queue[int]) {
	h, err := dashboard.New(q, dashboard.WithAdmin(q.Admin()))
	if err != nil {
		b.Fatal(err)
	}
	poll := func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/api/state", nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("api/state: %d %s", rec.Code, rec.Body)
		}
	}
	t0 := time.Now()
	poll()
	first := time.Since(t0)
	b.ResetTimer()
	for b.Loop() {
		poll()
	}
	b.ReportMetric(float64(first.Milliseconds()), "first-poll-ms")
}
