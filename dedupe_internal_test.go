package queue

import (
	"fmt"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// addKey inserts a running entry for key as the store's add does, and
// returns it; nil if the key is held.
func addKey(ks *keySet[int], key string, id int64) *keyEntry[int] {
	h := ks.hash(key)
	sh := ks.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, slot := ks.find(sh, key, h)
	if old != nil && !old.gone() {
		return nil
	}
	e := &keyEntry[int]{h: h, meta: &jobMeta[int]{key: key}}
	e.st.Store(packKey(id, keyRunning))
	ks.insert(sh, slot, e)
	return e
}

// finishKey ends e's job as a worker does: gone, then released without
// the lock.
func finishKey(ks *keySet[int], e *keyEntry[int]) bool {
	id, _ := e.load()
	if !e.move(id, keyRunning, keyGone) {
		return false
	}
	ks.release(e)
	return true
}

func heldKeys(ks *keySet[int]) map[string]*keyEntry[int] {
	m := map[string]*keyEntry[int]{}
	ks.entries(func(e *keyEntry[int]) bool {
		m[e.meta.key] = e
		return false
	})
	return m
}

// inTables counts, for every entry, the slots holding it across all
// shards' current tables.
func inTables(ks *keySet[int]) map[*keyEntry[int]]int {
	m := map[*keyEntry[int]]int{}
	for i := range ks.shards {
		t := ks.shards[i].tab.Load()
		for j := range t.slots {
			if e := t.slots[j].e.Load(); e != nil && e != ks.tomb {
				m[e]++
			}
		}
	}
	return m
}

func TestKeySetInsertFindRelease(t *testing.T) {
	ks := newKeySet[int]()
	const n = 2000 // enough to grow every shard's table several times
	ents := make([]*keyEntry[int], n)
	for i := range n {
		ents[i] = addKey(ks, fmt.Sprint("key", i), int64(i+1))
		require.NotNil(t, ents[i])
	}
	assert.Nil(t, addKey(ks, "key7", 99999), "a held key cannot be added again")
	for i := 0; i < n; i += 2 {
		require.True(t, finishKey(ks, ents[i]))
	}
	held := heldKeys(ks)
	require.Len(t, held, n/2)
	slots := inTables(ks)
	for i := range n {
		key := fmt.Sprint("key", i)
		if i%2 == 0 {
			assert.NotContains(t, held, key)
			assert.Zero(t, slots[ents[i]], "a released entry leaves no slot behind")
			continue
		}
		assert.Same(t, ents[i], held[key])
		assert.Equal(t, 1, slots[ents[i]])
		h := ks.hash(key)
		sh := ks.shard(h)
		sh.mu.Lock()
		e, _ := ks.find(sh, key, h)
		assert.Same(t, ents[i], e)
		sh.mu.Unlock()
	}
	// Released keys are free again; the tombstones they left are reused
	// rather than the tables growing without bound.
	for round := range 5 {
		for i := 0; i < n; i += 2 {
			ents[i] = addKey(ks, fmt.Sprint("key", i), int64(n*(round+1)+i+1))
			require.NotNil(t, ents[i], "key%d is free", i)
		}
		for i := 0; i < n; i += 2 {
			require.True(t, finishKey(ks, ents[i]))
		}
	}
	size := 0
	for i := range ks.shards {
		size += len(ks.shards[i].tab.Load().slots)
	}
	assert.LessOrEqual(t, size, 8*n, "tables stay within a small multiple of the keys held")
	keys, reruns := ks.counts()
	assert.Equal(t, n/2, keys)
	assert.Zero(t, reruns)
}

func TestKeySetRemoveUnderLock(t *testing.T) {
	ks := newKeySet[int]()
	e := addKey(ks, "k", 1)
	h := ks.hash("k")
	sh := ks.shard(h)
	sh.mu.Lock()
	e.st.Store(packKey(1, keyGone))
	ks.remove(sh, e)
	found, _ := ks.find(sh, "k", h)
	assert.Nil(t, found, "the removed entry's slot is a tombstone")
	sh.mu.Unlock()
	// A worker that finds its entry already removed does nothing.
	ks.release(e)
	assert.Zero(t, inTables(ks)[e])
	assert.NotNil(t, addKey(ks, "k", 2))
}

// TestKeySetReleaseRacesRehash has workers release entries without the
// lock while a producer inserts enough keys to rehash the shards over and
// over: every released entry must leave the tables, and every held one
// stay, whichever of a release and a rehash wins.
func TestKeySetReleaseRacesRehash(t *testing.T) {
	ks := newKeySet[int]()
	const producers, perProducer, workers = 2, 20000, 4
	work := make(chan *keyEntry[int], 256)
	var kept sync.Map // entries not released
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				id := int64(p*perProducer + i + 1)
				e := addKey(ks, fmt.Sprintf("p%d-%d", p, i), id)
				if e == nil {
					t.Errorf("unique key p%d-%d refused", p, i)
					return
				}
				if i%10 == 0 {
					kept.Store(e, true)
					continue
				}
				work <- e
			}
		})
	}
	var done sync.WaitGroup
	released := make([][]*keyEntry[int], workers)
	for w := range workers {
		done.Go(func() {
			for e := range work {
				if !finishKey(ks, e) {
					t.Errorf("entry %v not running", e.meta.key)
				}
				released[w] = append(released[w], e)
			}
		})
	}
	wg.Wait()
	close(work)
	done.Wait()

	held := heldKeys(ks)
	n := 0
	kept.Range(func(k, _ any) bool {
		e := k.(*keyEntry[int])
		assert.Same(t, e, held[e.meta.key])
		n++
		return true
	})
	assert.Len(t, held, n)
	slots := inTables(ks)
	for _, es := range released {
		for _, e := range es {
			if slots[e] != 0 {
				t.Fatalf("released entry %s still in a table", e.meta.key)
			}
		}
	}
}

func TestKeyShardSize(t *testing.T) {
	assert.Equal(t, uintptr(128), unsafe.Sizeof(keyShard[int]{}), "a shard's table pointer and lock on cache lines of their own")
}

func TestKeyedMetaSize(t *testing.T) {
	// A held keyed job's overhead: one 64-byte size class, not 80.
	assert.Equal(t, uintptr(64), unsafe.Sizeof(keyedMeta[int]{}), "a keyed job's meta and entry")
}
