package pgstore_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storetest"
)

// wallClock is the system clock, for benchmarks that measure real time.
type wallClock struct{}

func (wallClock) Now() time.Time                       { return time.Now() }
func (wallClock) NewTimer(d time.Duration) queue.Timer { return wallTimer{time.NewTimer(d)} }

type wallTimer struct{ t *time.Timer }

func (t wallTimer) C() <-chan time.Time        { return t.t.C }
func (t wallTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t wallTimer) Stop() bool                 { return t.t.Stop() }

// BenchmarkScheduleLateness measures how late scheduled jobs start when
// two processes share a queue: two stores on one schema (as two
// processes would have), each with its own producer and workers. The
// producers schedule PGSTORE_BENCH_SCHED_N jobs (default 10000) due
// evenly over PGSTORE_BENCH_SCHED_SPAN seconds (default 10), the first
// PGSTORE_BENCH_SCHED_LEAD seconds (default 20) after the run starts:
// scheduling one job at a time takes that long on a small machine, and a
// job added after its due time is not scheduled. Four producers per store
// add them one at a time, interleaved across the stores; a job's
// lateness is from its due time to its claim returning to a worker. It
// reports p50, p99 and max lateness in milliseconds, and fails if a job
// started early or twice, or never. Run it with -benchtime 1x:
//
//	go test -run '^$' -bench ScheduleLateness -benchtime 1x ./pgstore
func BenchmarkScheduleLateness(b *testing.B) {
	n := benchEnv("PGSTORE_BENCH_SCHED_N", 10000)
	span := time.Duration(benchEnv("PGSTORE_BENCH_SCHED_SPAN", 10)) * time.Second
	lead := time.Duration(benchEnv("PGSTORE_BENCH_SCHED_LEAD", 20)) * time.Second
	const workers, producers = 10, 4 // per store
	for b.Loop() {
		e := newEnv(b)
		var stores [2]*pgstore.Store[int]
		for i := range stores {
			stores[i] = newStore[int](b, e, pgstore.WithCapacityCheck(false))
			cfg := storetest.Config("lateness", 1<<30, wallClock{}, func(queue.Event) {})
			if err := stores[i].Init(cfg); err != nil {
				b.Fatal(err)
			}
			if err := stores[i].Start(bg); err != nil {
				b.Fatal(err)
			}
		}
		var (
			mu   sync.Mutex
			late = make([]time.Duration, 0, n)
			runs = make(map[int]int, n)
			done = make(chan struct{})
		)
		ctx, cancel := context.WithCancel(bg)
		var wg sync.WaitGroup
		for _, s := range stores {
			for range workers {
				wg.Go(func() {
					for {
						j, err := s.Claim(ctx)
						if err != nil {
							return
						}
						l := time.Since(j.RunAt)
						_ = s.Complete(context.WithoutCancel(ctx), j)
						mu.Lock()
						late = append(late, l)
						runs[j.Payload]++
						if len(late) == n {
							close(done)
						}
						mu.Unlock()
					}
				})
			}
		}
		base := time.Now().Add(lead)
		var prod sync.WaitGroup
		for p := range 2 * producers {
			s := stores[p%2]
			prod.Go(func() {
				for i := p; i < n; i += 2 * producers {
					at := base.Add(span * time.Duration(i) / time.Duration(n))
					if _, err := s.Add(bg, queue.Job[int]{RunAt: at, Payload: i}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		prod.Wait()
		if time.Now().After(base) {
			b.Fatalf("scheduling took longer than the lead (%v): raise PGSTORE_BENCH_SCHED_LEAD", lead)
		}
		select {
		case <-done:
		case <-time.After(span + time.Minute):
			b.Fatalf("%d of %d jobs ran", len(late), n)
		}
		cancel()
		wg.Wait()
		for _, s := range stores {
			cctx, ccancel := context.WithTimeout(bg, 10*time.Second)
			if err := s.Close(cctx); err != nil {
				b.Error(err)
			}
			ccancel()
		}
		b.StopTimer()
		for id, c := range runs {
			if c != 1 {
				b.Fatalf("job %d ran %d times", id, c)
			}
		}
		slices.Sort(late)
		if late[0] < 0 {
			b.Fatalf("a job started %v early", -late[0])
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		b.ReportMetric(ms(late[len(late)/2]), "p50-ms")
		b.ReportMetric(ms(late[len(late)*99/100]), "p99-ms")
		b.ReportMetric(ms(late[len(late)-1]), "max-ms")
		b.StartTimer()
	}
}
