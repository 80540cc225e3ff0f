package memstore

import (
	"container/heap"
	"time"

	"github.com/queuekit/queue/queuetype"
)

// The methods in this file serve the queue's admin API (package admin):
// they list, find and remove pending jobs by ID. Listing is an O(n) scan
// of the ready rings or the schedule with a bounded selection of the
// page: it allocates only the page.
//
// Reading a ring's items is safe only while nothing pops them: a pop
// clears the slot it takes. A scan freezes every ring (ring.freeze, a bit
// on the head that each pop's compare-and-swap sees), holding scanMu: a
// pop that finds its ring frozen waits for scanMu (Store.pop). Workers
// wait for the scan (milliseconds for a million jobs), producers do not,
// as a push writes only free slots, which a scan does not read; and a
// claim costs nothing for it, where a read lock would cost two atomic
// additions per claim.

// popLock excludes pops from the rings that exist; popUnlock ends that.
// A ring made meanwhile is not frozen, and eachReady skips it.
func (s *Store[T]) popLock() {
	s.scanMu.Lock()
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil {
			r.freeze()
		}
	}
}

func (s *Store[T]) popUnlock() {
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil {
			r.thaw()
		}
	}
	s.scanMu.Unlock()
}

// pop pops the oldest item of r into *it, waiting out a scan that froze
// r; false when r is empty. yield says that the caller holds no lock
// (ring.pop).
func (s *Store[T]) pop(r *ring[T], it *item[T], yield bool) bool {
	for {
		switch r.pop(it, yield) {
		case popped:
			return true
		case popEmpty:
			return false
		}
		// Frozen: the scan holds scanMu until it has thawed r, so
		// taking the read lock waits for it.
		s.scanMu.RLock()
		//lint:ignore SA2001 the lock is taken only to wait for the scan
		s.scanMu.RUnlock()
	}
}

// eachReady calls fn for every published item of the ready rings, by
// priority index, in ring order (backward: newest first); pops are
// excluded.
func (s *Store[T]) eachReady(backward bool, fn func(it *item[T])) {
	for p := range s.rings {
		r := s.rings[p].Load()
		if r == nil || !r.frozen() {
			continue // made after popLock: newer than the scan
		}
		h := r.head.Load() &^ frozenBit
		t := r.tail.Load() &^ closedBit
		for i := range t - h {
			pos := h + i
			if backward {
				pos = t - 1 - i
			}
			sl := &r.slots[pos&r.mask]
			if sl.seq.Load() != pos+1 {
				continue // a push not yet published
			}
			fn(&sl.it)
		}
	}
}

// hasKeyPrefix reports whether the pending keyed item it has a key
// starting with prefix, under its shard's lock (an entry's key may change
// once its job has left).
func (s *Store[T]) hasKeyPrefix(it *item[T], prefix string) bool {
	e := it.ent
	if e == nil {
		return false
	}
	sh := s.keys.shardOf(e)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return e.is(it.id, keyPending) && len(e.key) >= len(prefix) && e.key[:len(prefix)] == prefix
}

// pendingLive reports whether a ready or scheduled item is still its
// job's: not removed by ID, and for a keyed job, still holding its key as
// pending.
func pendingLive[T any](it *item[T]) bool {
	return it.id > 0 && (it.ent == nil || it.ent.is(it.id, keyPending))
}

// Position is a place in a listing's order: the due instant (0 for ready
// jobs, which are ordered by ID alone) and the ID.
type Position struct {
	At int64
	ID int64
}

func (a Position) less(b Position) bool { return a.At < b.At || (a.At == b.At && a.ID < b.ID) }

// ListQuery selects pending jobs for List.
type ListQuery struct {
	Ready  bool      // the ready rings; else the schedule
	Oldest bool      // ascending order; else descending
	After  *Position // strictly after this position in the order; nil: from the start
	Limit  int       // at most this many
	// Keep, when not nil, filters by priority index and target; it is
	// called with the store's locks held and must be fast.
	Keep func(prio int, target string) bool
	// KeyPrefix, when not "", keeps only jobs whose key starts with it.
	KeyPrefix string
}

// List returns up to q.Limit pending jobs in q's order, filled as Claim
// fills them (the attempt made so far), with their positions (the
// instant is in the store's time line: convert it with Time).
func (s *Store[T]) List(q ListQuery) ([]queuetype.Job[T], []Position) {
	var (
		jobs []queuetype.Job[T]
		pos  []Position
	)
	after := q.After
	for len(jobs) < q.Limit {
		// Select a batch under the lock, then fill it under the keys'
		// locks, which may not be held with the schedule's: a batch may
		// lose jobs cancelled meanwhile or not matching the key prefix.
		want := q.Limit - len(jobs)
		if q.KeyPrefix != "" && !q.Ready {
			// The schedule's scan cannot read keys (their locks come
			// before the schedule's): filter a larger batch after it.
			want = max(want, 4096)
		}
		batch := s.selectItems(q, after, want)
		for i := range batch {
			it := &batch[i]
			var j queuetype.Job[T]
			if !s.fillPending(&j, it) || it.id < 0 {
				continue
			}
			if q.KeyPrefix != "" && (len(j.Key) < len(q.KeyPrefix) || j.Key[:len(q.KeyPrefix)] != q.KeyPrefix) {
				continue
			}
			if len(jobs) < q.Limit {
				jobs = append(jobs, j)
				pos = append(pos, itemPos(it, q.Ready))
			}
		}
		if len(batch) < want {
			break
		}
		p := itemPos(&batch[len(batch)-1], q.Ready)
		after = &p
	}
	return jobs, pos
}

// Walk examines at most n pending jobs in q's order from q.After,
// ignoring q.Keep, q.KeyPrefix and q.Limit (the caller filters what it
// returns), and returns those still pending, filled as List fills them.
// When it examined n jobs, last is the position of the n-th, where a
// later walk resumes; nil when the order ended sooner.
func (s *Store[T]) Walk(q ListQuery, n int) (jobs []queuetype.Job[T], last *Position) {
	q.Keep, q.KeyPrefix = nil, ""
	batch := s.selectItems(q, q.After, n)
	for i := range batch {
		it := &batch[i]
		var j queuetype.Job[T]
		if !s.fillPending(&j, it) || it.id < 0 {
			continue
		}
		jobs = append(jobs, j)
	}
	if len(batch) == n {
		p := itemPos(&batch[n-1], q.Ready)
		last = &p
	}
	return jobs, last
}

func itemPos[T any](it *item[T], ready bool) Position {
	if ready {
		return Position{ID: it.id}
	}
	return Position{At: it.at, ID: it.id}
}

// selectItems copies the first n live items after after in q's order.
func (s *Store[T]) selectItems(q ListQuery, after *Position, n int) []item[T] {
	sel := &selection[T]{n: n, desc: !q.Oldest, ready: q.Ready}
	visit := func(it *item[T]) {
		// The checks that read only the item first: the others read
		// memory of their own.
		p := itemPos(it, q.Ready)
		if after != nil && !(q.Oldest && after.less(p) || !q.Oldest && p.less(*after)) {
			return
		}
		if !sel.better(it) || !pendingLive(it) {
			return
		}
		if q.Keep != nil && !q.Keep(int(it.prio), it.more.tgt()) {
			return
		}
		if q.Ready && q.KeyPrefix != "" && !s.hasKeyPrefix(it, q.KeyPrefix) {
			return
		}
		sel.offer(it)
	}
	// Scan from the end the order favours, so that few items displace a
	// kept one: rings hold their items in about ID order, and the heap
	// its earliest items first.
	if q.Ready {
		s.popLock()
		s.eachReady(!q.Oldest, visit)
		s.popUnlock()
	} else {
		s.sched.mu.Lock()
		n := s.sched.heap.len()
		for i := range n {
			if !q.Oldest {
				i = n - 1 - i
			}
			visit(s.sched.heap.at(i))
		}
		s.sched.mu.Unlock()
	}
	return sel.sorted()
}

// selection keeps the best n items offered: a heap whose root is the
// worst kept.
type selection[T any] struct {
	n     int
	desc  bool // best is the largest position
	ready bool
	items []item[T]
}

func (h *selection[T]) Len() int { return len(h.items) }

// Less orders the worst kept first.
func (h *selection[T]) Less(i, j int) bool {
	a, b := itemPos(&h.items[i], h.ready), itemPos(&h.items[j], h.ready)
	if h.desc {
		return a.less(b)
	}
	return b.less(a)
}
func (h *selection[T]) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *selection[T]) Push(x any)    { h.items = append(h.items, x.(item[T])) }
func (h *selection[T]) Pop() any {
	it := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return it
}

// better reports whether offer would keep it.
func (h *selection[T]) better(it *item[T]) bool {
	if len(h.items) < h.n {
		return true
	}
	if h.n == 0 {
		return false
	}
	worst := itemPos(&h.items[0], h.ready)
	p := itemPos(it, h.ready)
	return h.desc && worst.less(p) || !h.desc && p.less(worst)
}

// offer keeps it, which better accepted.
func (h *selection[T]) offer(it *item[T]) {
	if len(h.items) < h.n {
		heap.Push(h, *it)
		return
	}
	h.items[0] = *it
	heap.Fix(h, 0)
}

// sorted returns the kept items, best first.
func (h *selection[T]) sorted() []item[T] {
	out := make([]item[T], len(h.items))
	for i := len(out) - 1; i >= 0; i-- {
		out[i] = heap.Pop(h).(item[T])
	}
	return out
}

// Find returns the pending (ready or scheduled) job with id, and whether
// it is ready. It scans the store.
func (s *Store[T]) Find(id int64) (job queuetype.Job[T], ready, ok bool) {
	it, ready, ok := s.findItem(id)
	if !ok || !s.fillPending(&job, &it) {
		return job, false, false
	}
	return job, ready, true
}

func (s *Store[T]) findItem(id int64) (found item[T], ready, ok bool) {
	s.popLock()
	s.eachReady(false, func(it *item[T]) {
		if !ok && it.id == id && pendingLive(it) {
			found, ready, ok = *it, true, true
		}
	})
	s.popUnlock()
	if ok {
		return found, true, true
	}
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	for i := range s.sched.heap.len() {
		if it := s.sched.heap.at(i); it.id == id && pendingLive(it) {
			return *it, false, true
		}
	}
	return found, false, false
}

// Remove removes the pending job with id, as Cancel removes a keyed one:
// its key and group are free at once. It returns the job and whether it
// found it pending; a job claimed (or removed) meanwhile is not removed.
func (s *Store[T]) Remove(id int64) (queuetype.Job[T], bool) {
	var job queuetype.Job[T]
	it, ready, ok := s.findItem(id)
	if !ok {
		return job, false
	}
	if e := it.ent; e != nil {
		sh := s.keys.shardOf(e)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		// Exactly this job, pending: a worker may claim it at any moment
		// (a CAS, without this lock), and then it is running, not
		// removed; nor may a rerun that took the key meanwhile be
		// cancelled in its place.
		if !s.cancelPending(e, id) {
			return job, false
		}
		s.fill(&job, &it)
		sh.reclaim(e)
		return job, true
	}
	s.fill(&job, &it)
	if ready {
		// Mark the item removed where it is (a negative ID); the claim
		// that pops it skips it and takes back its tombstone.
		removed := false
		s.popLock()
		s.eachReady(false, func(x *item[T]) {
			if x.id == id {
				x.id = -id
				s.tombs[x.prio].Add(1)
				removed = true
			}
		})
		s.popUnlock()
		return job, removed
	}
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	for i := range s.sched.heap.len() {
		x := s.sched.heap.at(i)
		if x.id != id {
			continue
		}
		if g := x.more.grp(); g != "" && s.sched.groups[g].id == id {
			delete(s.sched.groups, g)
		}
		s.sched.removeAt(i)
		return job, true
	}
	return job, false // promoted and claimed meanwhile
}

// removeAt removes heap item i; s.mu is held.
func (s *schedule[T]) removeAt(i int) {
	last := s.heap.pop()
	if i < s.heap.len() {
		*s.heap.at(i) = last
		s.down(i)
		for i > 0 {
			p := (i - 1) / 4
			if !s.less(i, p) {
				break
			}
			s.swap(i, p)
			i = p
		}
	}
	s.counted()
}

// Instant converts t to the store's time line, in which List's positions
// count.
func (s *Store[T]) Instant(t time.Time) int64 { return s.instant(t) }

// Time converts an instant of the store's time line (a Position's At)
// back to a time: the inverse of Instant.
func (s *Store[T]) Time(at int64) time.Time { return s.epoch.Add(time.Duration(at)) }
