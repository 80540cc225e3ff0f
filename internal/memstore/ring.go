package memstore

import (
	"runtime"
	"sync/atomic"
)

// ring is a bounded multi-producer multi-consumer FIFO of items: Dmitry
// Vyukov's array queue, where each slot carries a sequence number that
// says whose turn it is. A push or pop costs one compare-and-swap on the
// tail or head and no lock, so producers and workers never queue behind a
// mutex as they do on a channel's. Items leave in the order their pushes
// won the tail.
//
// Three additions: the tail word carries a closed bit, so that closing the
// ring to new jobs is ordered against every push by the tail's own
// compare-and-swap (no separate in-flight count), and producers keep a
// cached copy of the head on the tail's cache line, so that a push reads
// the head, which every pop writes, only when the cached copy says the
// ring may be at its limit. And the head word carries a frozen bit, set
// by an admin scan (Store.popLock) to keep pops off the items it reads:
// a pop's own compare-and-swap on the head orders it before or after the
// freeze, so pops pay nothing more for it (a lock would cost every claim
// two atomic additions). A push or pop that loses its compare-and-swap
// to another yields its P once (contended): 4 producers and 10 workers on
// 2 cores moved jobs faster with it, 1 producer no slower
// (docs/benchmarks.md, "P=4 against P=1, yielding on a lost
// compare-and-swap").
type ring[T any] struct {
	_         [64]byte
	head      atomic.Uint64 // next position to pop, | frozenBit while frozen
	_         [56]byte
	tail      atomic.Uint64 // next position to push, | closedBit once closed to new jobs
	headCache atomic.Uint64 // a head position already passed: head >= headCache
	_         [48]byte
	mask      uint64
	limit     uint64 // capacity: at most this many items
	slots     []slot[T]
}

// closedBit marks the tail of a ring closed to pushes of new jobs.
const closedBit = 1 << 63

// frozenBit marks the head of a ring frozen: no pop takes an item until
// it is cleared (freeze, thaw).
const frozenBit = 1 << 63

type slot[T any] struct {
	seq atomic.Uint64 // == pos: free for the push at pos; == pos+1: holds the item pushed at pos
	it  item[T]
	_   [8]byte // a slot of an int payload fills a cache line: workers taking neighbouring items do not share one
}

// pushResult says how a push went.
type pushResult uint8

const (
	pushed     pushResult = iota
	pushFull              // at the limit
	pushClosed            // a new job, and the ring is closed
)

// newRing returns a ring holding at most limit items.
func newRing[T any](limit int) *ring[T] {
	size := uint64(1)
	for size < uint64(limit) {
		size <<= 1
	}
	r := &ring[T]{mask: size - 1, limit: uint64(limit), slots: make([]slot[T], size)}
	for i := range r.slots {
		r.slots[i].seq.Store(uint64(i))
	}
	return r
}

// push appends it unless the ring already holds limit items (or its own
// limit, if that is smaller), or, for a new job (fresh), the ring is
// closed. Jobs already accepted (reruns, promotions) may still be pushed
// into a closed ring, so that a drain runs them. yield says that the
// caller holds no lock, so that a push that meets another may yield its
// P (contended).
func (r *ring[T]) push(it *item[T], limit uint64, fresh, yield bool) pushResult {
	limit = min(limit, r.limit)
	t := r.tail.Load()
	for {
		if fresh && t&closedBit != 0 {
			return pushClosed
		}
		pos := t &^ closedBit
		if h := r.headCache.Load(); pos-h >= limit {
			// Maybe at the limit: look at the real head.
			h = r.head.Load() &^ frozenBit
			if pos >= h && pos-h >= limit {
				return pushFull
			}
			r.headCache.Store(h)
		}
		s := &r.slots[pos&r.mask]
		switch seq := s.seq.Load(); {
		case seq == pos:
			if r.tail.CompareAndSwap(t, t+1) {
				s.it = *it
				s.seq.Store(pos + 1) // publishes it to the pop at pos
				return pushed
			}
			// Another push won pos between the load and the swap: pushes
			// run on more than one core at once, and the tail's cache
			// line moves between them at every push.
			if yield {
				contended()
				yield = false
			}
		case seq < pos:
			return pushFull // the slot's previous item has not been popped
		}
		t = r.tail.Load() // another push took pos, or the ring was closed
	}
}

// contended yields the P, at most once per push or pop, after its
// compare-and-swap on the tail or head lost to another goroutine's: the
// two ran on different cores at once. Another goroutine of the P runs
// meanwhile, often a worker where a push yields and a producer where a
// pop does, so that one core tends to push while another pops, each end
// of the ring's cache lines staying on its core, instead of both cores
// pushing or both popping and trading the tail's or head's line at every
// job.
func contended() {
	runtime.Gosched()
}

// close closes the ring to new jobs: every later fresh push fails, and
// every fresh push that succeeded is in the ring when close returns.
func (r *ring[T]) close() {
	for {
		t := r.tail.Load()
		if t&closedBit != 0 || r.tail.CompareAndSwap(t, t|closedBit) {
			return
		}
	}
}

// popResult says how a pop went.
type popResult uint8

const (
	popEmpty  popResult = iota // empty, or its oldest push has not finished publishing
	popped                     // *dst holds the oldest item
	popFrozen                  // an admin scan has frozen the ring: try again after it
)

// pop removes the oldest item into *dst, unless the ring is empty or
// frozen. yield says that the caller holds no lock, so that a pop that
// meets another may yield its P (contended).
func (r *ring[T]) pop(dst *item[T], yield bool) popResult {
	pos := r.head.Load()
	for {
		if pos&frozenBit != 0 {
			return popFrozen
		}
		s := &r.slots[pos&r.mask]
		switch seq := s.seq.Load(); {
		case seq == pos+1:
			if r.head.CompareAndSwap(pos, pos+1) {
				*dst = s.it
				s.it = item[T]{} // drop references for the GC
				s.seq.Store(pos + r.mask + 1)
				return popped
			}
			// Another pop won pos: pops run on more than one core at
			// once, and the head's cache line moves between them.
			if yield {
				contended()
				yield = false
			}
			pos = r.head.Load()
		case seq < pos+1:
			return popEmpty
		default:
			pos = r.head.Load() // another pop took pos
		}
	}
}

// freeze keeps every pop off the ring's items until thaw, and returns
// the head: pops that won a position before it may still be copying
// their items out, but those lie before the head, and no item from the
// head on leaves the ring. One goroutine at a time freezes a ring
// (Store.popLock).
func (r *ring[T]) freeze() uint64 {
	for {
		h := r.head.Load()
		if r.head.CompareAndSwap(h, h|frozenBit) {
			return h
		}
	}
}

// thaw ends a freeze.
func (r *ring[T]) thaw() {
	for {
		h := r.head.Load()
		if h&frozenBit == 0 || r.head.CompareAndSwap(h, h&^frozenBit) {
			return
		}
	}
}

// frozen reports whether the ring is frozen.
func (r *ring[T]) frozen() bool { return r.head.Load()&frozenBit != 0 }

// len returns the number of items, exact when no push or pop is under way.
func (r *ring[T]) len() int {
	h := r.head.Load() &^ frozenBit
	t := r.tail.Load() &^ closedBit
	if t < h {
		return 0
	}
	return int(t - h)
}
