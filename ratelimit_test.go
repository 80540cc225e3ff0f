package queue_test

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/storekit"
)

// admitN calls Admit n times and returns how many were admitted.
// refusal returns the error Admit refuses with under rl, on a queue
// filled past rl's threshold with its one token spent.
func refusal(t *testing.T, rl queue.RateLimit) error {
	t.Helper()
	rl.FillPct, rl.PerSecond, rl.Burst = 10, 1e-9, 1
	q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithRateLimit(rl))
	fill(t, q, 1)
	require.NoError(t, q.Admit(), "the burst")
	err := q.Admit()
	require.ErrorIs(t, err, queue.ErrRateLimited)
	return err
}

func admitN[T any](q *queue.Queue[T], n int) int {
	ok := 0
	for range n {
		if q.Admit() == nil {
			ok++
		}
	}
	return ok
}

func TestAdmitDisabledAtThresholdZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithRateLimit(queue.RateLimit{Disabled: true}))
		fill(t, q, 8) // 80 %: the default threshold
		assert.Equal(t, 10000, admitN(q, 10000), "never limited")
		fill(t, q, 2)
		assert.Equal(t, 1000, admitN(q, 1000), "not even when full")
		assert.Zero(t, q.Stats().RateLimited)
	})
}

func TestAdmitBelowThreshold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop, queue.WithCapacity(10, 0)) // default: 80 %, 100/s, burst 200
		fill(t, q, 7)
		assert.Equal(t, 10000, admitN(q, 10000), "below the threshold every request is admitted")
		assert.Zero(t, q.Stats().RateLimited)
	})
}

func TestAdmitActiveAboveThreshold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop, queue.WithCapacity(10, 0)) // default: 80 %, 100/s, burst 200
		fill(t, q, 8)
		assert.Equal(t, 200, admitN(q, 1000), "the burst, then refusals")
		err := q.Admit()
		require.Error(t, err)
		assert.ErrorIs(t, err, queue.ErrRateLimited)
		d, ok := queue.RetryDelay(err)
		require.True(t, ok)
		assert.Equal(t, 10*time.Second, d)
		assert.Equal(t, "busy, retry in 10 seconds", err.Error(), "a neutral default")
		assert.Equal(t, uint64(801), q.Stats().RateLimited)
	})
}

func TestAdmitTokensRefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 10, Burst: 5, RetryAfter: 30 * time.Second, Reason: "tracker busy"}))
		fill(t, q, 5)
		assert.Equal(t, 5, admitN(q, 100), "burst 5")
		advance(100 * time.Millisecond)
		assert.Equal(t, 1, admitN(q, 100), "10/s: one token per 100ms")
		advance(99 * time.Millisecond)
		assert.Zero(t, admitN(q, 100), "not yet")
		advance(time.Millisecond)
		assert.Equal(t, 1, admitN(q, 100))
		advance(350 * time.Millisecond)
		assert.Equal(t, 3, admitN(q, 100))
		advance(time.Hour)
		assert.Equal(t, 5, admitN(q, 100), "refill stops at the burst")

		err := q.Admit()
		require.ErrorIs(t, err, queue.ErrRateLimited)
		assert.Equal(t, "tracker busy, retry in 30 seconds", err.Error())
	})
}

// The refusal's wording is the host's: RateLimit.Reason sets the reason
// before the retry hint, "" keeps the neutral default, and the last
// option given wins.
func TestAdmitRefusalReason(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []queue.Option
		want string
	}{
		{"default", nil, "busy, retry in 10 seconds"},
		{"host's wording", []queue.Option{queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 1, Burst: 1, RetryAfter: 3 * time.Second, Reason: "tracker busy"})}, "tracker busy, retry in 3 seconds"},
		{"empty keeps the default", []queue.Option{queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 1, Burst: 1, RetryAfter: 2500 * time.Millisecond, Reason: ""})}, "busy, retry in 3 seconds"},
		{"a later limit keeps the wording", []queue.Option{queue.WithRateLimit(queue.RateLimit{RetryAfter: 3 * time.Second, Reason: "tracker busy"}),
			queue.WithRateLimit(queue.RateLimit{Burst: 1})}, "tracker busy, retry in 3 seconds"},
		{"last wins", []queue.Option{queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 1, Burst: 1, RetryAfter: time.Second, Reason: "a"}),
			queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 1, Burst: 1, RetryAfter: time.Minute, Reason: "server busy"})}, "server busy, retry in 60 seconds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := append([]queue.Option{queue.WithCapacity(10, 0), queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 1, Burst: 1})}, tc.opts...)
				q := newQueue(t, nop, opts...)
				fill(t, q, 5)
				require.NoError(t, q.Admit(), "the burst")
				err := q.Admit()
				assert.ErrorIs(t, err, queue.ErrRateLimited)
				assert.Equal(t, tc.want, err.Error())
			})
		})
	}
}

func TestAdmitFollowsFill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithRateLimit(queue.RateLimit{FillPct: 80, PerSecond: 1, Burst: 1}))
		fill(t, q, 8)
		assert.Equal(t, 1, admitN(q, 10))
		n, err := q.Purge(bg)
		require.NoError(t, err)
		require.Equal(t, 8, n)
		assert.Equal(t, 10, admitN(q, 10), "the limiter disengages when the queue empties")
	})
}

// hugeStore accepts any capacity, as the durable stores do (pgstore holds
// jobs in a table, not in rings allocated up front), and keeps at most
// 1000 ready jobs in memory.
type hugeStore struct{ *memstore.Store[int] }

func (s hugeStore) Init(cfg storekit.Config) error {
	cfg.Capacity = min(cfg.Capacity, 1000)
	return s.Store.Init(cfg)
}

// WithCapacity(math.MaxInt, 0) is "no bound" with a durable store: the queue
// never fills, so the limiter never engages (threshold·capacity must not
// wrap into a negative that every fill passes).
func TestAdmitHugeCapacity(t *testing.T) {
	for _, pct := range []int{1, 80, 100} {
		q := newStoreQueue(t, hugeStore{memstore.New[int]()}, nop, queue.WithCapacity(math.MaxInt, 0), queue.WithRateLimit(queue.RateLimit{FillPct: pct, PerSecond: 1, Burst: 1}))
		assert.Equal(t, 5, admitN(q, 5), "empty, threshold %d %%", pct)
		fill(t, q, 1000)
		assert.Equal(t, 5, admitN(q, 5), "1000 jobs, threshold %d %%", pct)
		assert.Zero(t, q.Stats().RateLimited)
	}
}
