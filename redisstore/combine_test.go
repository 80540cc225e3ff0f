package redisstore

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// TestCombiner: concurrent calls each get their own result, batched up to
// max, with at most flights batches running at once, and a lone call runs
// at once without queueing; a failed batch fails each of its calls.
func TestCombiner(t *testing.T) {
	for _, flights := range []int{0, 1, 4} {
		t.Run("flights="+strconv.Itoa(flights), func(t *testing.T) { testCombiner(t, flights) })
	}
}

func testCombiner(t *testing.T, flights int) {
	var c combiner[int, int]
	c.max, c.flights = 8, flights
	var batches, biggest, running, most atomic.Int64
	double := func(reqs []int) ([]int, error) {
		batches.Add(1)
		if n := running.Add(1); n > most.Load() {
			most.Store(n)
		}
		defer running.Add(-1)
		if n := int64(len(reqs)); n > biggest.Load() {
			biggest.Store(n)
		}
		out := make([]int, len(reqs))
		for i, r := range reqs {
			if r < 0 {
				return nil, errors.New("negative")
			}
			out[i] = 2 * r
		}
		return out, nil
	}
	if got, err := c.do(21, double); got != 42 || err != nil {
		t.Fatalf("lone do = %d, %v", got, err)
	}
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				req := g*1000 + i
				if got, err := c.do(req, double); got != 2*req || err != nil {
					t.Errorf("do(%d) = %d, %v", req, got, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := biggest.Load(); n > 8 {
		t.Fatalf("a batch of %d, max 8", n)
	}
	if n := most.Load(); n > int64(max(flights, 1)) {
		t.Fatalf("%d batches ran at once, flights %d", n, flights)
	}
	if _, err := c.do(-1, double); err == nil {
		t.Fatal("a failed batch returned no error")
	}
	if _, err := c.do(1, func([]int) ([]int, error) { return nil, nil }); err != errShortBatch {
		t.Fatalf("short batch: err = %v", err)
	}
	if c.busy != 0 || len(c.q) != 0 {
		t.Fatalf("combiner left busy=%v with %d queued", c.busy, len(c.q))
	}
	t.Logf("%d calls in %d batches, biggest %d, at most %d at once", 16*500+1, batches.Load(), biggest.Load(), most.Load())
}
