package queue

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRunTracking measures, on one goroutine, what a worker does per
// run to show the run to the admin API: publish it, and end it. "off" is
// a queue whose Admin was never called (the worker still stores the
// job's ID for Stats and heartbeats); "admin" is the same after Admin,
// with the coarse clock stamped 10 times a second as a polling dashboard
// does (here: every 1000 runs). The difference is the admin API's
// running-job tracking per run, run-time sampling included.
func BenchmarkRunTracking(b *testing.B) {
	for _, tracked := range []bool{false, true} {
		name := "off"
		if tracked {
			name = "admin"
		}
		b.Run(name, func(b *testing.B) {
			q, err := New(func(context.Context, Job[int]) error { return nil }, WithWorkers(1, 1))
			if err != nil {
				b.Fatal(err)
			}
			if tracked {
				q.Admin()
			}
			ctx := context.Background()
			if err := q.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = q.Shutdown(ctx) }()
			w := &worker[int]{run: &workerRun[int]{}}
			job := Job[int]{ID: 1}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				job.ID = int64(i) + 1
				_, sampled := q.beginRun(w, &job, time.Time{})
				var start time.Time
				if sampled {
					start = q.clock.Now() // as run does
				}
				w.cur.Store(job.ID)
				if sampled {
					w.run.timed(q.clock.Now().Sub(start))
				}
				if q.endRun(w, job.ID) {
					b.Fatal("cut")
				}
				if tracked && i%1000 == 0 {
					q.stampNow()
				}
			}
		})
	}
}
