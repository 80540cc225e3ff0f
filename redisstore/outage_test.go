package redisstore

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// proxiedClient returns a client through p with short timeouts, so that an
// outage is noticed in well under a second.
func proxiedClient(t *testing.T, p *storetest.Proxy) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr: p.Addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		PoolTimeout: 500 * time.Millisecond, MaxRetries: 1,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestOutageFallback cuts the connection to Redis while 10 000 jobs are
// being enqueued and worked through the queue engine: every job runs
// exactly once, the jobs taken during the outage are written back, and the
// store returns to Redis.
func TestOutageFallback(t *testing.T) {
	direct := needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	c := proxiedClient(t, p)
	prefix := testPrefix(t, direct)
	s, err := New[int](c, WithPrefix(prefix), WithHealthCheck(100*time.Millisecond, 300*time.Millisecond),
		WithLeaseTTL(3*time.Second), WithFallback(20000), WithPollInterval(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	const total = 10000
	var mu sync.Mutex
	runs := make([]int, total)
	ran := 0
	allRan := make(chan struct{})
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[int]) error {
		mu.Lock()
		defer mu.Unlock()
		runs[j.Payload]++
		if ran++; ran == total {
			close(allRan)
		}
		return nil
	}, queue.WithWorkers(8, 8), queue.WithCapacity(100000, 0), queue.WithLogger(quietLogger()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := q.Stop(sctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
		_ = s.Close(sctx)
	}()

	// Four producers pace themselves (at most 4 jobs per ms) so that the
	// outage falls in the middle of the enqueueing; every fifth job is
	// scheduled 1.5 s ahead, so the fallback holds jobs that have not run
	// when Redis returns. enqueued counts the jobs accepted, and fellBack
	// is closed once one of them was accepted by the fallback: the test
	// waits for that progress, never for a length of time.
	var next atomic.Int64
	var enqueued queuetest.Counter
	fellBack := make(chan struct{})
	var fellBackOnce sync.Once
	var wg sync.WaitGroup
	var enqErr atomic.Pointer[error]
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				n := next.Add(1) - 1
				if n >= total {
					return
				}
				j := queue.Job[int]{Payload: int(n)}
				if n%5 == 0 {
					j.RunAt = time.Now().Add(1500 * time.Millisecond) // some wait in the schedule
				}
				if err := q.Enqueue(ctx, j); err != nil {
					enqErr.Store(&err)
					return
				}
				enqueued.Add()
				if s.nFallback.Load() > 0 {
					fellBackOnce.Do(func() { close(fellBack) })
				}
			}
		})
	}
	defer func() { // on a failure, before the queue stops
		close(stop)
		wg.Wait()
	}()
	queuetest.Await(t, enqueued.Reached(total/4), 60*time.Second, "a quarter of the jobs enqueued before the outage")
	p.Down()
	cutAt := enqueued.Load()
	// The outage lasts until the store has switched to the fallback and
	// the producers have enqueued another quarter of the jobs meanwhile.
	queuetest.Await(t, fellBack, 30*time.Second, "the fallback to accept a job during the outage")
	queuetest.Await(t, enqueued.Reached(min(cutAt+total/4, total)), 60*time.Second, "another quarter of the jobs enqueued during the outage")
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatalf("Stats during the outage: %v", err)
	}
	if st.Healthy || !strings.Contains(st.Detail, "fallback") {
		t.Errorf("Stats during the outage: healthy %v, detail %q; want unhealthy on the fallback", st.Healthy, st.Detail)
	}
	restoreAt := enqueued.Load()
	p.Up()
	t0 := time.Now()
	wg.Wait()
	t.Logf("producers done %v after restore", time.Since(t0))
	if e := enqErr.Load(); e != nil {
		t.Fatalf("Enqueue: %v", *e)
	}
	t.Logf("outage while jobs %d..%d were enqueued; %s", cutAt, restoreAt, st.Detail)
	select {
	case <-allRan:
	case <-time.After(60 * time.Second):
		mu.Lock()
		n := ran
		mu.Unlock() // the handlers still take mu while the queue stops
		t.Fatalf("only %d of %d jobs ran", n, total)
	}
	t.Logf("all ran %v after restore; %d jobs went to the fallback, %d written back, %d finishes recorded late",
		time.Since(t0), s.nFallback.Load(), s.nWrittenBack.Load(), s.nFlushed.Load())
	mu.Lock()
	for n, c := range runs {
		if c != 1 {
			t.Errorf("job %d ran %d times", n, c)
		}
	}
	mu.Unlock()
	// The fallback drains back to Redis and the store switches back. The
	// store notices Redis is back by its periodic health check, with no
	// event for the end of the write-back, and Stats reads the counts
	// from Redis: polled.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := s.Stats(ctx)
		require.NoError(c, err)
		assert.True(c, st.Healthy && st.Detail == "redis: ok" && st.Ready == 0 && st.Running == 0 && st.Scheduled == 0,
			"after the outage: %+v; want healthy, empty, fallback drained", st)
	}, 10*time.Second, pollTick)
	mu.Lock()
	defer mu.Unlock()
	if ran != total {
		t.Fatalf("%d runs, want %d", ran, total)
	}
}

// TestAddFallbackOff: with the fallback off, Add during an outage returns
// the connection error instead of accepting the job.
func TestAddFallbackOff(t *testing.T) {
	needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	c := proxiedClient(t, p)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)), WithFallback(0))
	ctx := context.Background()
	if _, err := s.Add(ctx, queue.Job[int]{Payload: 1}); err != nil {
		t.Fatal(err)
	}
	p.Down()
	_, err := s.Add(ctx, queue.Job[int]{Payload: 2})
	if err == nil || errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("Add during an outage without fallback = %v, want the connection error", err)
	}
	p.Up()
}

// downFromTheStart runs t in parallel and returns a store whose Redis is
// unreachable from the start (through a proxy that is down), so that it
// works on its in-memory fallback.
func downFromTheStart(t *testing.T) *Store[int] {
	t.Helper()
	return downWithClock(t, nil, nil)
}

// TestFallbackDeferSuperseded: in the fallback too, a coalesced rerun
// supersedes a Defer of the running job, as it does a Retry (see
// testDeferSuperseded in storetest.Run).
func TestFallbackDeferSuperseded(t *testing.T) {
	s := downFromTheStart(t)
	ctx := context.Background()
	for _, retry := range []bool{false, true} {
		if _, err := s.Add(ctx, queue.Job[int]{Key: "k", Payload: 1}); err != nil {
			t.Fatal(err)
		}
		j := claimWithin(t, s, time.Second)
		if a, err := s.Add(ctx, queue.Job[int]{Key: "k", Payload: 2}); err != nil || !a.Coalesced {
			t.Fatalf("Add of a running key = %+v, %v; want coalesced", a, err)
		}
		var err error
		if retry {
			err = s.Retry(ctx, j, time.Now().Add(time.Minute), errors.New("boom"))
		} else {
			err = s.Defer(ctx, j, time.Now().Add(time.Minute), nil)
		}
		if !errors.Is(err, storekit.ErrSuperseded) {
			t.Fatalf("retry %v with a waiting rerun = %v, want ErrSuperseded", retry, err)
		}
		r := claimWithin(t, s, time.Second)
		if r.Payload != 2 {
			t.Fatalf("claimed %+v, want the rerun", r)
		}
		must(t, s.Complete(ctx, r))
		if st, _ := s.Stats(ctx); st.Scheduled != 0 || st.PendingKeys != 0 {
			t.Fatalf("Stats = %+v; want the superseded job gone and the key free", st)
		}
	}
}

// TestFallbackGroups: the fallback applies the in-memory group rules: a
// retry, a deferral or a rerun does not take its group (see
// testGroupHeldOnlyByAddedJob in storetest.Run).
func TestFallbackGroups(t *testing.T) {
	s := downFromTheStart(t)
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	add := func(j queue.Job[int]) storekit.Added {
		t.Helper()
		a, err := s.Add(ctx, j)
		if err != nil {
			t.Fatalf("Add(%+v): %v", j, err)
		}
		return a
	}
	add(queue.Job[int]{Key: "r", Group: "g1"})
	add(queue.Job[int]{Key: "d", Group: "g2"})
	must(t, s.Retry(ctx, claimWithin(t, s, time.Second), later, errors.New("boom")))
	must(t, s.Defer(ctx, claimWithin(t, s, time.Second), later, nil))
	add(queue.Job[int]{Key: "c"})
	j := claimWithin(t, s, time.Second)
	add(queue.Job[int]{Key: "c", Group: "g3", RunAt: later})
	must(t, s.Complete(ctx, j))
	for _, g := range []string{"g1", "g2", "g3"} {
		add(queue.Job[int]{Key: "new-" + g, Group: g, RunAt: later})
		if _, err := s.Add(ctx, queue.Job[int]{Key: "dup-" + g, Group: g, RunAt: later}); !errors.Is(err, queue.ErrDuplicate) {
			t.Fatalf("a second scheduled job of group %s = %v, want ErrDuplicate", g, err)
		}
	}
}

// TestRecoveryRenewsLeases: heartbeats skip a shard while it is down, so
// an outage shorter than the lease TTL could leave a job that still runs
// here with a lease about to expire when Redis answers again, for the
// leader to rescue and run a second time. The store renews its leases
// first thing when the shard comes back.
func TestRecoveryRenewsLeases(t *testing.T) {
	direct := needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	c := proxiedClient(t, p)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(testPrefix(t, direct)), WithLeaseTTL(30*time.Second),
		WithHealthCheck(50*time.Millisecond, 200*time.Millisecond))
	ctx := context.Background()
	if _, err := s.Add(ctx, queue.Job[int]{Key: "k", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	j := claimWithin(t, s, 5*time.Second) // leased until +30s
	p.Down()
	// The heartbeat fails and takes the shard down (or finds it down).
	lost, err := s.Heartbeat(ctx, []int64{j.ID})
	if err != nil || len(lost) != 0 || s.shards[0].healthy.Load() {
		t.Fatalf("Heartbeat during the outage = %v, %v, shard healthy %v; want nothing lost, the shard down",
			lost, err, s.shards[0].healthy.Load())
	}
	clk.Advance(20 * time.Second) // two thirds of the lease pass in the outage
	p.Up()
	// The store notices Redis answers again by its periodic health check,
	// with no event for it: polled.
	require.Eventually(t, func() bool { return s.shards[0].healthy.Load() }, 10*time.Second, pollTick,
		"the shard healthy again")
	clk.Advance(15 * time.Second) // past the claim's lease, not past one renewed at recovery
	_, err = s.RescueExpired(ctx)
	must(t, err)
	if lost, err := s.Heartbeat(ctx, []int64{j.ID}); err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat after the outage = %v, %v; want the lease still held", lost, err)
	}
	must(t, s.Complete(ctx, j))
}

// downWithClock is downFromTheStart with the clock clk (nil for the
// system clock) and the configuration changed by mutate (nil for none).
func downWithClock(t *testing.T, clk queue.Clock, mutate func(*storekit.Config)) *Store[int] {
	t.Helper()
	direct := needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	p.Down()
	c := proxiedClient(t, p)
	return openStoreCfg(t, c, clk, mutate, WithPrefix(testPrefix(t, direct)), WithConnect(300*time.Millisecond, true))
}

// TestFallbackSameInstantFIFO: jobs the fallback schedules for the same
// instant run in the order they were added, as in the in-memory store,
// whose schedule (due time, then ID) the fallback uses.
func TestFallbackSameInstantFIFO(t *testing.T) {
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := downWithClock(t, clk, nil)
	ctx := context.Background()
	at := clk.Now().Add(time.Minute)
	var want, got []int
	for i := range 8 {
		a, err := s.Add(ctx, queue.Job[int]{Payload: i, RunAt: at})
		require.NoError(t, err)
		require.True(t, a.Scheduled)
		want = append(want, i)
	}
	clk.Advance(time.Minute)
	for range want {
		j := claimWithin(t, s, 5*time.Second)
		got = append(got, j.Payload)
		must(t, s.Complete(ctx, j))
	}
	assert.Equal(t, want, got)
}

// TestFallbackRequeuesWhenFull: the fallback promotes a due job only if
// its ready jobs leave room under the queue's capacity; one that finds
// none waits RequeueDelay more and is reported requeued, as in the
// in-memory store.
func TestFallbackRequeuesWhenFull(t *testing.T) {
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var requeued []int64
	s := downWithClock(t, clk, func(cfg *storekit.Config) {
		cfg.Capacity = 1
		cfg.Report = func(ev queue.Event) {
			if ev.Kind == queue.EventRequeued {
				mu.Lock()
				requeued = append(requeued, ev.JobID)
				mu.Unlock()
			}
		}
	})
	ctx := context.Background()
	at := clk.Now().Add(time.Minute)
	var ids []int64
	for i := range 2 {
		a, err := s.Add(ctx, queue.Job[int]{Payload: i, RunAt: at})
		require.NoError(t, err)
		ids = append(ids, a.ID)
	}
	clk.Advance(time.Minute)
	n, err := s.PromoteDue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, st.Ready, "ready jobs beyond the capacity")
	assert.Equal(t, 1, st.Scheduled)
	sched, err := s.Scheduled(ctx, 1)
	require.NoError(t, err)
	require.Len(t, sched, 1)
	assert.Equal(t, ids[1], sched[0].ID)
	assert.True(t, sched[0].RunAt.Equal(clk.Now().Add(10*time.Second)), "requeued to %v", sched[0].RunAt)
	mu.Lock()
	assert.Equal(t, []int64{ids[1]}, requeued)
	mu.Unlock()
}

// TestFallbackWriteBackOutcomes drives the fallback's write-back
// bookkeeping by hand: a job out for write-back keeps its key; one whose
// write may have landed becomes uncertain (kept, never run here, its key
// held, cancellable); one whose write never left goes back into the
// in-memory store as it was, with its ID and attempt.
func TestFallbackWriteBackOutcomes(t *testing.T) {
	s := downFromTheStart(t)
	ctx := context.Background()
	sh := s.shards[0]
	for _, k := range []string{"lost", "unsent"} {
		_, err := s.Add(ctx, queue.Job[int]{Key: k, Payload: len(k)})
		require.NoError(t, err)
	}
	s.fbMu.Lock()
	out := s.fb.takeFor(sh, 10, time.Now())
	s.fbMu.Unlock()
	require.Len(t, out, 2)
	for _, k := range []string{"lost", "unsent"} {
		_, err := s.Add(ctx, queue.Job[int]{Key: k})
		require.ErrorIs(t, err, queue.ErrDuplicate, "a job out for write-back holds its key")
	}
	if st, _ := s.Stats(ctx); st.PendingKeys != 2 || st.Ready != 0 {
		t.Fatalf("Stats during the write-back = %+v", st)
	}
	lost, unsent := out[0], out[1]
	unsent.job.Attempt = 2 // as if it had run twice before
	s.fbMu.Lock()
	s.fb.settle(lost, writeUnknown)
	s.fb.settle(unsent, writeUnsent)
	held := s.fb.held()
	s.fbMu.Unlock()
	assert.Equal(t, 2, held)
	j := claimWithin(t, s, time.Second)
	assert.Equal(t, "unsent", j.Key)
	assert.Equal(t, unsent.job.ID, j.ID)
	assert.Equal(t, 3, j.Attempt)
	if _, ok := s.claimFallback(s.now(), math.MaxInt); ok {
		t.Fatal("a job whose write-back may have landed was claimed")
	}
	_, err := s.Add(ctx, queue.Job[int]{Key: "lost"})
	require.ErrorIs(t, err, queue.ErrDuplicate, "an uncertain job holds its key")
	s.fbMu.Lock()
	assert.True(t, s.fb.waiting(sh))
	s.fbMu.Unlock()
	n, err := s.Cancel(ctx, "lost")
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = s.Add(ctx, queue.Job[int]{Key: "lost"})
	require.NoError(t, err, "the key is free once the uncertain job is cancelled")
	must(t, s.Complete(ctx, j))
}
