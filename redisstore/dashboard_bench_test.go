package redisstore

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
// a queue holding REDISSTORE_BENCH_ADMIN_N jobs (default 1 000 000:
// 900 000 ready, 100 000 dead, loaded as BenchmarkAdminList does), as
// every open tab does each second. It reports the first poll, which
// waits for the first count of jobs per state (first-poll-ms).
//
//	go test -run '^$' -bench DashboardState -benchtime 50x ./redisstore
func BenchmarkDashboardState(b *testing.B) {
	n := envInt("REDISSTORE_BENCH_ADMIN_N", 1_000_000)
	c := benchClient(b)
	s, err := New[int](c, WithPrefix(testPrefix(b, c)))
	if err != nil {
		b.Fatal(err)
	}
	q, err := queue.NewWithStore[int](s, func(context.Context, queue.Job[int]) error { return nil },
		queue.WithName("bench"), queue.WithCapacity(1<<30, 1<<30))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	loadJobs(b, ctx, s, n-n/10, n/10)
	b.Logf("loaded %d jobs in %s", n, time.Since(start).Round(time.Millisecond))
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
