package queue_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/queuekit/queue"
)

// BenchmarkEnqueueRunTarget is EnqueueRun's no-key path with jobs that
// name a target: the target check (health, fair share) on every claim.
func BenchmarkEnqueueRunTarget(b *testing.B) {
	for _, n := range []int{1, 4} {
		b.Run(fmt.Sprintf("targets=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprint("upstream", i)
			}
			cd := newCountdown(b.N)
			q := started[int](b)(queue.New(func(context.Context, queue.Job[int]) error { cd.tick(); return nil },
				queue.WithWorkers(benchWorkers, benchWorkers)))
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				job := queue.Job[int]{Payload: i, Target: names[i%n]}
				enqueueRetrying(b, q, ctx, job)
			}
			<-cd.done
			b.StopTimer()
			reportJobs(b)
			if err := q.Stop(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}
