package queue_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
)

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("t%02d", i)
	}
	return out
}

// fill enqueues n ready jobs into q, which must not be started.
func fill[T any](t *testing.T, q *queue.Queue[T], n int) {
	t.Helper()
	for range n {
		require.NoError(t, q.Enqueue(bg, queue.Job[T]{}))
	}
}

func TestFanoutNoCandidates(t *testing.T) {
	q := newQueue(t, nop)
	assert.Empty(t, q.Fanout("k", nil))
	assert.Empty(t, q.Fanout("k", []string{}))
}

func TestFanoutMaxPerRequestWhenNotThrottling(t *testing.T) {
	q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithFanout(5, 60, 3))
	fill(t, q, 5) // 50 %: below the throttle threshold
	cands := names(10)
	orig := append([]string(nil), cands...)
	got := q.Fanout("k", cands)
	assert.Len(t, got, 5, "capped at max-per-request")
	assert.Subset(t, cands, got)
	assertDistinct(t, got)
	assert.Equal(t, orig, cands, "candidates are not modified")
	assert.Zero(t, q.Stats().Throttled, "max-per-request is not throttling")
	assert.Len(t, q.Fanout("k", names(4)), 4, "fewer candidates than the cap: all")
}

func TestFanoutThrottledToTopN(t *testing.T) {
	q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithFanout(0, 60, 3))
	fill(t, q, 6) // 60 %: at the threshold
	got := q.Fanout("k", names(10))
	assert.Len(t, got, 3, "top-N while throttling")
	assertDistinct(t, got)
	assert.Equal(t, uint64(7), q.Stats().Throttled, "targets left out are counted")
	assert.Len(t, q.Fanout("k", names(2)), 2)
	assert.Equal(t, uint64(7), q.Stats().Throttled)
}

func TestFanoutThrottleUsesSmallerCap(t *testing.T) {
	q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithFanout(4, 60, 20))
	fill(t, q, 9)
	assert.Len(t, q.Fanout("k", names(30)), 4, "min(max, top-N)")
}

func TestFanoutThrottleOff(t *testing.T) {
	q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithFanout(0, 0, math.MaxInt))
	fill(t, q, 10)
	assert.Len(t, q.Fanout("k", names(30)), 30, "threshold 0 never throttles; default max 100")
	assert.Zero(t, q.Stats().Throttled)
}

// WithCapacity(math.MaxInt, 0) is "no bound" with a durable store: the queue
// never fills, so Fanout never throttles (threshold·capacity must not wrap
// into a negative that every fill passes).
func TestFanoutHugeCapacity(t *testing.T) {
	for _, pct := range []int{1, 60, 100} {
		q := newStoreQueue(t, hugeStore{memstore.New[int]()}, nop, queue.WithCapacity(math.MaxInt, 0), queue.WithFanout(0, pct, 1))
		assert.Len(t, q.Fanout("k", names(3)), 3, "empty, threshold %d %%", pct)
		fill(t, q, 1000)
		assert.Len(t, q.Fanout("k", names(3)), 3, "1000 jobs, threshold %d %%", pct)
		assert.Zero(t, q.Stats().Throttled)
	}
}

func TestFanoutDefaults(t *testing.T) {
	q := newQueue(t, nop, queue.WithCapacity(10, 0))
	assert.Len(t, q.Fanout("k", names(150)), 100, "default max-per-request 100")
	fill(t, q, 6)
	assert.Len(t, q.Fanout("k", names(150)), 20, "default: top 20 at 60 %")
}

func TestFanoutSkipsNotDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop)
		now := time.Now()
		q.SetNextDue("a", "hash1", now.Add(time.Minute))  // announced; next in a minute
		q.SetNextDue("b", "hash1", now.Add(-time.Second)) // past due
		q.SetNextDue("c", "hash2", now.Add(time.Hour))    // another key
		q.SetNextDue("d", "hash1", now.Add(time.Hour))
		q.SetNextDue("d", "hash1", time.Time{}) // zero: due at once

		assert.False(t, q.Due("a", "hash1"))
		assert.True(t, q.Due("b", "hash1"), "past due")
		assert.True(t, q.Due("c", "hash1"), "never seen for this key")
		assert.True(t, q.Due("d", "hash1"))
		assert.False(t, q.Due("c", "hash2"))
		assert.ElementsMatch(t, []string{"b", "c", "d", "e"}, q.Fanout("hash1", []string{"a", "b", "c", "d", "e"}))

		advance(time.Minute)
		assert.True(t, q.Due("a", "hash1"), "due once its time has come")
		assert.ElementsMatch(t, []string{"a", "b", "c", "d", "e"}, q.Fanout("hash1", []string{"a", "b", "c", "d", "e"}))
	})
}

func TestFanoutSkipsDisabledAndSuspended(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithFanout(0, 60, 2))
		require.NoError(t, q.Disable("a", nil))
		require.NoError(t, q.Suspend("b", time.Minute))
		fill(t, q, 6)
		// Throttling caps the eligible targets: skipped ones take no slot.
		for range 50 {
			got := q.Fanout("k", []string{"a", "b", "c", "d"})
			assert.ElementsMatch(t, []string{"c", "d"}, got)
		}
		assert.Zero(t, q.Stats().Throttled, "skipped targets are not throttled ones")
	})
}

func TestFanoutFairShuffle(t *testing.T) {
	q := newQueue(t, nop, queue.WithCapacity(10, 0), queue.WithFanout(0, 60, 3))
	fill(t, q, 10)
	const rounds = 10000
	cands := names(10)
	counts := map[string]int{}
	for range rounds {
		got := q.Fanout("k", cands)
		require.Len(t, got, 3)
		for _, n := range got {
			counts[n]++
		}
	}
	want := float64(rounds*3) / float64(len(cands)) // 3000
	for _, n := range cands {
		assert.InEpsilon(t, want, float64(counts[n]), 0.20, "%s chosen %d times, want %.0f ± 20 %%", n, counts[n], want)
	}
	assert.Equal(t, uint64(rounds*7), q.Stats().Throttled)
}

func TestFanoutInjectedShuffle(t *testing.T) {
	run := func() []string {
		r := rand.New(rand.NewPCG(1, 2))
		q := newQueue(t, nop, queue.WithShuffle(r.Shuffle), queue.WithFanout(4, 0, 0))
		return q.Fanout("k", names(10))
	}
	a, b := run(), run()
	assert.Equal(t, a, b, "a seeded shuffle gives a fixed order")
	q := newQueue(t, nop, queue.WithShuffle(func(int, func(i, j int)) {}), queue.WithFanout(3, 0, 0))
	assert.Equal(t, []string{"t00", "t01", "t02"}, q.Fanout("k", names(10)), "no-op shuffle keeps candidate order")
}

func assertDistinct(t *testing.T, s []string) {
	t.Helper()
	seen := map[string]bool{}
	for _, x := range s {
		assert.False(t, seen[x], "duplicate %q", x)
		seen[x] = true
	}
}
