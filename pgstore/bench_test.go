package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest/storebench"
)

// Benchmarks against the test server (QUEUE_PG_URL). Burn-down size:
// PGSTORE_BENCH_N (default 10000); workers: PGSTORE_BENCH_WORKERS
// (default 20); claim batch size: PGSTORE_BENCH_CLAIM_BATCH (default
// pgstore's); PGSTORE_BENCH_STRICT set: the burn-down's queue dispatches
// by strict priority instead of the default weighted shares. For example:
//
//	PGSTORE_BENCH_N=100000 go test -run '^$' -bench . -benchtime 1x ./pgstore

func benchEnv(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func benchStore(b *testing.B, e *env, opts ...pgstore.Option) *pgstore.Store[int] {
	s := newStore[int](b, e, opts...)
	if err := s.Init(storekit.Config{Name: "bench", Priorities: queue.DefaultPriorities(), DefaultPriority: "normal",
		Capacity: 1 << 30, RequeueDelay: time.Second, Coalesce: true, MaxAttempts: 3, Clock: nil,
		Logger: quietLogger(), Report: func(queue.Event) {}}); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkEnqueue measures one Add (one statement, one round trip, one
// commit), reporting p50 and p99 latency.
func BenchmarkEnqueue(b *testing.B) {
	e := newEnv(b)
	s := benchStore(b, e, pgstore.WithCapacityCheck(false))
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if _, err := s.Add(bg, queue.Job[int]{Payload: i}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkEnqueueKeyed is BenchmarkEnqueue with a dedupe key and the
// capacity check on (the default).
func BenchmarkEnqueueKeyed(b *testing.B) {
	e := newEnv(b)
	s := benchStore(b, e)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		if _, err := s.Add(bg, queue.Job[int]{Key: strconv.Itoa(i), Payload: i}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkEnqueueConcurrent measures single Adds from 1 and 10
// goroutines at once (the durable comparison's insert case): commits from
// concurrent Adds must not serialise.
func BenchmarkEnqueueConcurrent(b *testing.B) {
	for _, g := range []int{1, 10} {
		b.Run(fmt.Sprintf("goroutines=%d", g), func(b *testing.B) {
			e := newEnv(b)
			e.pool = newPool(b, pgURL(), int32(g+4))
			s := benchStore(b, e, pgstore.WithCapacityCheck(false))
			defer s.Close(bg)
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ResetTimer()
			for range g {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if _, err := s.Add(bg, queue.Job[int]{Payload: 1}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkEnqueueMany measures batch insert: PGSTORE_BENCH_BATCH jobs per
// op (default 1000; the durable comparison inserts 100000 at once), with
// COPY (no keys) and with the unnest insert (keys).
func BenchmarkEnqueueMany(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		name := "copy"
		if keyed {
			name = "keyed"
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b)
			s := benchStore(b, e)
			batch := benchEnv("PGSTORE_BENCH_BATCH", 1000)
			jobs := make([]queue.Job[int], batch)
			n := 0
			for b.Loop() {
				for i := range jobs {
					jobs[i] = queue.Job[int]{Payload: n}
					if keyed {
						jobs[i].Key = strconv.Itoa(n)
					}
					n++
				}
				if _, err := s.EnqueueMany(bg, jobs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// BenchmarkBurnDown inserts N no-op jobs in batches, then measures a queue
// working them off end to end: claim, run, complete.
func BenchmarkBurnDown(b *testing.B) {
	n := benchEnv("PGSTORE_BENCH_N", 10000)
	workers := benchEnv("PGSTORE_BENCH_WORKERS", 20)
	for b.Loop() {
		b.StopTimer()
		e := newEnv(b)
		s := benchStore(b, e)
		for i := 0; i < n; i += 5000 {
			jobs := make([]queue.Job[int], 0, 5000)
			for j := i; j < min(n, i+5000); j++ {
				jobs = append(jobs, queue.Job[int]{Payload: j})
			}
			if _, err := s.EnqueueMany(bg, jobs); err != nil {
				b.Fatal(err)
			}
		}
		var opts []pgstore.Option
		if cb := benchEnv("PGSTORE_BENCH_CLAIM_BATCH", 0); cb > 0 {
			opts = append(opts, pgstore.WithBatchSizes(cb, pgstore.DefaultWriteBatch))
		}
		s2 := newStore[int](b, e, opts...)
		var done atomic.Int64
		finished := make(chan struct{})
		qopts := []queue.Option{queue.WithName("bench"), queue.WithWorkers(workers, workers), queue.WithCapacity(1<<30, 0), queue.WithLogger(quietLogger())}
		if os.Getenv("PGSTORE_BENCH_STRICT") != "" {
			qopts = append(qopts, queue.WithPriorities("normal", strictPriorities()...))
		}
		q, err := queue.NewWithStore(s2, func(context.Context, queue.Job[int]) error {
			if done.Add(1) == int64(n) {
				close(finished)
			}
			return nil
		}, qopts...)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if err := q.Start(bg); err != nil {
			b.Fatal(err)
		}
		<-finished
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		if err := q.Stop(ctx); err != nil { // waits for the last completions to be written
			b.Fatal(err)
		}
		cancel()
		took := time.Since(start)
		b.StopTimer()
		b.ReportMetric(float64(n)/took.Seconds(), "jobs/s")
		if c := count(b, e.pool, "SELECT count(*) FROM "+jobsTable(e)+" WHERE state = 'completed'"); c != n {
			b.Fatalf("%d completed, want %d", c, n)
		}
		b.StartTimer()
	}
}

// strictPriorities are queue.DefaultPriorities without shares: strict
// dispatch, for PGSTORE_BENCH_STRICT.
func strictPriorities() []queue.Priority {
	ps := queue.DefaultPriorities()
	for i := range ps {
		ps[i].Share = 0
	}
	return ps
}

// BenchmarkFanout compares Fanout over 100 targets on the in-memory
// store and on pgstore (storebench.Fanout).
func BenchmarkFanout(b *testing.B) {
	storebench.Fanout(b, "pgstore", func(b *testing.B) storekit.Store[int] { return newStore[int](b, newEnv(b)) })
}

// BenchmarkAdmit measures Queue.Admit on pgstore: below the fill
// threshold (no store call: the fleet bucket is not engaged; compare with
// the root module's BenchmarkAdmit on the in-memory store), and engaged,
// where the shared bucket is taken from the database in leases of 50
// tokens (burst 1000, a rate that never runs dry).
func BenchmarkAdmit(b *testing.B) {
	e := newEnv(b)
	runs := 0
	for _, c := range []struct {
		name string
		jobs int
	}{{"below-threshold", 50}, {"engaged", 90}} {
		b.Run(c.name, func(b *testing.B) {
			s := newStore[int](b, e)
			runs++ // a queue of its own for each run
			q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil },
				queue.WithName(fmt.Sprintf("admit_%d", runs)), queue.WithCapacity(100, 0), queue.WithLogger(quietLogger()),
				queue.WithRateLimit(queue.RateLimit{PerSecond: 1e9, Burst: 1000}))
			if err != nil {
				b.Fatal(err)
			}
			for range c.jobs { // not started: the jobs stay ready
				if err := q.Enqueue(bg, queue.Job[int]{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := q.Admit(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTargetSlots measures the cost of the fleet's concurrency slots
// (storekit.SlotStore): a queue works off PGSTORE_BENCH_N/5 no-op jobs of one
// target with PGSTORE_BENCH_WORKERS/2 workers (default 2000, 10),
// without a limit (none), with a limit equal to the workers (limit=W: as
// many run at once as without, and each job takes and frees a slot: two
// more round trips), and with a limit of 1 (limit=1: one at a time, a
// parked job taking over the slot of the job before it, with no round
// trip). It reports jobs/s.
func BenchmarkTargetSlots(b *testing.B) {
	n := benchEnv("PGSTORE_BENCH_N", 10000) / 5
	workers := benchEnv("PGSTORE_BENCH_WORKERS", 20) / 2
	for _, c := range []struct {
		name  string
		limit int
	}{{"none", 0}, {fmt.Sprintf("limit=%d", workers), workers}, {"limit=1", 1}} {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				e := newEnv(b)
				s := benchStore(b, e)
				jobs := make([]queue.Job[int], n)
				for i := range jobs {
					jobs[i] = queue.Job[int]{Target: "x", Payload: i}
				}
				if _, err := s.EnqueueMany(bg, jobs); err != nil {
					b.Fatal(err)
				}
				var done atomic.Int64
				finished := make(chan struct{})
				opts := []queue.Option{queue.WithName("bench"), queue.WithWorkers(workers, workers), queue.WithCapacity(1<<30, 0),
					queue.WithLogger(quietLogger())}
				if c.limit > 0 {
					opts = append(opts, queue.WithTargetConcurrency(c.limit))
				}
				q, err := queue.NewWithStore(newStore[int](b, e), func(context.Context, queue.Job[int]) error {
					if done.Add(1) == int64(n) {
						close(finished)
					}
					return nil
				}, opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				if err := q.Start(bg); err != nil {
					b.Fatal(err)
				}
				<-finished
				ctx, cancel := context.WithTimeout(bg, time.Minute)
				if err := q.Stop(ctx); err != nil {
					b.Fatal(err)
				}
				cancel()
				total += time.Since(start)
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "jobs/s")
		})
	}
}
