package pgstore_test

import (
	"testing"
	"time"

	"github.com/queuekit/queue/admin"
)

// BenchmarkAdminList pages 100 jobs of a queue holding PGSTORE_BENCH_ADMIN_N
// jobs (default 1 000 000: 900 000 ready, 100 000 dead), loaded once per
// run with generate_series (about ten seconds), as an operator's
// dashboard or queuectl would: the first page newest first, the first
// oldest first, a page from the middle of the ready jobs, and the
// newest dead jobs.
//
//	go test -run '^$' -bench AdminList -benchtime 200x ./pgstore
func BenchmarkAdminList(b *testing.B) {
	n := benchEnv("PGSTORE_BENCH_ADMIN_N", 1_000_000)
	e := newEnv(b)
	s := benchStore(b, e)
	dead := n / 10
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := e.pool.Exec(bg, `INSERT INTO `+jobsTable(e)+` (queue, state, priority, run_at, created_at, finalized_at, attempt, key, payload, last_error)
		SELECT 'bench', CASE WHEN i <= $2 THEN 'dead' ELSE 'available' END, (i % 3) * 5,
			$3::timestamptz + i * interval '1 millisecond', $3::timestamptz + i * interval '1 millisecond',
			CASE WHEN i <= $2 THEN $3::timestamptz + i * interval '1 millisecond' END,
			CASE WHEN i <= $2 THEN 3 ELSE 0 END, 'job-' || i, '\x7b7d'::bytea,
			CASE WHEN i <= $2 THEN 'boom' END
		FROM generate_series(1, $1::bigint) AS i`, n, dead, start); err != nil {
		b.Fatal(err)
	}
	if _, err := e.pool.Exec(bg, "ANALYZE "+jobsTable(e)); err != nil {
		b.Fatal(err)
	}
	a := admin.New(s.Admin())
	mid := admin.Cursor{At: start.Add(time.Duration(dead+(n-dead)/2) * time.Millisecond), ID: 0}
	for _, c := range []struct {
		name string
		q    admin.Query
	}{
		{name: "ready-newest", q: admin.Query{Filter: admin.Filter{State: admin.Ready}}},
		{name: "ready-oldest", q: admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true}},
		{name: "ready-high-newest", q: admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "high"}}},
		{name: "dead-newest", q: admin.Query{Filter: admin.Filter{State: admin.Dead}, Payload: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				p, err := a.List(bg, c.q)
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Jobs) != admin.DefaultLimit || p.Next == "" {
					b.Fatalf("got %d jobs, next %q", len(p.Jobs), p.Next)
				}
			}
		})
	}
	// Filters that match nothing: each call examines admin.MaxExamined
	// jobs and returns an empty partial page with a cursor.
	for _, c := range []struct {
		name string
		f    admin.Filter
	}{
		{name: "ready-rare-target-newest", f: admin.Filter{State: admin.Ready, Target: "rare"}},
		{name: "ready-no-key-prefix-oldest", f: admin.Filter{State: admin.Ready, KeyPrefix: "nothing/"}},
	} {
		b.Run(c.name, func(b *testing.B) {
			q := admin.Query{Filter: c.f, Oldest: c.name == "ready-no-key-prefix-oldest"}
			for b.Loop() {
				p, err := a.List(bg, q)
				if err != nil {
					b.Fatal(err)
				}
				if len(p.Jobs) != 0 || !p.Partial || p.Next == "" || p.Examined != admin.MaxExamined {
					b.Fatalf("got %d jobs, partial %v, examined %d, next %q", len(p.Jobs), p.Partial, p.Examined, p.Next)
				}
			}
		})
	}
	b.Run("ready-middle", func(b *testing.B) {
		for b.Loop() {
			jobs, err := s.Admin().List(bg, admin.Filter{State: admin.Ready}, true, &mid, admin.DefaultLimit, false)
			if err != nil {
				b.Fatal(err)
			}
			if len(jobs) != admin.DefaultLimit {
				b.Fatalf("got %d jobs", len(jobs))
			}
		}
	})
}
