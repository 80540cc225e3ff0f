package queue

import "sync/atomic"

// ring is a bounded multi-producer multi-consumer FIFO of items: Dmitry
// Vyukov's array queue, where each slot carries a sequence number that
// says whose turn it is. A push or pop costs one compare-and-swap on the
// tail or head and no lock, so producers and workers never queue behind a
// mutex as they do on a channel's. Items leave in the order their pushes
// won the tail.
type ring[T any] struct {
	_     [64]byte
	head  atomic.Uint64 // next position to pop
	_     [56]byte
	tail  atomic.Uint64 // next position to push
	_     [56]byte
	mask  uint64
	limit uint64 // capacity: at most this many items
	slots []slot[T]
}

type slot[T any] struct {
	seq atomic.Uint64 // == pos: free for the push at pos; == pos+1: holds the item pushed at pos
	it  item[T]
}

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
// limit, if that is smaller).
func (r *ring[T]) push(it item[T], limit uint64) bool {
	limit = min(limit, r.limit)
	pos := r.tail.Load()
	for {
		if h := r.head.Load(); pos >= h && pos-h >= limit {
			return false
		}
		s := &r.slots[pos&r.mask]
		switch seq := s.seq.Load(); {
		case seq == pos:
			if r.tail.CompareAndSwap(pos, pos+1) {
				s.it = it
				s.seq.Store(pos + 1) // publishes it to the pop at pos
				return true
			}
			pos = r.tail.Load()
		case seq < pos:
			return false // the slot's previous item has not been popped: full
		default:
			pos = r.tail.Load() // another push took pos
		}
	}
}

// pop removes the oldest item; false means the ring is empty (or its
// oldest push has not finished publishing).
func (r *ring[T]) pop() (item[T], bool) {
	pos := r.head.Load()
	for {
		s := &r.slots[pos&r.mask]
		switch seq := s.seq.Load(); {
		case seq == pos+1:
			if r.head.CompareAndSwap(pos, pos+1) {
				it := s.it
				s.it = item[T]{} // drop references for the GC
				s.seq.Store(pos + r.mask + 1)
				return it, true
			}
			pos = r.head.Load()
		case seq < pos+1:
			return item[T]{}, false
		default:
			pos = r.head.Load() // another pop took pos
		}
	}
}

// len returns the number of items, exact when no push or pop is under way.
func (r *ring[T]) len() int {
	h := r.head.Load()
	t := r.tail.Load()
	if t < h {
		return 0
	}
	return int(t - h)
}
