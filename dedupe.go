package queue

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// keySet is the in-memory store's pending-key set: one entry per key whose
// job is queued, scheduled or running, plus at most one coalesced rerun of
// a running key. It is sharded so that unrelated keys never share a lock.
//
// Lock order: a shard's mutex may be held while taking the schedule's; the
// schedule never takes a shard's.
type keySet[T any] struct {
	seed   maphash.Seed
	shards [keyShards]keyShard[T]
}

const keyShards = 64

type keyShard[T any] struct {
	mu      sync.Mutex
	m       map[string]*keyEntry[T]
	sweepAt int      // sweep finished entries out of m when it grows to this size
	_       [40]byte // keep neighbouring shards' locks off one cache line
}

// keyState is where the job holding a key is.
type keyState uint64

const (
	keyPending keyState = iota + 1 // queued or scheduled
	keyRunning                     // running
	keyRerun                       // running, with a coalesced rerun waiting
	keyGone                        // finished or cancelled: the key is free
)

// keyEntry is a key's entry. Its job and state share one word, so that a
// worker can move the entry from pending to running when it claims the
// job, and from running to gone when the job ends, with one
// compare-and-swap and without the shard's lock: the item carries a
// pointer to its entry, and a claim or finish touches neither the map nor
// the lock. Every other change is made under the shard's lock, with a
// compare-and-swap too, as a claim or finish may move the word meanwhile.
// A gone entry may stay in the map until an Enqueue of its key replaces it
// or a sweep removes it.
type keyEntry[T any] struct {
	st    atomic.Uint64 // job ID << 3 | keyState
	group string        // the job's group, freed when it is cancelled; shard lock
	rerun *item[T]      // the coalesced rerun of a running key; shard lock
	sched bool          // a pending job waits in the schedule, not a ready queue; shard lock
	prio  uint8         // the pending job's priority, for the ready queues' tombstone counts; shard lock
}

func packKey(id int64, st keyState) uint64 { return uint64(id)<<3 | uint64(st) }

// load returns the entry's job and state.
func (e *keyEntry[T]) load() (int64, keyState) {
	v := e.st.Load()
	return int64(v >> 3), keyState(v & 7)
}

// is reports whether the entry belongs to job id in state st.
func (e *keyEntry[T]) is(id int64, st keyState) bool { return e.st.Load() == packKey(id, st) }

// move changes the entry from (id, from) to (id, to); false if it was not
// in that state.
func (e *keyEntry[T]) move(id int64, from, to keyState) bool {
	return e.st.CompareAndSwap(packKey(id, from), packKey(id, to))
}

func newKeySet[T any]() *keySet[T] {
	ks := &keySet[T]{seed: maphash.MakeSeed()}
	for i := range ks.shards {
		ks.shards[i].m = make(map[string]*keyEntry[T])
		ks.shards[i].sweepAt = minSweep
	}
	return ks
}

func (ks *keySet[T]) shard(key string) *keyShard[T] {
	return &ks.shards[maphash.String(ks.seed, key)%keyShards]
}

// minSweep is the smallest map size at which a shard sweeps out gone
// entries.
const minSweep = 64

// counts returns the number of keys held and of coalesced reruns waiting.
func (ks *keySet[T]) counts() (keys, reruns int) {
	for i := range ks.shards {
		s := &ks.shards[i]
		s.mu.Lock()
		for _, e := range s.m {
			switch _, st := e.load(); st {
			case keyGone:
				continue
			case keyRerun:
				reruns++
			}
			keys++
		}
		s.mu.Unlock()
	}
	return keys, reruns
}

// forEach calls fn for every key held, under its shard's lock; fn returns
// whether to delete the entry. Gone entries are deleted on the way.
func (ks *keySet[T]) forEach(fn func(key string, e *keyEntry[T]) (del bool)) {
	for i := range ks.shards {
		s := &ks.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if _, st := e.load(); st == keyGone || fn(k, e) {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
}

// get returns the entry holding key, nil if the key is free; s.mu is held.
func (s *keyShard[T]) get(key string) *keyEntry[T] {
	e := s.m[key]
	if e == nil {
		return nil
	}
	if _, st := e.load(); st == keyGone {
		return nil
	}
	return e
}

// put makes e key's entry; s.mu is held. Now and then it sweeps gone
// entries out, so that the map stays within about twice the keys held.
func (s *keyShard[T]) put(key string, e *keyEntry[T]) {
	s.m[key] = e
	if len(s.m) < s.sweepAt {
		return
	}
	for k, o := range s.m {
		if _, st := o.load(); st == keyGone {
			delete(s.m, k)
		}
	}
	s.sweepAt = max(2*len(s.m), minSweep)
}
