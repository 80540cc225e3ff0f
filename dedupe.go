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
// Each shard is an open-addressing hash table of entry pointers, written
// under the shard's lock, with one exception: the worker that finishes a
// keyed job releases the key without the lock. It moves the entry to gone
// with a compare-and-swap (see keyEntry) and then swaps the entry's slot
// to a tombstone, which a later insert reuses. So neither a claim nor a
// finish takes a lock or hashes the key, and nothing ever sweeps the table
// for finished entries: Enqueue's insert is the only map work a job costs.
//
// Lock order: a shard's mutex may be held while taking the schedule's; the
// schedule never takes a shard's.
type keySet[T any] struct {
	seed   maphash.Seed
	tomb   *keyEntry[T] // marks a slot whose entry has gone; reusable
	moved  *keyEntry[T] // marks a slot of a table that is being (or was) rehashed
	shards [keyShards]keyShard[T]
}

// keyShards is the number of shards; a key's shard is the top bits of its
// hash, its slot in the shard's table the low bits.
const (
	keyShards     = 64
	keyShardShift = 64 - 6
)

// keyShard is one shard of the set. It takes two cache lines: the table pointer, which finishing
// workers read, apart from the lock, which the producer writes on every
// Enqueue, so that neither evicts the other from the other's cache.
type keyShard[T any] struct {
	tab    atomic.Pointer[keyTable[T]] // replaced under mu; read without it by finishing workers
	_      [56]byte
	mu     sync.Mutex
	used   int                       // slots of tab that are not empty (tombstones included); mu
	reruns map[*keyEntry[T]]*item[T] // coalesced reruns of running keys, made on first use; mu
	_      [40]byte
}

// keyTable is a shard's table: linear probing over a power-of-two array.
// A slot goes from empty to used and never back (a rehash makes a new
// table), so a probe for an entry that is in the table meets it before
// any empty slot. Slots are written under the shard's lock; a finishing
// worker reads them without it, and so reads only e: a slot is empty
// while its e is nil.
type keyTable[T any] struct {
	slots []keySlot[T]
	mask  uint64
}

type keySlot[T any] struct {
	h uint64                      // the key's hash | 1 while used; 0 while empty; shard lock
	e atomic.Pointer[keyEntry[T]] // the entry, or the set's tomb or moved marker; nil while empty
}

// minKeyTable is the size a shard's table starts at and never shrinks
// below.
const minKeyTable = 64

// keyState is where the job holding a key is.
type keyState uint64

const (
	keyPending keyState = iota + 1 // queued or scheduled
	keyRunning                     // running
	keyRerun                       // running, with a coalesced rerun waiting
	keyGone                        // finished or cancelled: the key is free
)

// keyEntry is a key's entry; a keyed job's meta and entry are allocated
// together, in 64 bytes (the rare coalesced rerun waits in its shard's
// reruns map, not here). Its job and state share one word, so that a
// worker can move the entry from pending to running when it claims the
// job, and from running to gone when the job ends, with one
// compare-and-swap and without the shard's lock: the item carries a
// pointer to its entry, and a claim or finish touches neither the lock nor
// the key. Every other change is made under the shard's lock, with a
// compare-and-swap too, as a claim or finish may move the word meanwhile.
// Gone is final: a gone entry is never used again.
type keyEntry[T any] struct {
	st    atomic.Uint64 // job ID << 3 | keyState
	h     uint64        // the key's hash | 1; set before the entry is published
	meta  *jobMeta[T]   // the pending (or running) job's key and group; shard lock
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
	ks := &keySet[T]{seed: maphash.MakeSeed(), tomb: new(keyEntry[T]), moved: new(keyEntry[T])}
	for i := range ks.shards {
		ks.shards[i].tab.Store(newKeyTable[T](minKeyTable))
	}
	return ks
}

func newKeyTable[T any](n int) *keyTable[T] {
	return &keyTable[T]{slots: make([]keySlot[T], n), mask: uint64(n - 1)}
}

// hash returns key's hash, never 0.
func (ks *keySet[T]) hash(key string) uint64 { return maphash.String(ks.seed, key) | 1 }

// shard returns the shard of a key with hash h.
func (ks *keySet[T]) shard(h uint64) *keyShard[T] { return &ks.shards[h>>keyShardShift] }

// home returns the slot where the probe for a key with hash h starts. Bit
// 0 of a hash is always set, so it is not used.
func (t *keyTable[T]) home(h uint64) uint64 { return (h >> 1) & t.mask }

// setRerun records r as the coalesced rerun of e's running job; sh is e's
// shard, and its lock is held.
func (sh *keyShard[T]) setRerun(e *keyEntry[T], r *item[T]) {
	if sh.reruns == nil {
		sh.reruns = make(map[*keyEntry[T]]*item[T])
	}
	sh.reruns[e] = r
}

// takeRerun removes and returns e's rerun, nil if it has none; sh is e's
// shard, and its lock is held.
func (sh *keyShard[T]) takeRerun(e *keyEntry[T]) *item[T] {
	r := sh.reruns[e]
	delete(sh.reruns, e)
	return r
}

// entries calls fn for every key held, under its shard's lock; fn returns
// whether to remove the entry. Gone entries met on the way (a finishing
// worker is about to bury them) are removed without calling fn.
func (ks *keySet[T]) entries(fn func(e *keyEntry[T]) (remove bool)) {
	for i := range ks.shards {
		sh := &ks.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		for j := range t.slots {
			s := &t.slots[j]
			e := s.e.Load()
			if e == nil || e == ks.tomb {
				continue
			}
			if e.gone() || fn(e) {
				ks.bury(s, e)
			}
		}
		sh.mu.Unlock()
	}
}

func (e *keyEntry[T]) gone() bool { return keyState(e.st.Load()&7) == keyGone }

// counts returns the number of keys held and of coalesced reruns waiting.
func (ks *keySet[T]) counts() (keys, reruns int) {
	ks.entries(func(e *keyEntry[T]) bool {
		switch _, st := e.load(); st {
		case keyGone:
			return true // finished since entries looked
		case keyRerun:
			reruns++
		}
		keys++
		return false
	})
	return keys, reruns
}

// find returns the entry in sh for key, gone or not, or nil, and the slot
// an insert of key should use; sh.mu is held.
func (ks *keySet[T]) find(sh *keyShard[T], key string, h uint64) (*keyEntry[T], *keySlot[T]) {
	t := sh.tab.Load()
	var free *keySlot[T] // the first tombstone met
	for i := t.home(h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		hv := s.h
		if hv == 0 {
			if free == nil {
				free = s
			}
			return nil, free
		}
		e := s.e.Load()
		if e == ks.tomb {
			if free == nil {
				free = s
			}
			continue
		}
		if hv == h && e.meta.key == key {
			return e, s
		}
	}
}

// insert makes e the entry of its key (e.meta.key, hash e.h), which must
// be free, in slot s as find returned it; sh.mu is held.
func (ks *keySet[T]) insert(sh *keyShard[T], s *keySlot[T], e *keyEntry[T]) {
	if s.e.Load() == nil {
		sh.used++
	}
	// Otherwise s held a tombstone or the key's own gone entry, which e
	// replaces.
	s.h = e.h
	s.e.Store(e)
	if t := sh.tab.Load(); sh.used*4 > len(t.slots)*3 {
		ks.rehash(sh, t)
	}
}

// remove takes e, which is gone or about to be, out of the table; sh.mu
// is held.
func (ks *keySet[T]) remove(sh *keyShard[T], e *keyEntry[T]) {
	t := sh.tab.Load()
	if s := t.slot(e); s != nil {
		ks.bury(s, e)
	}
}

// bury turns slot s, which holds e, into a tombstone; the shard's lock is
// held. A finishing worker may bury it first.
func (ks *keySet[T]) bury(s *keySlot[T], e *keyEntry[T]) { s.e.CompareAndSwap(e, ks.tomb) }

// slot returns the slot of t holding e, nil if none does.
func (t *keyTable[T]) slot(e *keyEntry[T]) *keySlot[T] {
	for i := t.home(e.h); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		switch s.e.Load() {
		case nil:
			return nil
		case e:
			return s
		}
	}
}

// release removes e, which its worker has just moved from running to
// gone, from its shard's table without taking the lock when it can.
func (ks *keySet[T]) release(e *keyEntry[T]) {
	sh := ks.shard(e.h)
	if s := sh.tab.Load().slot(e); s != nil && s.e.CompareAndSwap(e, ks.tomb) {
		return
	}
	// A rehash moved the slot, or is moving it, or an insert of the same
	// key reused it: look again under the lock.
	sh.mu.Lock()
	ks.remove(sh, e)
	sh.mu.Unlock()
}

// rehash moves the live entries of t to a new table sized for them, with
// room to grow; sh.mu is held. Each old slot is swapped to the moved
// marker as it is read, so that a finishing worker either buried its
// entry before (and it is not copied) or finds the marker and retries
// under the lock, in the new table.
func (ks *keySet[T]) rehash(sh *keyShard[T], t *keyTable[T]) {
	live := 0
	for i := range t.slots {
		if e := t.slots[i].e.Load(); e != nil && e != ks.tomb {
			live++
		}
	}
	n := minKeyTable
	for n < live*2 { // at most half full after the rehash
		n <<= 1
	}
	nt := newKeyTable[T](n)
	live = 0
	for i := range t.slots {
		s := &t.slots[i]
		if e := s.e.Load(); e == nil || e == ks.tomb {
			continue // only an insert, under the lock, changes these
		}
		e := s.e.Swap(ks.moved)
		if e == ks.tomb {
			continue // its worker buried it just now
		}
		h := s.h // == e.h, without reading the entry
		j := nt.home(h)
		for nt.slots[j].h != 0 {
			j = (j + 1) & nt.mask
		}
		nt.slots[j].h = h
		nt.slots[j].e.Store(e)
		live++
	}
	sh.used = live
	sh.tab.Store(nt)
}
