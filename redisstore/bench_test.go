package redisstore

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/redis/go-redis/v9"
)

// Benchmarks against the test Redis (QUEUE_REDIS_ADDR):
//
//	go test -run '^$' -bench Enqueue -benchtime 20000x ./redisstore
//	QUEUE_BENCH_JOBS=100000 QUEUE_BENCH_WORKERS=100 go test -run '^$' -bench BurnDown -benchtime 1x ./redisstore

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func benchClient(b *testing.B) *redis.Client {
	c := needRedis(b)
	// The pool must cover the workers' concurrent claims.
	bc := redis.NewClient(&redis.Options{Addr: redisAddr(), PoolSize: 200})
	b.Cleanup(func() { bc.Close() })
	_ = c
	return bc
}

// BenchmarkEnqueue measures Add of ready jobs by 1 and 10 producers.
func BenchmarkEnqueue(b *testing.B) {
	for _, producers := range []int{1, 10} {
		b.Run("producers="+strconv.Itoa(producers), func(b *testing.B) {
			c := benchClient(b)
			s, err := New[int](c, WithPrefix(testPrefix(b, c)))
			if err != nil {
				b.Fatal(err)
			}
			cfg := benchConfig()
			if err := s.Init(cfg); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var next atomic.Int64
			b.ResetTimer()
			var wg sync.WaitGroup
			for range producers {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if _, err := s.Add(ctx, queue.Job[int]{Payload: 1}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

func benchConfig() queue.StoreConfig {
	return queue.StoreConfig{
		Name: "bench", Priorities: queue.DefaultPriorities(), DefaultPriority: "normal",
		Capacity: 1 << 30, RequeueDelay: 10 * time.Second, Coalesce: true, MaxAttempts: 3,
		Clock: nil, Logger: quietLogger(), Report: func(queue.Event) {},
	}
}

// BenchmarkBurnDown enqueues QUEUE_BENCH_JOBS (default 2000) no-op jobs and
// measures how fast a queue with QUEUE_BENCH_WORKERS (default 100) workers
// runs them all, end to end.
func BenchmarkBurnDown(b *testing.B) {
	jobs := envInt("QUEUE_BENCH_JOBS", 2000)
	workers := envInt("QUEUE_BENCH_WORKERS", 100)
	c := benchClient(b)
	var total time.Duration
	for range b.N {
		b.StopTimer()
		s, err := New[int](c, WithPrefix(testPrefix(b, c)))
		if err != nil {
			b.Fatal(err)
		}
		var done atomic.Int64
		all := make(chan struct{})
		q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error {
			if done.Add(1) == int64(jobs) {
				close(all)
			}
			return nil
		}, queue.WithWorkers(workers, workers), queue.WithCapacity(jobs+1, 0), queue.WithName("bench"), queue.WithLogger(quietLogger()))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 10 {
			wg.Go(func() {
				for next.Add(1) <= int64(jobs) {
					if err := q.Enqueue(ctx, queue.Job[int]{Payload: 1}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StartTimer()
		start := time.Now()
		if err := q.Start(ctx); err != nil {
			b.Fatal(err)
		}
		<-all
		total += time.Since(start)
		b.StopTimer()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = q.Stop(sctx)
		_ = s.Close(sctx)
		cancel()
		b.StartTimer()
	}
	b.ReportMetric(float64(jobs*b.N)/total.Seconds(), "jobs/s")
}

// BenchmarkAdmit measures Queue.Admit on redisstore: below the fill
// threshold (no store call: the fleet bucket is not engaged; compare with
// the root module's BenchmarkAdmit on the in-memory store), and engaged,
// where the shared bucket is taken from Redis in leases of 50 tokens
// (burst 1000, a rate that never runs dry).
func BenchmarkAdmit(b *testing.B) {
	for _, c := range []struct {
		name string
		jobs int
	}{{"below-threshold", 50}, {"engaged", 90}} {
		b.Run(c.name, func(b *testing.B) {
			cl := benchClient(b)
			s, err := New[int](cl, WithPrefix(testPrefix(b, cl)))
			if err != nil {
				b.Fatal(err)
			}
			q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil },
				queue.WithCapacity(100, 0), queue.WithLogger(quietLogger()),
				queue.WithRateLimit(queue.RateLimit{PerSecond: 1e9, Burst: 1000}))
			if err != nil {
				b.Fatal(err)
			}
			for range c.jobs { // not started: the jobs stay ready
				if err := q.Enqueue(context.Background(), queue.Job[int]{}); err != nil {
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
