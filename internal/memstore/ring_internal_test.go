package memstore

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRingContended has producers and consumers meet on a small ring's
// tail and head, so that their pushes and pops lose compare-and-swaps and
// yield (contended): every item leaves once, each consumer sees each
// producer's items in the order they were pushed, and the ring never
// holds more than its limit.
func TestRingContended(t *testing.T) {
	const (
		producers = 4
		consumers = 4
		perProd   = 2000
		limit     = 48 // below the ring's 64 slots: the limit, not the slots, refuses
	)
	r := newRing[int](64)
	var over atomic.Int64 // times the ring was seen holding more than limit
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProd {
				it := item[int]{id: int64(p*perProd + i + 1), payload: i}
				for r.push(&it, limit, true, true) != pushed {
					runtime.Gosched()
				}
				// The tail first: read after it, the head is no older,
				// so the difference is never more than the ring held.
				tl := r.tail.Load() &^ closedBit
				if hd := r.head.Load() &^ frozenBit; tl > hd && tl-hd > limit {
					over.Add(1)
				}
			}
		})
	}
	var taken atomic.Int64
	seen := make([][]int64, consumers)
	for c := range consumers {
		wg.Go(func() {
			last := make([]int, producers)
			for i := range last {
				last[i] = -1
			}
			var it item[int]
			for taken.Load() < producers*perProd {
				if r.pop(&it, true) != popped {
					runtime.Gosched()
					continue
				}
				taken.Add(1)
				p := int(it.id-1) / perProd
				if it.payload <= last[p] {
					t.Errorf("consumer %d: producer %d's item %d after its item %d", c, p, it.payload, last[p])
				}
				last[p] = it.payload
				seen[c] = append(seen[c], it.id)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(producers*perProd), taken.Load())
	assert.Zero(t, over.Load(), "times the ring held more than its limit")
	ids := make(map[int64]bool, producers*perProd)
	for _, s := range seen {
		for _, id := range s {
			assert.False(t, ids[id], "item %d popped twice", id)
			ids[id] = true
		}
	}
	assert.Len(t, ids, producers*perProd)
	assert.Equal(t, 0, r.len())
}
