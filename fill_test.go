package queue

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAtOrAbove(t *testing.T) {
	for _, tc := range []struct {
		depth, capacity, pct int
		want                 bool
	}{
		{0, 10, 60, false},
		{5, 10, 60, false},
		{6, 10, 60, true},
		{10, 10, 100, true},
		{9, 10, 100, false},
		{0, 10, 0, true},
		{0, 1, 1, false},
		{1, 1, 1, true},
		// pct·capacity wraps an int here; the comparison must not.
		{0, math.MaxInt, 60, false},
		{0, math.MaxInt, 100, false},
		{1 << 40, math.MaxInt, 1, false},
		{math.MaxInt, math.MaxInt, 100, true},
		{math.MaxInt, math.MaxInt, 1, true},
		{math.MaxInt - 1, math.MaxInt, 100, false},
		{math.MaxInt / 100, math.MaxInt, 1, false},  // 100·depth = MaxInt-7
		{math.MaxInt/100 + 1, math.MaxInt, 1, true}, // 100·depth wraps an int
		{math.MaxInt/2 + 1, math.MaxInt, 50, true},  // just over half
		{math.MaxInt / 2, math.MaxInt, 50, false},   // just under half
		{-1, 10, 60, false},                         // negative counts as 0
	} {
		assert.Equal(t, tc.want, atOrAbove(tc.depth, tc.capacity, tc.pct), "atOrAbove(%d, %d, %d)", tc.depth, tc.capacity, tc.pct)
	}
}

// hugeStore accepts any capacity, as the durable stores do (pgstore holds
// jobs in a table, not in rings allocated up front), and keeps at most
// 1000 ready jobs in memory.
type hugeStore struct{ *MemoryStore[int] }

func (s hugeStore) Init(cfg StoreConfig) error {
	cfg.Capacity = min(cfg.Capacity, 1000)
	return s.MemoryStore.Init(cfg)
}

// WithCapacity(math.MaxInt), "no bound" with a durable store: an empty
// queue is 0 % full, so the scaler keeps the pool at its base size.
func TestScaleHugeCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := New(func(context.Context, Job[int]) error { return nil },
			WithStore[int](hugeStore{NewMemoryStore[int]()}), WithCapacity(math.MaxInt), WithWorkers(1, 4))
		require.NoError(t, err)
		require.NoError(t, q.Start(context.Background()))
		defer func() { require.NoError(t, q.Shutdown(context.Background())) }()
		time.Sleep(10 * DefaultScaleInterval)
		synctest.Wait()
		assert.Equal(t, 1, q.Stats().Workers, "an empty queue needs no more workers")
	})
}
