package queue_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/storekit"
)

// sharedPool runs a producer for d that offers rate jobs per second to
// each of the targets Fanout picks (of "healthy", and "hung" when hung
// is set), on a pool of workers workers with a 10 s job timeout. A
// healthy job takes 10 ms; a hung one waits for its deadline. It returns
// how many healthy jobs ran to the end and how many healthy enqueues
// were refused. The queue runs on store, or on the in-memory store when
// store is nil. Call it inside a bubble.
func sharedPool(t *testing.T, hung bool, workers, rate int, d time.Duration, store storekit.Store[int]) (done, refused int) {
	var ok atomic.Int64
	h := func(ctx context.Context, job queue.Job[int]) error {
		if job.Target == "hung" {
			<-ctx.Done()
			return ctx.Err()
		}
		select {
		case <-time.After(10 * time.Millisecond):
			ok.Add(1)
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	opts := []queue.Option{queue.WithWorkers(workers, workers), queue.WithJobTimeout(10 * time.Second),
		queue.WithCapacity(100_000, 0)}
	var q *queue.Queue[int]
	var err error
	if store == nil {
		q, err = queue.New(h, opts...)
	} else {
		q, err = queue.NewWithStore(store, h, opts...)
	}
	require.NoError(t, err)
	require.NoError(t, q.Start(bg))
	candidates := []string{"healthy"}
	if hung {
		candidates = append(candidates, "hung")
	}
	ctx, cancel := context.WithCancel(bg)
	stopped := make(chan struct{})
	go func() { // the clients: rate/100 requests every 10 ms
		defer close(stopped)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for range rate / 100 {
				for _, target := range q.Fanout("", candidates) {
					err := q.Enqueue(bg, queue.Job[int]{Target: target})
					if err != nil && target == "healthy" {
						refused++
					}
				}
			}
		}
	}()
	advance(d)
	cancel()
	<-stopped
	done = int(ok.Load())
	require.NoError(t, q.Shutdown(bg))
	return done, refused
}

// A target whose every job hangs until its timeout shares the pool with a
// healthy one: the healthy one keeps within 20 % of the throughput it has
// alone, whether it needs a fraction of the pool or all of it.
func TestHungTargetDoesNotStarveHealthyOne(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate int // healthy jobs offered per second; the pool runs 1000/s
	}{
		{"light", 400},
		{"saturating", 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var alone, shared, refusedAlone, refusedShared int
			synctest.Test(t, func(t *testing.T) {
				alone, refusedAlone = sharedPool(t, false, 10, tc.rate, time.Minute, nil)
			})
			synctest.Test(t, func(t *testing.T) {
				shared, refusedShared = sharedPool(t, true, 10, tc.rate, time.Minute, nil)
			})
			t.Logf("healthy jobs in 60 s: alone %d (refused %d), beside a hung target %d (refused %d)",
				alone, refusedAlone, shared, refusedShared)
			assert.Positive(t, alone)
			assert.GreaterOrEqual(t, float64(shared), 0.8*float64(alone),
				"the healthy target keeps within 20 %% of its throughput alone")
		})
	}
}

// contractStore hides the in-memory store's type, so the engine reaches it
// through the Store interface only, as it does a durable store.
type contractStore struct{ storekit.Store[int] }

// Fair dispatch is the engine's: a store the engine knows only by the
// Store contract gets it too.
func TestHungTargetDoesNotStarveHealthyOneThroughStoreContract(t *testing.T) {
	var alone, shared int
	synctest.Test(t, func(t *testing.T) {
		alone, _ = sharedPool(t, false, 10, 400, time.Minute, contractStore{memstore.New[int]()})
	})
	synctest.Test(t, func(t *testing.T) {
		shared, _ = sharedPool(t, true, 10, 400, time.Minute, contractStore{memstore.New[int]()})
	})
	t.Logf("healthy jobs in 60 s: alone %d, beside a hung target %d", alone, shared)
	assert.Positive(t, alone)
	assert.GreaterOrEqual(t, float64(shared), 0.8*float64(alone))
}

// A target whose runs time out opens its breaker after five in a row,
// with no WithCircuitBreaker: its jobs wait, Fanout skips it. Timeouts
// come as context.DeadlineExceeded from WithJobTimeout or as a client's
// timeout classified by ClassifyHTTP.
func TestTimeoutsOpenTheDefaultBreaker(t *testing.T) {
	clientTimeout := queue.ClassifyHTTP(0, &url.Error{Op: "Get", URL: "http://upstream/announce", Err: os.ErrDeadlineExceeded})
	for _, tc := range []struct {
		name string
		fail func(ctx context.Context) error
	}{
		{"job timeout", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
		{"client timeout", func(context.Context) error { <-time.After(time.Second); return clientTimeout }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var runs atomic.Int32
				q := startQueue(t, func(ctx context.Context, _ queue.Job[int]) error {
					runs.Add(1)
					return tc.fail(ctx)
				}, queue.WithWorkers(1, 1), queue.WithJobTimeout(time.Second), queue.WithRetry(100, time.Second, time.Second))
				for range 10 {
					require.NoError(t, q.Enqueue(bg, queue.Job[int]{Target: "dead"}))
				}
				advance(4 * time.Second)
				assert.Equal(t, "closed", targetStatus(t, q, "dead").Breaker, "four timeouts")
				advance(time.Second)
				synctest.Wait()
				st := targetStatus(t, q, "dead")
				assert.Equal(t, "open", st.Breaker, "the fifth timeout opened it")
				assert.Empty(t, q.Fanout("k", []string{"dead"}), "fan-out skips it")
				n := runs.Load()
				assert.LessOrEqual(t, n, int32(6))
				advance(20 * time.Second)
				assert.Equal(t, n, runs.Load(), "nothing runs while it is open")
				advance(15 * time.Second)
				assert.Greater(t, runs.Load(), n, "a probe runs after the 30 s cool-down")
			})
		})
	}
}

// Without WithCircuitBreaker, failures other than timeouts do not open a
// breaker, and a timeout between them starts the count again.
func TestDefaultBreakerCountsOnlyConsecutiveTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int32
		q := startQueue(t, func(ctx context.Context, _ queue.Job[int]) error {
			if runs.Add(1)%4 == 0 {
				return errors.New("HTTP 503")
			}
			<-ctx.Done()
			return ctx.Err()
		}, queue.WithWorkers(1, 1), queue.WithJobTimeout(time.Second), queue.WithRetry(100, time.Second, time.Second))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Target: "flaky"}))
		advance(time.Minute)
		st := targetStatus(t, q, "flaky")
		assert.Equal(t, "closed", st.Breaker, "never five timeouts in a row")
		assert.Greater(t, runs.Load(), int32(20))
	})
}

// The fair share is work conserving for a target alone: it may use the
// whole pool. When a second target has work, each gets half; the limit
// holds for the window (10 s) after the other's last job, and then a
// target alone has the whole pool again.
func TestFairShareFollowsTheTargetsWithWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const workers = 8
		var running, peak [2]atomic.Int32
		names := []string{"a", "b"}
		q := startQueue(t, func(ctx context.Context, job queue.Job[int]) error {
			i := job.Payload
			n := running[i].Add(1)
			for p := peak[i].Load(); n > p && !peak[i].CompareAndSwap(p, n); p = peak[i].Load() {
			}
			defer running[i].Add(-1)
			select {
			case <-time.After(time.Second):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, queue.WithWorkers(workers, workers), queue.WithCapacity(1000, 0))
		enqueue := func(i, n int) {
			for range n {
				require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i, Target: names[i]}))
			}
		}
		enqueue(0, workers)
		synctest.Wait()
		assert.Equal(t, int32(workers), running[0].Load(), "a target alone uses the whole pool")

		for range 3 * workers { // both have work, interleaved in the queue
			enqueue(0, 1)
			enqueue(1, 1)
		}
		advance(time.Second) // a's first jobs end; each target gets its share
		assert.Equal(t, int32(workers/2), running[0].Load())
		assert.Equal(t, int32(workers/2), running[1].Load())
		advance(6 * time.Second)
		assert.Equal(t, int32(workers), peak[0].Load(), "a's first jobs")
		assert.Equal(t, int32(workers/2), peak[1].Load(), "b never passed its share")
		require.Zero(t, running[0].Load()+running[1].Load(), "all done")

		// Within the window a still counts: b gets its share only.
		peak[1].Store(0)
		enqueue(1, workers)
		advance(2 * time.Second)
		assert.Equal(t, int32(workers/2), peak[1].Load(), "a had work less than 10 s ago")

		// Past it, b has the pool to itself.
		advance(10 * time.Second)
		peak[1].Store(0)
		enqueue(1, workers)
		synctest.Wait()
		assert.Equal(t, int32(workers), peak[1].Load(), "b alone: the whole pool")
		advance(time.Second)
		s := q.Stats()
		assert.Equal(t, uint64(9*workers), s.Done)
		balance(t, s)
	})
}

// While a half-open breaker's probes all run, Fanout skips the target: a
// job sent to it would only park until the probe's outcome.
func TestFanoutSkipsTargetWhileItsProbeRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		probe := make(gate)
		var runs atomic.Int32
		q := startQueue(t, func(ctx context.Context, _ queue.Job[int]) error {
			if runs.Add(1) == 1 {
				return errors.New("HTTP 503")
			}
			return probe.wait(ctx)
		}, queue.WithCircuitBreaker(1, 10*time.Second, 1), queue.WithRetry(0, time.Second, time.Second),
			queue.WithWorkers(2, 2))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Target: "a"}))
		synctest.Wait()
		require.Equal(t, "open", targetStatus(t, q, "a").Breaker)
		advance(10 * time.Second)
		require.Equal(t, "half-open", targetStatus(t, q, "a").Breaker)
		require.Equal(t, int32(2), runs.Load(), "the probe runs")
		assert.Empty(t, q.Fanout("k", []string{"a"}), "its probe is out")
		close(probe)
		synctest.Wait()
		assert.Equal(t, "closed", targetStatus(t, q, "a").Breaker)
		assert.Equal(t, []string{"a"}, q.Fanout("k", []string{"a"}))
	})
}
