package queue_test

import (
	"context"
	"errors"
	"sync"
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

// sharedBucket is a store-side admission bucket shared by several queues,
// as a durable store's is by several processes: it holds tokens and never
// refills (the tests use a negligible rate), counting the calls.
type sharedBucket struct {
	mu     sync.Mutex
	tokens int
	calls  atomic.Int64
	fail   atomic.Bool
}

func (b *sharedBucket) TakeTokens(_ context.Context, perSecond float64, burst, n int) (int, time.Duration, error) {
	b.calls.Add(1)
	if b.fail.Load() {
		return 0, 0, errors.New("store down")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	got := min(n, b.tokens)
	b.tokens -= got
	if got == 0 {
		return 0, time.Hour, nil
	}
	return got, 0, nil
}

// admitStore is an in-memory store that takes part in a fleet: it shares
// bucket with other fleetStores and reports procs live processes.
type admitStore struct {
	*memstore.Store[int]
	bucket *sharedBucket
	procs  int
}

func (s *admitStore) TakeTokens(ctx context.Context, perSecond float64, burst, n int) (int, time.Duration, error) {
	return s.bucket.TakeTokens(ctx, perSecond, burst, n)
}

func (s *admitStore) Processes() int { return s.procs }

var (
	_ storekit.Admitter   = (*admitStore)(nil)
	_ storekit.FleetSizer = (*admitStore)(nil)
)

// Two queues on one shared bucket admit one bucket's worth between them,
// taking it in leases of Burst/20 tokens: one store call per lease, none
// below the fill threshold.
func TestFleetAdmissionSharedBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const burst = 100 // leases of 5
		b := &sharedBucket{tokens: burst}
		rl := queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 1e-9, Burst: burst})
		var qs []*queue.Queue[int]
		for range 2 {
			q := newStoreQueue[int](t, &admitStore{Store: memstore.New[int](), bucket: b}, nop, queue.WithCapacity(10, 0), rl)
			fill(t, q, 4) // 40 %: below the threshold
			qs = append(qs, q)
		}
		assert.Equal(t, 2000, admitN(qs[0], 1000)+admitN(qs[1], 1000), "below the threshold")
		assert.Zero(t, b.calls.Load(), "below the threshold the store is not asked")
		for _, q := range qs {
			fill(t, q, 1) // 50 %: engaged
		}
		admitted := 0
		for range 200 {
			admitted += admitN(qs[0], 1) + admitN(qs[1], 1)
		}
		assert.Equal(t, burst, admitted, "one bucket's worth for both, not two")
		assert.LessOrEqual(t, b.calls.Load(), int64(burst/5+4), "one store call per lease of 5 tokens (and a few asking an empty bucket)")
		assert.Equal(t, uint64(400-burst), qs[0].Stats().RateLimited+qs[1].Stats().RateLimited, "the rest refused, and counted")
	})
}

// A lease's unspent tokens are dropped a second after the store granted
// them, and an empty bucket is not asked again before it could refill.
func TestFleetAdmissionLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &sharedBucket{tokens: 100}
		q := newStoreQueue[int](t, &admitStore{Store: memstore.New[int](), bucket: b}, nop, queue.WithCapacity(10, 0),
			queue.WithRateLimit(queue.RateLimit{FillPct: 10, PerSecond: 1e-9, Burst: 100}))
		fill(t, q, 1)
		require.NoError(t, q.Admit()) // takes a lease of 5, spends 1
		advance(1100 * time.Millisecond)
		assert.Equal(t, 5, admitN(q, 5), "a new lease")
		assert.Equal(t, 100-10, b.tokens, "two leases taken")
		assert.Equal(t, int64(2), b.calls.Load())
		b.mu.Lock()
		b.tokens = 0
		b.mu.Unlock()
		assert.Zero(t, admitN(q, 10), "the bucket is empty")
		assert.Equal(t, int64(3), b.calls.Load(), "asked once; the store's wait holds the rest back")
	})
}

// While the store's bucket does not answer, each process admits by its
// own bucket, and asks the store again a second later.
func TestFleetAdmissionStoreDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &sharedBucket{tokens: 100}
		b.fail.Store(true)
		q := newStoreQueue[int](t, &admitStore{Store: memstore.New[int](), bucket: b}, nop, queue.WithCapacity(10, 0),
			queue.WithRateLimit(queue.RateLimit{FillPct: 10, PerSecond: 1e-9, Burst: 3}))
		fill(t, q, 1)
		assert.Equal(t, 3, admitN(q, 10), "the local bucket's burst")
		assert.Equal(t, int64(1), b.calls.Load())
		b.fail.Store(false)
		advance(time.Second)
		assert.Equal(t, 1, admitN(q, 1), "the store's bucket again")
		assert.Equal(t, int64(2), b.calls.Load())
	})
}

// Under ScaleByDepth, each of a fleet's processes scales on its share of
// the depth: with 40 jobs and 4 live processes, a process settles at 8
// workers (its 8 running jobs leave 32 ready, 8 each), where alone it
// would take 20 (its max).
func TestFleetScalingDividesDepth(t *testing.T) {
	for _, c := range []struct {
		procs, want int
	}{{1, 20}, {4, 8}} {
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			h := func(ctx context.Context, _ queue.Job[int]) error {
				select {
				case <-release:
				case <-ctx.Done():
				}
				return nil
			}
			st := &admitStore{Store: memstore.New[int](), bucket: &sharedBucket{}, procs: c.procs}
			q := newStoreQueue[int](t, st, h, queue.WithWorkers(1, 20),
				queue.WithScaling(queue.ScaleByDepth, 0, 0, 10*time.Millisecond))
			fill(t, q, 40)
			require.NoError(t, q.Start(bg))
			advance(time.Second)
			assert.Equal(t, c.want, q.Stats().Workers, "%d processes", c.procs)
			close(release)
			require.NoError(t, q.Stop(bg))
		})
	}
}
