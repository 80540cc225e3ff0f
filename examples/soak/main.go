// Command soak runs a tracker-forwarder-like workload on the in-memory
// queue for a long time and checks that the queue keeps its promises under
// it: no accepted job is lost, no key runs twice at once, and neither
// memory nor goroutines grow without bound.
//
//	go run ./examples/soak            # 10 minutes
//	go run ./examples/soak -d 1h      # longer
//
// Producers announce (hash, peer) pairs: Admit, then Fanout over ten
// targets, then one keyed job per chosen target, now or scheduled, with
// a group per (hash, target) and a next-due time per (pair, target).
// Targets behave like the forwarder demo's upstreams: fast, slow, 429
// (suspended), 404 (disabled, resumed later), "retry in", flaky (errors
// and panics) and "retry in: an hour" (done). Peers leave (CancelMatch) and
// single announces are withdrawn (Cancel).
//
// Every 10 s (-every) it prints throughput, heap in use, goroutines and
// pending keys. At the end it stops the producers, lets the backlog run
// out, stops the queue and checks the accounts: every accepted job ended
// as done, dead or cancelled. It exits with status 1 if a check failed:
// a job lost or run twice at once, or the heap or the goroutine count of
// the last fifth of the run above -growth times (plus a slack) that of an
// early window (20-40 % of the run).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue"
)

// config is the soak's settings; the flags set them.
type config struct {
	duration  time.Duration // how long producers run
	every     time.Duration // report interval
	producers int
	rate      int // announces per second per producer
	hashes    int // distinct info-hashes
	peers     int // distinct peers
	capacity  int
	workers   int
	growth    float64 // allowed late/early ratio of heap and goroutines
}

func defaultConfig() config {
	return config{
		duration: 10 * time.Minute, every: 10 * time.Second,
		producers: 4, rate: 400, hashes: 200, peers: 50,
		capacity: 20000, workers: 8, growth: 2,
	}
}

func main() {
	cfg := defaultConfig()
	flag.DurationVar(&cfg.duration, "d", cfg.duration, "how long to run the workload")
	flag.DurationVar(&cfg.every, "every", cfg.every, "report interval")
	flag.IntVar(&cfg.producers, "producers", cfg.producers, "producer goroutines")
	flag.IntVar(&cfg.rate, "rate", cfg.rate, "announces per second per producer")
	flag.IntVar(&cfg.capacity, "capacity", cfg.capacity, "queue capacity")
	flag.IntVar(&cfg.workers, "workers", cfg.workers, "base workers (max is 4×)")
	flag.Float64Var(&cfg.growth, "growth", cfg.growth, "allowed late/early ratio of heap and goroutines")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "soak: FAIL:", err)
		os.Exit(1)
	}
	fmt.Println("soak: PASS")
}

// targets and how they answer (see handle).
var targets = []string{"fast-1", "fast-2", "fast-3", "fast-4", "slow-1", "slow-2", "busy-429", "gone-404", "retry-in", "flaky"}

// soak is one run: the queue, the workload's own tallies, the samples.
type soak struct {
	cfg config
	q   *queue.Queue[announce]

	accepted   atomic.Uint64 // Enqueue returned nil
	refused    atomic.Uint64 // ErrQueueFull, ErrDuplicate
	admitted   atomic.Uint64
	limited    atomic.Uint64
	twice      atomic.Uint64 // a key found already running
	unexpected atomic.Uint64 // Enqueue errors other than full and duplicate
	running    sync.Map      // key -> struct{}: keys whose handler runs
	draining   atomic.Bool   // the end: every run succeeds at once
	events     [16]atomic.Uint64
	idLessEnd  atomic.Uint64

	mu      sync.Mutex
	samples []sample
}

type announce struct {
	Hash, Peer string
	Left       bool
}

type sample struct {
	at         time.Duration
	heap       uint64
	goroutines int
	st         queue.Stats
}

// run runs the soak and returns its samples, or an error naming the
// failed checks.
func run(ctx context.Context, cfg config, out io.Writer) ([]sample, error) {
	s := &soak{cfg: cfg}
	q, err := queue.New(s.handle,
		queue.WithName("soak"),
		queue.WithCapacity(cfg.capacity, 0),
		queue.WithWorkers(cfg.workers, 4*cfg.workers),
		queue.WithScaling(queue.ScaleByFill, 0, 0, 250*time.Millisecond),
		queue.WithRetry(3, 20*time.Millisecond, 400*time.Millisecond),
		queue.WithRequeueDelay(100*time.Millisecond),
		queue.WithSuspend(time.Second, nil),
		queue.WithCircuitBreaker(20, time.Second, 2),
		queue.WithRateLimit(queue.RateLimit{FillPct: 80, PerSecond: float64(cfg.producers * cfg.rate), Burst: cfg.producers * cfg.rate}),
		queue.WithFanout(4, 60, 2),
		queue.WithObserver(s.observe),
	)
	if err != nil {
		return nil, err
	}
	s.q = q
	if err := q.Start(context.Background()); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "soak: %s, %d producers × %d announces/s, capacity %d, workers %d..%d\n",
		cfg.duration, cfg.producers, cfg.rate, cfg.capacity, cfg.workers, 4*cfg.workers)

	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	for i := range cfg.producers {
		wg.Add(1)
		go func() { defer wg.Done(); s.produce(runCtx, uint64(i)) }()
	}
	wg.Add(2)
	go func() { defer wg.Done(); s.churn(runCtx) }()
	go func() { defer wg.Done(); s.resumer(runCtx) }()
	s.watch(runCtx, out)
	wg.Wait()

	errs := s.finish(out)
	s.mu.Lock()
	samples := slices.Clone(s.samples)
	s.mu.Unlock()
	errs = append(errs, checkGrowth(samples, cfg)...)
	return samples, errors.Join(errs...)
}

// handle answers like the target the job is for.
func (s *soak) handle(ctx context.Context, j queue.Job[announce]) error {
	if _, loaded := s.running.LoadOrStore(j.Key, struct{}{}); loaded {
		s.twice.Add(1)
	}
	defer s.running.Delete(j.Key)
	if s.draining.Load() {
		return nil
	}
	r := rand.IntN(100)
	switch j.Target {
	case "slow-1", "slow-2":
		t := time.NewTimer(time.Duration(1+rand.IntN(3)) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	case "busy-429":
		if r < 20 {
			return queue.Overloaded(&queue.HTTPError{Status: 429})
		}
	case "gone-404":
		if r < 50 {
			return queue.ClassifyHTTP(404, nil)
		}
	case "retry-in":
		if j.Attempt == 1 && r < 50 {
			if r < 5 {
				return queue.RetryAfter(time.Hour, nil) // past the ceiling: done
			}
			return queue.RetryAfter(time.Duration(100+r*5)*time.Millisecond, nil)
		}
	case "flaky":
		switch {
		case r < 2:
			panic("soak: flaky target panicked")
		case r < 30:
			return errors.New("soak: flaky target failed")
		case r < 32:
			return queue.Permanent(errors.New("soak: bad request"))
		}
	}
	return nil
}

func (s *soak) observe(ev queue.Event) {
	if int(ev.Kind) < len(s.events) {
		s.events[ev.Kind].Add(1)
	}
	if ev.Kind == queue.EventCancelled && ev.JobID == 0 {
		s.idLessEnd.Add(1)
	}
}

// produce announces at cfg.rate per second until ctx ends.
func (s *soak) produce(ctx context.Context, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 42))
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	per := max(s.cfg.rate/100, 1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for range per {
			s.announce(ctx, rng)
		}
	}
}

func (s *soak) announce(ctx context.Context, rng *rand.Rand) {
	if err := s.q.Admit(); err != nil {
		s.limited.Add(1)
		return
	}
	s.admitted.Add(1)
	a := announce{Hash: fmt.Sprintf("h%03d", rng.IntN(s.cfg.hashes)), Peer: fmt.Sprintf("p%02d", rng.IntN(s.cfg.peers))}
	pair := a.Hash + ":" + a.Peer
	for _, t := range s.q.Fanout(pair, targets) {
		job := queue.Job[announce]{Key: pair + ":" + t, Group: a.Hash + ":" + t, Target: t, Payload: a}
		if rng.IntN(10) == 0 {
			job.Priority = "high"
		}
		var err error
		if rng.IntN(4) == 0 {
			err = s.q.EnqueueIn(ctx, job, time.Duration(100+rng.IntN(1900))*time.Millisecond)
		} else {
			err = s.q.Enqueue(ctx, job)
		}
		switch {
		case err == nil:
			s.accepted.Add(1)
			if rng.IntN(3) == 0 {
				s.q.SetNextDue(t, pair, time.Now().Add(time.Duration(1+rng.IntN(3))*time.Second))
			}
		case errors.Is(err, queue.ErrQueueFull), errors.Is(err, queue.ErrDuplicate):
			s.refused.Add(1)
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			return // the run is ending: Enqueue refuses a done ctx, accepting nothing
		default:
			s.unexpected.Add(1)
		}
	}
}

// churn makes peers leave (CancelMatch) and withdraws single announces
// (Cancel), 20 times a second in all.
func (s *soak) churn(ctx context.Context) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		switch i % 3 {
		case 0: // a peer leaves every swarm
			peer := fmt.Sprintf(":p%02d:", rand.IntN(s.cfg.peers))
			_, _ = s.q.CancelMatch(ctx, func(k string) bool { return strings.Contains(k, peer) })
		case 1: // a peer leaves one swarm
			prefix := fmt.Sprintf("h%03d:p%02d:", rand.IntN(s.cfg.hashes), rand.IntN(s.cfg.peers))
			_, _ = s.q.CancelMatch(ctx, func(k string) bool { return strings.HasPrefix(k, prefix) })
		default:
			key := fmt.Sprintf("h%03d:p%02d:%s", rand.IntN(s.cfg.hashes), rand.IntN(s.cfg.peers), targets[rand.IntN(len(targets))])
			_, _ = s.q.Cancel(ctx, key)
		}
	}
}

// resumer re-enables the targets the 404s disabled, every 2 s, as an
// operator (or the forwarder's health check) would.
func (s *soak) resumer(ctx context.Context) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, t := range targets {
			if st, ok := s.q.Target(t); ok && st.Disabled {
				_ = s.q.Resume(t)
			}
		}
	}
}

// watch samples memory, goroutines and the queue's stats until ctx ends,
// and prints a report every cfg.every.
func (s *soak) watch(ctx context.Context, out io.Writer) {
	start := time.Now()
	step := min(time.Second, max(s.cfg.duration/50, 10*time.Millisecond))
	tick := time.NewTicker(step)
	defer tick.Stop()
	lastReport, lastEnded := time.Duration(0), uint64(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		sm := sample{at: time.Since(start), heap: ms.HeapInuse, goroutines: runtime.NumGoroutine(), st: s.q.Stats()}
		s.mu.Lock()
		s.samples = append(s.samples, sm)
		s.mu.Unlock()
		if sm.at-lastReport >= s.cfg.every {
			ended := sm.st.Done + sm.st.Dead + sm.st.Cancelled
			rate := float64(ended-lastEnded) / (sm.at - lastReport).Seconds()
			fmt.Fprintf(out, "%7s  %8.0f jobs/s  heap %6.1f MiB  goroutines %4d  pending keys %6d  ready %5d  scheduled %5d  running %3d  workers %3d  enqueued %d done %d dead %d cancelled %d refused %d limited %d\n",
				sm.at.Round(time.Second), rate, float64(sm.heap)/(1<<20), sm.goroutines, sm.st.Store.PendingKeys,
				sm.st.Depth, sm.st.Store.Scheduled, sm.st.Running, sm.st.Workers,
				sm.st.Enqueued, sm.st.Done, sm.st.Dead, sm.st.Cancelled, s.refused.Load(), s.limited.Load())
			lastReport, lastEnded = sm.at, ended
		}
	}
}

// finish lets the backlog run out with every target healthy, stops the
// queue, and checks the accounts.
func (s *soak) finish(out io.Writer) []error {
	q := s.q
	s.draining.Store(true)
	for _, t := range targets {
		_ = q.Resume(t)
	}
	deadline := time.Now().Add(30 * time.Second)
	var st queue.Stats
	for {
		st = q.Stats()
		if st.Depth+st.Store.Scheduled+st.Running+st.Store.Waiting == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // a real program, waiting on real time
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if err := q.Stop(ctx); err != nil {
		errs = append(errs, fmt.Errorf("stopping the queue: %w", err))
	}
	st = q.Stats()
	ended := st.Done + st.Dead + st.Cancelled
	fmt.Fprintf(out, "final: enqueued %d = done %d + dead %d + cancelled %d (+ ready %d, scheduled %d, waiting %d, running %d); coalesced %d, dropped %d, requeued %d, deferred %d, retried %d, panics %d; refused %d, admitted %d, rate limited %d\n",
		st.Enqueued, st.Done, st.Dead, st.Cancelled, st.Depth, st.Store.Scheduled, st.Store.Waiting, st.Running,
		st.Coalesced, st.DroppedFull, st.Requeued, st.Deferred, st.Retried, st.Panics,
		s.refused.Load(), s.admitted.Load(), s.limited.Load())
	if st.Enqueued != s.accepted.Load() {
		errs = append(errs, fmt.Errorf("the queue counted %d accepted jobs, the producers %d", st.Enqueued, s.accepted.Load()))
	}
	if live := st.Depth + st.Store.Scheduled + st.Store.Waiting + st.Running; live != 0 || st.Enqueued != ended {
		errs = append(errs, fmt.Errorf("lost jobs: enqueued %d, ended %d, still held %d after the backlog ran out", st.Enqueued, ended, live))
	}
	ev := func(k queue.EventKind) uint64 { return s.events[k].Load() }
	if ev(queue.EventDone) != st.Done || ev(queue.EventDead) != st.Dead || ev(queue.EventCancelled) != st.Cancelled {
		errs = append(errs, fmt.Errorf("events disagree with counters: done %d/%d dead %d/%d cancelled %d/%d",
			ev(queue.EventDone), st.Done, ev(queue.EventDead), st.Dead, ev(queue.EventCancelled), st.Cancelled))
	}
	if ev(queue.EventEnqueued)+ev(queue.EventCoalesced) != st.Enqueued {
		errs = append(errs, fmt.Errorf("enqueued events %d != counter %d", ev(queue.EventEnqueued)+ev(queue.EventCoalesced), st.Enqueued))
	}
	if n := s.unexpected.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d Enqueue calls failed with an unexpected error", n))
	}
	if n := s.twice.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("a key ran twice at once %d times", n))
	}
	if st.Panics == 0 || st.Dead == 0 || st.Cancelled == 0 || st.Coalesced == 0 || st.Retried == 0 {
		fmt.Fprintln(out, "note: some outcomes never happened; run longer for a full mix")
	}
	return errs
}

// checkGrowth compares the heap and goroutine count of the last fifth of
// the run with an early window (20-40 %, after warm-up).
func checkGrowth(samples []sample, cfg config) []error {
	if len(samples) < 10 {
		return nil
	}
	end := samples[len(samples)-1].at
	window := func(from, to float64) (heap, goroutines float64) {
		n := 0
		for _, sm := range samples {
			if f := float64(sm.at) / float64(end); f >= from && f <= to {
				heap += float64(sm.heap)
				goroutines += float64(sm.goroutines)
				n++
			}
		}
		return heap / float64(max(n, 1)), goroutines / float64(max(n, 1))
	}
	earlyHeap, earlyG := window(0.2, 0.4)
	lateHeap, lateG := window(0.8, 1)
	var errs []error
	const heapSlack = 32 << 20 // GC timing alone moves the heap by megabytes
	if lateHeap > cfg.growth*earlyHeap+heapSlack {
		errs = append(errs, fmt.Errorf("heap grew from %.1f MiB to %.1f MiB", earlyHeap/(1<<20), lateHeap/(1<<20)))
	}
	if slack := float64(4*cfg.workers + 20); lateG > cfg.growth*earlyG+slack { // the pool may scale up meanwhile
		errs = append(errs, fmt.Errorf("goroutines grew from %.0f to %.0f", earlyG, lateG))
	}
	return errs
}
