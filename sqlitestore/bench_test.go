package sqlitestore_test

import (
	"context"
	"testing"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

// BenchmarkEnqueueMany: EnqueueMany of 1 000 jobs, one write transaction
// (synchronous=FULL); jobs/s is the figure.
func BenchmarkEnqueueMany(b *testing.B) {
	for _, sync := range []sqlitestore.Synchronous{sqlitestore.SyncFull, sqlitestore.SyncNormal} {
		b.Run("sync="+sync.String(), func(b *testing.B) { benchEnqueueMany(b, sync) })
	}
}

func benchEnqueueMany(b *testing.B, sync sqlitestore.Synchronous) {
	db := openDB(b, sqlitestore.WithSynchronous(sync))
	s, err := sqlitestore.New[int](db)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }); err != nil {
		b.Fatal(err)
	}
	jobs := make([]queue.Job[int], 1000)
	for i := range jobs {
		jobs[i].Payload = i
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.EnqueueMany(ctx, jobs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(jobs))/b.Elapsed().Seconds(), "jobs/s")
}
