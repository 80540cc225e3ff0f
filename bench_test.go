package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storetest"
)

// Benchmarks for the in-memory engine. Run them with
//
//	go test -run '^$' -bench . -benchtime 200000x -count 3
//
// BenchmarkEnqueueRun/channel is the baseline: a bare buffered channel of
// the queue's default capacity drained by the same number of worker
// goroutines (10). The other sub-benchmarks push the same no-op jobs
// through a Queue; compare their jobs/s with the channel's.

var benchWorkers = 10

// countdown closes done when its counter reaches zero.
type countdown struct {
	left atomic.Int64
	done chan struct{}
}

func newCountdown(n int) *countdown {
	c := &countdown{done: make(chan struct{})}
	c.left.Store(int64(n))
	return c
}

func (c *countdown) tick() {
	if c.left.Add(-1) == 0 {
		close(c.done)
	}
}

// started returns a function that fails b unless New succeeded, starts
// the queue and returns it: started[int](b)(queue.New(...)).
func started[T any](b *testing.B) func(*queue.Queue[T], error) *queue.Queue[T] {
	return func(q *queue.Queue[T], err error) *queue.Queue[T] {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		return q
	}
}

func reportJobs(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

func BenchmarkEnqueueRun(b *testing.B) {
	b.Run("channel", func(b *testing.B) {
		b.ReportAllocs()
		cd := newCountdown(b.N)
		ch := make(chan int, 10000) // the default capacity
		var wg sync.WaitGroup
		work := func(int) { cd.tick() }
		for range benchWorkers {
			wg.Go(func() {
				for j := range ch {
					work(j)
				}
			})
		}
		b.ResetTimer()
		for i := range b.N {
			for {
				select {
				case ch <- i:
				default:
					runtime.Gosched() // full: spin, as the queue producers do
					continue
				}
				break
			}
		}
		<-cd.done
		b.StopTimer()
		reportJobs(b)
		close(ch)
		wg.Wait()
	})
	b.Run("queue/no-key", func(b *testing.B) {
		benchQueue(b, nil)
	})
	b.Run("queue/keys", func(b *testing.B) {
		keys := make([]string, b.N)
		for i := range keys {
			keys[i] = fmt.Sprintf("infohash%08d:forwarder:peer", i)
		}
		benchQueue(b, keys)
	})
}

// BenchmarkEnqueueRunMiddleware is BenchmarkEnqueueRun's queue/no-key
// with what issue #36 adds around a job: none (the baseline), a no-op
// enqueue hook and middleware, and the same middleware with a handler
// that calls Logger (which allocates the logger it returns).
func BenchmarkEnqueueRunMiddleware(b *testing.B) {
	noopMW := func(ctx context.Context, _ *queue.JobInfo, next func(context.Context)) { next(ctx) }
	noopHook := func(context.Context, *queue.JobInfo) error { return nil }
	b.Run("none", func(b *testing.B) { benchQueue(b, nil) })
	b.Run("hook", func(b *testing.B) { benchQueue(b, nil, queue.WithEnqueueHook(noopHook)) })
	b.Run("middleware", func(b *testing.B) { benchQueue(b, nil, queue.WithMiddleware(noopMW)) })
	b.Run("middleware-logger", func(b *testing.B) {
		benchQueueWith(b, nil, func(ctx context.Context) { _ = queue.Logger(ctx) }, queue.WithMiddleware(noopMW))
	})
}

// benchQueue enqueues b.N no-op jobs (with keys[i] as key, if keys is not
// nil) from one producer and waits until all have run.
func benchQueue(b *testing.B, keys []string, opts ...queue.Option) {
	benchQueueWith(b, keys, nil, opts...)
}

// benchQueueWith is benchQueue with work, when not nil, called by each
// run's handler.
func benchQueueWith(b *testing.B, keys []string, work func(context.Context), opts ...queue.Option) {
	b.ReportAllocs()
	cd := newCountdown(b.N)
	h := func(context.Context, queue.Job[int]) error { cd.tick(); return nil }
	if work != nil {
		h = func(ctx context.Context, _ queue.Job[int]) error { work(ctx); cd.tick(); return nil }
	}
	q := started[int](b)(queue.New(h, append([]queue.Option{queue.WithWorkers(benchWorkers, benchWorkers)}, opts...)...))
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		job := queue.Job[int]{Payload: i}
		if keys != nil {
			job.Key = keys[i]
		}
		enqueueRetrying(b, q, ctx, job)
	}
	<-cd.done
	b.StopTimer()
	reportJobs(b)
	if err := q.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}

// enqueueRetrying enqueues job, yielding to the workers while the ready
// queue is full, as a producer that must not drop jobs would.
func enqueueRetrying[T any](b *testing.B, q *queue.Queue[T], ctx context.Context, job queue.Job[T]) {
	for {
		err := q.Enqueue(ctx, job)
		if err == nil {
			return
		}
		if !errors.Is(err, queue.ErrQueueFull) {
			b.Fatal(err)
		}
		runtime.Gosched()
	}
}

// BenchmarkSchedule measures EnqueueIn throughput: b.N jobs with delays
// spread over 10 s, an hour out so that none comes due while measuring.
func BenchmarkSchedule(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		name := "no-key"
		if keyed {
			name = "keys"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			// No pending bound: b.N passes the default's million.
			q := started[int](b)(queue.New(func(context.Context, queue.Job[int]) error { return nil },
				queue.WithCapacity(10000, math.MaxInt)))
			ctx := context.Background()
			delays := make([]time.Duration, b.N)
			var keys []string
			if keyed {
				keys = make([]string, b.N)
			}
			for i := range delays {
				// A scrambled order over 10 s, at 1 µs resolution.
				delays[i] = time.Hour + time.Duration((uint64(i)*2654435761)%10_000_000)*time.Microsecond
				if keyed {
					keys[i] = fmt.Sprintf("infohash%08d:forwarder:peer", i)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				job := queue.Job[int]{Payload: i}
				if keyed {
					job.Key = keys[i]
				}
				if err := q.EnqueueIn(ctx, job, delays[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportJobs(b)
			if err := q.Stop(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkScheduleRun schedules b.N jobs (no key) at instants spread
// over 10 s of fake time, then moves the fake clock through those 10 s a
// millisecond at a time, waiting at each step until every job due by then
// has run. It reports the scheduling rate (sched-jobs/s: EnqueueAt calls
// per second of real time), the rate of the whole, and the latest a job
// started after its due instant, in fake time (late-max-ms: under one step
// means each job ran at the first step at or past its time). A job that
// starts before its time fails the benchmark.
func BenchmarkScheduleRun(b *testing.B) {
	const span, step = 10 * time.Second, time.Millisecond
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := queuetest.NewFakeClock(start)
	var (
		ran     atomic.Int64
		late    atomic.Int64 // the largest lateness seen, ns of fake time
		early   atomic.Int64
		offsets = make([]time.Duration, b.N)
	)
	for i := range offsets {
		// A scrambled order over the span, at 1 µs resolution.
		offsets[i] = time.Duration((uint64(i)*2654435761)%uint64(span/time.Microsecond)) * time.Microsecond
	}
	q := started[int](b)(queue.New(func(_ context.Context, j queue.Job[int]) error {
		d := clk.Now().Sub(start.Add(offsets[j.Payload]))
		if d < 0 {
			early.Add(1)
		}
		for l := late.Load(); d > time.Duration(l) && !late.CompareAndSwap(l, int64(d)); l = late.Load() {
		}
		ran.Add(1)
		return nil
	}, queue.WithClock(clk), queue.WithWorkers(benchWorkers, benchWorkers), queue.WithCapacity(10000, math.MaxInt)))
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	t0 := time.Now()
	for i, off := range offsets {
		if err := q.EnqueueAt(ctx, queue.Job[int]{Payload: i}, start.Add(off)); err != nil {
			b.Fatal(err)
		}
	}
	scheduling := time.Since(t0)
	due := slices.Clone(offsets)
	slices.Sort(due)
	for now, n := time.Duration(0), 0; n < len(due); {
		clk.Advance(step)
		now += step
		for n < len(due) && due[n] <= now {
			n++
		}
		for ran.Load() < int64(n) {
			runtime.Gosched()
		}
	}
	b.StopTimer()
	if e := early.Load(); e > 0 {
		b.Fatalf("%d jobs started before their time", e)
	}
	b.ReportMetric(float64(b.N)/scheduling.Seconds(), "sched-jobs/s")
	reportJobs(b)
	b.ReportMetric(float64(late.Load())/float64(time.Millisecond), "late-max-ms")
	if err := q.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkScheduleLateness runs scheduled jobs on the real clock: b.N
// jobs scheduled at 10 000 per second, each due a delay after it is
// scheduled (uniform in [0, 100 ms), fixed seed), so that about 10 000
// come due each second; 10 workers. It reports each job's lateness (its
// start, read in the handler, minus its due instant) at p50, p99 and the
// maximum. A job that starts before its time fails the benchmark. Run it
// with a fixed count of jobs, e.g. -benchtime 20000x (2 s).
func BenchmarkScheduleLateness(b *testing.B) {
	const rate = 10_000                   // jobs scheduled, and so due, per second
	const spread = 100 * time.Millisecond // delays are uniform in [0, spread)
	due := make([]time.Time, b.N)
	late := make([]time.Duration, b.N)
	var wg sync.WaitGroup
	wg.Add(b.N)
	q := started[int](b)(queue.New(func(_ context.Context, j queue.Job[int]) error {
		late[j.Payload] = time.Since(due[j.Payload])
		wg.Done()
		return nil
	}, queue.WithWorkers(benchWorkers, benchWorkers)))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	delays := make([]time.Duration, b.N)
	for i := range delays {
		delays[i] = time.Duration(rng.Int64N(int64(spread)))
	}
	// A ticker paces the producer: at each tick it schedules every job
	// whose turn has come, so the pace holds on average, in bursts of
	// about 1 ms.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	b.ResetTimer()
	t0 := time.Now()
	for i := 0; i < b.N; <-tick.C {
		for ; i < b.N && time.Since(t0) >= time.Duration(i)*time.Second/rate; i++ {
			due[i] = time.Now().Add(delays[i])
			if err := q.EnqueueAt(ctx, queue.Job[int]{Payload: i}, due[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	wg.Wait()
	b.StopTimer()
	if err := q.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	slices.Sort(late)
	if late[0] < 0 {
		b.Fatalf("a job started %v before its time", -late[0])
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(late[len(late)/2]), "late-p50-ms")
	b.ReportMetric(ms(late[len(late)*99/100]), "late-p99-ms")
	b.ReportMetric(ms(late[len(late)-1]), "late-max-ms")
}

// BenchmarkScheduledHeld reports the heap held per scheduled job, beyond
// its payload (an int) and its key string, with at least a million jobs.
func BenchmarkScheduledHeld(b *testing.B) {
	for _, keyed := range []bool{false, true} {
		name := "no-key"
		if keyed {
			name = "keys"
		}
		b.Run(name, func(b *testing.B) {
			n := max(b.N, 1_000_000)
			var keys []string
			if keyed {
				keys = make([]string, n)
				for i := range keys {
					keys[i] = fmt.Sprintf("infohash%08d:forwarder:peer", i)
				}
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(1, math.MaxInt))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := range n {
				job := queue.Job[int]{Payload: i}
				if keyed {
					job.Key = keys[i]
				}
				if err := q.EnqueueIn(ctx, job, time.Hour+time.Duration(i%10000)*time.Millisecond); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			if got := q.Stats().Store.Scheduled; got != n {
				b.Fatalf("scheduled %d, want %d", got, n)
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "B/job")
			runtime.KeepAlive(keys)
			if err := q.Stop(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkStatsHeldKeys measures Stats with a million keyed jobs
// scheduled (every metrics scrape calls it, and it counts the keys by
// walking them), and what it does to Enqueue meanwhile: the benchmark
// schedules and cancels jobs of other keys, alone and while another
// goroutine calls Stats in a loop, and reports the slowest pair too.
func BenchmarkStatsHeldKeys(b *testing.B) {
	const held = 1_000_000
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(1, 2*held))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range held {
		if err := q.EnqueueIn(ctx, queue.Job[int]{Key: fmt.Sprintf("infohash%08d:forwarder:peer", i)}, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("stats", func(b *testing.B) {
		for b.Loop() {
			if got := q.Stats().Store.PendingKeys; got != held {
				b.Fatalf("pending keys %d, want %d", got, held)
			}
		}
	})
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = fmt.Sprintf("other%08d", i)
	}
	for _, withStats := range []bool{false, true} {
		name := "enqueue-cancel"
		if withStats {
			name = "enqueue-cancel-during-stats"
		}
		b.Run(name, func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if withStats {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
							q.Stats()
						}
					}
				})
			}
			var slowest time.Duration
			i := 0
			for b.Loop() {
				k := keys[i%len(keys)]
				i++
				start := time.Now()
				if err := q.EnqueueIn(ctx, queue.Job[int]{Key: k}, time.Hour); err != nil {
					b.Fatal(err)
				}
				if _, err := q.Cancel(ctx, k); err != nil {
					b.Fatal(err)
				}
				slowest = max(slowest, time.Since(start))
			}
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(slowest.Microseconds()), "slowest-µs")
		})
	}
	if err := q.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkAdmit(b *testing.B) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(100, 0))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = q.Stop(context.Background()) }()
	for range 50 { // 50 %: below the default 80 % threshold
		if err := q.Enqueue(context.Background(), queue.Job[int]{}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("below-threshold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := q.Admit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("engaged", func(b *testing.B) {
		q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(100, 0),
			queue.WithRateLimit(queue.RateLimit{PerSecond: 1e9, Burst: 1000}))
		if err != nil {
			b.Fatal(err)
		}
		defer func() { _ = q.Stop(context.Background()) }()
		for range 90 { // 90 %: the token bucket decides
			if err := q.Enqueue(context.Background(), queue.Job[int]{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := q.Admit(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("below-threshold/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := q.Admit(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkFanout100(b *testing.B) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = q.Stop(context.Background()) }()
	cands := make([]string, 100)
	for i := range cands {
		cands[i] = fmt.Sprintf("udp://tracker%03d.example:6969/announce", i)
		// Make every target known, as in a running forwarder.
		if err := q.Suspend(cands[i], time.Nanosecond); err != nil {
			b.Fatal(err)
		}
	}
	// Ten targets were announced to for this key and are not due again yet.
	for _, c := range cands[:10] {
		q.SetNextDue(c, "infohash", time.Now().Add(time.Hour))
	}
	b.ReportAllocs()
	for b.Loop() {
		if got := q.Fanout("infohash", cands); len(got) != 90 {
			b.Fatalf("got %d targets", len(got))
		}
	}
}

func BenchmarkClassifyHTTP(b *testing.B) {
	dns := &net.DNSError{Err: "no such host", Name: "tracker.invalid", IsNotFound: true}
	cases := []struct {
		name   string
		status int
		err    error
	}{
		{"200", 200, nil},
		{"429", 429, nil},
		{"404", 404, nil},
		{"503", 503, nil},
		{"dns", 0, dns},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = queue.ClassifyHTTP(tc.status, tc.err)
			}
		})
	}
}

// BenchmarkEnqueueDuplicate measures the refusal of a duplicate: a key
// already queued (a forwarder's peer re-announcing before its last
// announce was forwarded), and a group whose scheduled job waits. Both
// are as frequent as accepted jobs in a forwarder, so they must not
// allocate.
func BenchmarkEnqueueDuplicate(b *testing.B) {
	for _, byGroup := range []bool{false, true} {
		name := "key"
		if byGroup {
			name = "group"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			held := queue.Job[int]{Key: "infohash00000001:forwarder:peer"}
			dup := held
			if byGroup {
				held.Group = "infohash00000001:forwarder"
				dup = queue.Job[int]{Key: "infohash00000001:forwarder:other", Group: held.Group}
			}
			if err := q.EnqueueIn(ctx, held, time.Hour); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if err := q.EnqueueIn(ctx, dup, time.Hour); !errors.Is(err, queue.ErrDuplicate) {
					b.Fatal(err)
				}
			}
			if err := q.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkEnqueueRunPriorities is EnqueueRun/queue/no-key with the jobs
// spread over the three default priorities (high, normal, low in turn),
// under strict and under weighted (6:3:1, the default) dispatch, side by
// side so that one run compares their cost per job.
func BenchmarkEnqueueRunPriorities(b *testing.B) {
	strict := queue.DefaultPriorities()
	for i := range strict {
		strict[i].Share = 0
	}
	labels := []string{"high", "normal", "low"}
	for _, c := range []struct {
		name string
		opt  queue.Option
	}{
		{"strict", queue.WithPriorities("", strict...)},
		{"weighted", queue.WithPriorities("", queue.DefaultPriorities()...)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			cd := newCountdown(b.N)
			q := started[int](b)(queue.New(func(context.Context, queue.Job[int]) error { cd.tick(); return nil },
				queue.WithWorkers(benchWorkers, benchWorkers), c.opt))
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				job := queue.Job[int]{Payload: i, Priority: labels[i%3]}
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

// BenchmarkStoreClaimPriorities is the in-memory store's add, claim and
// complete of one job from one goroutine, each claimed job replaced by one
// of its priority so that all three default priorities stay ready, strict and weighted side by side: the claim path's
// own cost, without the workers' scheduling noise of EnqueueRunPriorities.
func BenchmarkStoreClaimPriorities(b *testing.B) {
	labels := []string{"high", "normal", "low"}
	for _, c := range []struct {
		name   string
		shares []int
	}{{"strict", []int{0, 0, 0}}, {"weighted", []int{6, 3, 1}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			s := memstore.New[int]()
			cfg := storetest.Config("bench", 1000, queuetest.NewFakeClock(time.Unix(1e9, 0)), func(queue.Event) {})
			for i := range cfg.Priorities {
				cfg.Priorities[i].Share = c.shares[i]
			}
			if err := s.Init(cfg); err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := range 300 { // every priority has ready jobs throughout
				if _, err := s.Add(ctx, queue.Job[int]{Priority: labels[i%3]}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := range b.N {
				j, err := s.Claim(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Complete(ctx, j); err != nil {
					b.Fatal(err)
				}
				if _, err := s.Add(ctx, queue.Job[int]{Priority: j.Priority, Payload: i}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
