package memstore

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// addKey takes an entry for key as the store's add does, running for job
// id, and returns it; nil if the key is held.
func addKey(ks *keySet[int], key string, id int64) *keyEntry {
	h := ks.hash(key)
	sh := ks.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(key, h)
	if e != nil && !e.gone() {
		return nil
	}
	if e == nil {
		e = sh.add(key, h, packKey(id, keyRunning))
	}
	e.st.Store(packKey(id, keyRunning))
	return e
}

// finishKey ends e's job as a worker does: one compare-and-swap, no lock.
func finishKey(e *keyEntry) bool {
	id, _ := e.load()
	return e.move(id, keyRunning, keyGone)
}

func heldKeys(ks *keySet[int]) map[string]*keyEntry {
	m := map[string]*keyEntry{}
	ks.entries(func(e *keyEntry) bool {
		m[e.key] = e
		return false
	})
	return m
}

// checkShards checks every shard's bookkeeping: the index holds exactly
// the entries that are not free, each once, where a probe from its home
// finds it.
func checkShards(t *testing.T, ks *keySet[int]) {
	t.Helper()
	for i := range ks.shards {
		sh := &ks.shards[i]
		sh.mu.Lock()
		indexed := map[uint32]int{}
		for _, v := range sh.index {
			if v != 0 {
				indexed[uint32(v)-1]++
			}
		}
		assert.Len(t, indexed, sh.count, "shard %d: index count", i)
		for c, ch := range sh.chunks {
			if ch == nil {
				assert.Zero(t, sh.free[c], "shard %d: a dropped chunk has no free bits", i)
				continue
			}
			for j := range ch.ents {
				e := &ch.ents[j]
				require.Equal(t, uint32(c*chunkSize+j), e.num)
				require.Equal(t, uint8(i), e.shard)
				if sh.free[c]&(1<<j) != 0 {
					assert.Zero(t, indexed[e.num], "shard %d: free entry %d is indexed", i, e.num)
					continue
				}
				assert.Equal(t, 1, indexed[e.num], "shard %d: entry %d (%q) indexed once", i, e.num, e.key)
				assert.Same(t, e, sh.find(e.key, e.h), "shard %d: entry %q found from its home", i, e.key)
			}
		}
		sh.mu.Unlock()
	}
}

func chunksHeld(ks *keySet[int]) int {
	n := 0
	for i := range ks.shards {
		for _, ch := range ks.shards[i].chunks {
			if ch != nil {
				n++
			}
		}
	}
	return n
}

func TestKeySetAddFindReclaim(t *testing.T) {
	ks := newKeySet[int]()
	const n = 4000 // enough to give every shard several chunks
	ents := make([]*keyEntry, n)
	for i := range n {
		ents[i] = addKey(ks, fmt.Sprint("key", i), int64(i+1))
		require.NotNil(t, ents[i])
	}
	assert.Nil(t, addKey(ks, "key7", 99999), "a held key cannot be added again")
	checkShards(t, ks)
	for i := 0; i < n; i += 2 {
		require.True(t, finishKey(ents[i]))
	}
	held := heldKeys(ks) // reclaims the gone entries it meets
	require.Len(t, held, n/2)
	for i := range n {
		key := fmt.Sprint("key", i)
		if i%2 == 0 {
			assert.NotContains(t, held, key)
			continue
		}
		assert.Same(t, ents[i], held[key])
	}
	checkShards(t, ks)

	// Finished keys are free again; their entries are reused rather than
	// the chunks growing without bound.
	chunks := chunksHeld(ks)
	for round := range 20 {
		for i := 0; i < n; i += 2 {
			ents[i] = addKey(ks, fmt.Sprint("key", i), int64(n*(round+1)+i+1))
			require.NotNil(t, ents[i], "key%d is free", i)
		}
		for i := 0; i < n; i += 2 {
			require.True(t, finishKey(ents[i]))
		}
	}
	checkShards(t, ks)
	assert.LessOrEqual(t, chunksHeld(ks), chunks+keyShards, "chunks stay near the keys held")
	keys, reruns := ks.counts()
	assert.Equal(t, n/2, keys)
	assert.Zero(t, reruns)
}

func TestKeySetSameKeyReusesItsEntry(t *testing.T) {
	ks := newKeySet[int]()
	e := addKey(ks, "k", 1)
	require.True(t, finishKey(e))
	again := addKey(ks, "k", 2)
	assert.Same(t, e, again, "a key that comes back takes its own gone entry")
	assert.False(t, e.move(1, keyPending, keyRunning), "the earlier job's item cannot claim it")
	assert.True(t, e.is(2, keyRunning))
	checkShards(t, ks)
}

func TestKeySetShrinksAfterABurst(t *testing.T) {
	ks := newKeySet[int]()
	const burst = 64 * chunkSize * 8 // eight chunks a shard
	ents := make([]*keyEntry, 0, burst)
	for i := range burst {
		ents = append(ents, addKey(ks, fmt.Sprint("burst", i), int64(i+1)))
	}
	peak, peakIndex := chunksHeld(ks), indexSlots(ks)
	for _, e := range ents {
		require.True(t, finishKey(e))
	}
	// A trickle of keys, each finished at once: each round of sweeps
	// halves the shards' high-water mark, until they drop the chunks the
	// burst left free (four rounds of eight chunks' adds each).
	id := int64(burst)
	for i := range 6 * burst {
		id++
		require.True(t, finishKey(addKey(ks, fmt.Sprint("trickle", i), id)))
	}
	checkShards(t, ks)
	assert.Less(t, chunksHeld(ks), peak/4, "the shards give back most of the chunks the burst took (peak %d)", peak)
	assert.Less(t, indexSlots(ks), peakIndex/4, "and most of the index (peak %d slots)", peakIndex)
}

func indexSlots(ks *keySet[int]) int {
	n := 0
	for i := range ks.shards {
		n += len(ks.shards[i].index)
	}
	return n
}

// TestKeyIndexModel checks a shard's index against a map under random
// adds and reclaims, many of them colliding: backward-shift deletion
// must leave every remaining entry reachable from its home.
func TestKeyIndexModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sh := &keyShard[int]{}
	held := map[string]*keyEntry{}
	var order []string
	for step := range 200_000 {
		if len(order) > 0 && (rng.IntN(2) == 0 || len(order) > 3000) {
			i := rng.IntN(len(order))
			k := order[i]
			order[i] = order[len(order)-1]
			order = order[:len(order)-1]
			e := held[k]
			delete(held, k)
			e.st.Store(packKey(1, keyGone))
			sh.reclaim(e)
			continue
		}
		k := fmt.Sprint("k", step)
		// Few distinct home slots, so that probes run long and wrap.
		h := uint64(rng.IntN(8))<<32 | uint64(rng.IntN(16))
		e := sh.add(k, h, packKey(int64(step+1), keyPending))
		held[k] = e
		order = append(order, k)
		if step%997 == 0 {
			for k, e := range held {
				require.Same(t, e, sh.find(k, e.h), "step %d: %s", step, k)
			}
			require.Nil(t, sh.find("absent", 3))
			require.Equal(t, len(held), sh.count)
		}
	}
}

// TestKeySetFinishRacesSweep has workers finish entries without the lock
// while producers add keys, sweeping chunks and reusing entries: a held
// entry is never reclaimed, a finished one is, and an entry reused for
// another job refuses the compare-and-swaps of the job it held before.
func TestKeySetFinishRacesSweep(t *testing.T) {
	ks := newKeySet[int]()
	const producers, perProducer, workers = 2, 20000, 4
	type held struct {
		e  *keyEntry
		id int64
	}
	work := make(chan held, 256)
	var kept sync.Map // entries not finished, by key
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				id := int64(p*perProducer + i + 1)
				key := fmt.Sprintf("p%d-%d", p, i)
				e := addKey(ks, key, id)
				if e == nil {
					t.Errorf("unique key %s refused", key)
					return
				}
				if i%10 == 0 {
					kept.Store(key, held{e, id})
					continue
				}
				work <- held{e, id}
			}
		})
	}
	var done sync.WaitGroup
	finished := make([][]held, workers)
	for w := range workers {
		done.Go(func() {
			for h := range work {
				if !h.e.move(h.id, keyRunning, keyGone) {
					t.Errorf("job %d's entry not running", h.id)
				}
				finished[w] = append(finished[w], h)
			}
		})
	}
	wg.Wait()
	close(work)
	done.Wait()

	all := heldKeys(ks)
	n := 0
	kept.Range(func(k, v any) bool {
		h := v.(held)
		assert.Same(t, h.e, all[k.(string)])
		assert.True(t, h.e.is(h.id, keyRunning), "a held entry keeps its job")
		n++
		return true
	})
	assert.Len(t, all, n)
	for _, hs := range finished {
		for _, h := range hs {
			require.False(t, h.e.move(h.id, keyPending, keyRunning), "job %d's stale item claims nothing", h.id)
		}
	}
	checkShards(t, ks)
}

func TestKeySetSizes(t *testing.T) {
	assert.Equal(t, uintptr(128), unsafe.Sizeof(keyShard[int]{}), "shards used by different producers share no cache line")
	assert.Equal(t, uintptr(64), unsafe.Sizeof(keyEntry{}), "one entry to a cache line")
	assert.Equal(t, uintptr(4096), unsafe.Sizeof(keyChunk{}), "a chunk fills its size class exactly")
}
