package redisstore

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest/storebench"
)

// Benchmarks against the test Redis (QUEUE_REDIS_ADDR):
//
//	go test -run '^$' -bench Enqueue -benchtime 20000x ./redisstore
//	scripts/redisbench.sh (BenchmarkEnqueueOne beside redis-benchmark -c 1 PING)
//	QUEUE_BENCH_JOBS=100000 QUEUE_BENCH_WORKERS=100 go test -run '^$' -bench BurnDown -benchtime 1x ./redisstore

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func benchClient(b *testing.B) *redis.Client {
	benchDefaults()
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

func benchConfig() storekit.Config {
	return storekit.Config{
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

// BenchmarkEnqueueOne measures one producer enqueuing ready jobs one at a
// time, each waiting for its reply: through a Queue (queue: what a user
// calls), the store's Add alone (store), and, for the floor under both, a
// go-redis PING on a client of the same options (ping). many is
// EnqueueMany of QUEUE_BENCH_BATCH (default 100) jobs per op. Every
// sub-benchmark reports jobs/s (ping: PINGs/s) and the median latency of
// an op (p50-µs/op); scripts/redisbench.sh sets them beside
// redis-benchmark -c 1 PING in the same run.
func BenchmarkEnqueueOne(b *testing.B) {
	batch := envInt("QUEUE_BENCH_BATCH", 100)
	ctx := context.Background()
	setup := func(b *testing.B) (*Store[int], *queue.Queue[int]) {
		benchDefaults()
		c := needRedis(b)
		s, err := New[int](c, WithPrefix(testPrefix(b, c)))
		if err != nil {
			b.Fatal(err)
		}
		q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil },
			queue.WithName("bench"), queue.WithCapacity(1<<30, 0), queue.WithLogger(quietLogger()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_ = q.Stop(sctx)
			_ = s.Close(sctx)
		})
		// The first enqueue reserves IDs and loads the scripts: untimed.
		if err := q.Enqueue(ctx, queue.Job[int]{Payload: 1}); err != nil {
			b.Fatal(err)
		}
		return s, q
	}
	run := func(b *testing.B, per int, op func() error) {
		// Each op's latency in 1 µs buckets, for the median: on a loaded
		// machine the mean rate swings with the scheduler, the median
		// much less.
		var hist [10001]uint32
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			if err := op(); err != nil {
				b.Fatal(err)
			}
			hist[min(time.Since(start).Microseconds(), int64(len(hist)-1))]++
		}
		b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "jobs/s")
		var seen uint32
		for us, k := range hist {
			if seen += k; seen*2 >= uint32(b.N) {
				b.ReportMetric(float64(us), "p50-µs/op")
				break
			}
		}
	}
	b.Run("queue", func(b *testing.B) {
		_, q := setup(b)
		run(b, 1, func() error { return q.Enqueue(ctx, queue.Job[int]{Payload: 1}) })
	})
	b.Run("store", func(b *testing.B) {
		s, _ := setup(b)
		run(b, 1, func() error {
			_, err := s.Add(ctx, queue.Job[int]{Payload: 1})
			return err
		})
	})
	b.Run("many", func(b *testing.B) {
		s, _ := setup(b)
		jobs := make([]queue.Job[int], batch)
		for i := range jobs {
			jobs[i].Payload = 1
		}
		run(b, batch, func() error {
			_, err := s.EnqueueMany(ctx, jobs)
			return err
		})
	})
	b.Run("ping", func(b *testing.B) {
		c := needRedis(b)
		run(b, 1, func() error { return c.Ping(ctx).Err() })
	})
}

// BenchmarkFanout compares Fanout over 100 targets on the in-memory
// store and on redisstore (storebench.Fanout).
func BenchmarkFanout(b *testing.B) {
	storebench.Fanout(b, "redisstore", func(b *testing.B) storekit.Store[int] {
		c := needRedis(b)
		s, err := New[int](c, WithPrefix(testPrefix(b, c)))
		if err != nil {
			b.Fatal(err)
		}
		return s
	})
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

// BenchmarkTargetSlots measures the cost of the fleet's concurrency slots
// (storekit.SlotStore): a queue works off QUEUE_BENCH_JOBS (default 2000)
// no-op jobs of one target with 10 workers, without a limit (none), with
// a limit equal to the workers (limit=10: as many run at once as
// without, and each job takes and frees a slot: two more round trips),
// and with a limit of 1 (limit=1: one at a time, a parked job taking over
// the slot of the job before it, with no round trip). It reports jobs/s.
func BenchmarkTargetSlots(b *testing.B) {
	jobs := envInt("QUEUE_BENCH_JOBS", 2000)
	const workers = 10
	c := benchClient(b)
	for _, lc := range []struct {
		name  string
		limit int
	}{{"none", 0}, {"limit=10", workers}, {"limit=1", 1}} {
		b.Run(lc.name, func(b *testing.B) {
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				s, err := New[int](c, WithPrefix(testPrefix(b, c)))
				if err != nil {
					b.Fatal(err)
				}
				var done atomic.Int64
				all := make(chan struct{})
				opts := []queue.Option{queue.WithWorkers(workers, workers), queue.WithCapacity(jobs+1, 0), queue.WithName("bench"),
					queue.WithLogger(quietLogger())}
				if lc.limit > 0 {
					opts = append(opts, queue.WithTargetConcurrency(lc.limit))
				}
				q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error {
					if done.Add(1) == int64(jobs) {
						close(all)
					}
					return nil
				}, opts...)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				batch := make([]queue.Job[int], jobs)
				for i := range batch {
					batch[i] = queue.Job[int]{Target: "x", Payload: i}
				}
				if _, err := s.EnqueueMany(ctx, batch); err != nil {
					b.Fatal(err)
				}
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
		})
	}
}
