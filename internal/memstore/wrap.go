package memstore

import (
	"fmt"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// The methods in this file serve a store that keeps its jobs elsewhere and
// falls back to this one while it cannot (redisstore's outage fallback):
// it numbers the jobs itself (Put), claims without waiting (TryClaim), and
// takes waiting jobs out to write them elsewhere (Take), putting back
// those it could not write (Restore). The queue's engine calls none of
// them.

// MaxID is the largest job ID Put and Restore accept: a key's entry packs
// its job's ID with the job's state into 64 bits.
const MaxID = 1<<61 - 1

// Put is Add for a caller that numbers the jobs itself: the job keeps its
// ID, which must be in 1..MaxID and not that of another job the store
// holds or has held (the store tells jobs and stale items apart by ID). A
// store that takes jobs from Put must take none from Add, whose IDs would
// meet them. Everything else is as in AddJob (the attempt starts at 0),
// parked jobs counting against MaxPending.
func (s *Store[T]) Put(job queuetype.Job[T], parked int) (storekit.Added, error) {
	if job.ID <= 0 || job.ID > MaxID {
		return storekit.Added{}, fmt.Errorf("queue: in-memory store: job ID %d out of 1..%d", job.ID, int64(MaxID))
	}
	job.Attempt = 0
	return s.addJob(&job, false, parked, job.ID)
}

// TryClaim is Claim without waiting, among the priorities with an index
// below below: it claims the oldest ready job of the highest such priority
// that has one, or reports false. It does not promote due jobs; PromoteDue
// does.
func (s *Store[T]) TryClaim(below int) (queuetype.Job[T], bool) {
	var it item[T]
	for p := range min(below, len(s.rings)) {
		r := s.rings[p].Load()
		for r != nil && s.pop(r, &it, false) {
			if it.id < 0 {
				s.tombs[it.prio].Add(-1) // removed by ID while it was ready
				continue
			}
			if it.at != 0 && it.at > s.now() {
				s.unpromote(it) // taken before its time: see ClaimJob
				continue
			}
			if it.ent != nil && !it.ent.move(it.id, keyPending, keyRunning) {
				s.tombs[it.prio].Add(-1) // cancelled while it was ready
				continue
			}
			it.attempt++
			s.running[0].n.Add(1)
			var job queuetype.Job[T]
			s.fill(&job, &it)
			return job, true
		}
	}
	return queuetype.Job[T]{}, false
}

// Take removes up to n waiting jobs of the priorities (by index) for
// which want is true and returns them: ready jobs first, highest priority
// and oldest first, then scheduled ones. They leave the store as cancelled
// jobs do: their keys and groups are free at once. Running jobs and
// coalesced reruns stay. Restore puts back a job that could not go where
// it was taken for.
func (s *Store[T]) Take(n int, want func(prio int) bool) []queuetype.Job[T] {
	var out []queuetype.Job[T]
	var it item[T]
	for p := range s.rings {
		r := s.rings[p].Load()
		if r == nil || !want(p) {
			continue
		}
		for len(out) < n && s.pop(r, &it, false) {
			if j, ok := s.takeReady(&it); ok {
				out = append(out, j)
			}
		}
	}
	if len(out) < n {
		out = s.takeScheduled(out, n, want)
	}
	return out
}

// takeReady ends the wait of a ready item Take popped from its ring, as
// Cancel would have, and returns its job; false if it had been cancelled.
func (s *Store[T]) takeReady(it *item[T]) (queuetype.Job[T], bool) {
	var j queuetype.Job[T]
	e := it.ent
	if it.id < 0 {
		s.tombs[it.prio].Add(-1) // removed by ID while it was ready
		return j, false
	}
	if e == nil {
		s.fill(&j, it)
		return j, true
	}
	sh := s.keys.shardOf(e)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !e.is(it.id, keyPending) {
		s.tombs[it.prio].Add(-1) // cancelled while it was ready
		return j, false
	}
	s.fill(&j, it)
	e.st.Store(packKey(it.id, keyGone)) // nothing else moves a pending entry under its shard's lock but a claim, and the item is out of its ring
	sh.reclaim(e)
	return j, true
}

// takeScheduled is Take's pass over the schedule, in the heap's order. A
// job without a key leaves the heap at once. One with a key is cancelled
// as Cancel does it, under its shard's lock, which the lock order forbids
// under the schedule's; its item then leaves the heap too, so that no
// stale item of the job's ID is left to meet the job when it is
// restored.
func (s *Store[T]) takeScheduled(out []queuetype.Job[T], n int, want func(prio int) bool) []queuetype.Job[T] {
	var keyed []item[T]
	s.sched.mu.Lock()
	s.sched.filterLocked(func(it *item[T]) bool {
		if len(out)+len(keyed) >= n || !want(int(it.prio)) {
			return true
		}
		if it.ent != nil {
			if it.ent.is(it.id, keyPending) {
				keyed = append(keyed, *it)
			}
			return true
		}
		var j queuetype.Job[T]
		s.fill(&j, it)
		out = append(out, j)
		if g := it.more.grp(); g != "" && s.sched.groups[g].id == it.id {
			delete(s.sched.groups, g)
		}
		return false
	})
	s.sched.mu.Unlock()
	if len(keyed) == 0 {
		return out
	}
	taken := make(map[int64]bool, len(keyed))
	for i := range keyed {
		if j, ok := s.takeKeyed(&keyed[i]); ok {
			out = append(out, j)
			taken[j.ID] = true
		}
	}
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	s.sched.filterLocked(func(it *item[T]) bool {
		if taken[it.id] && it.ent != nil && !it.ent.is(it.id, keyPending) {
			s.sched.dead-- // counted by takeKeyed's cancel
			return false
		}
		return true
	})
	s.sched.counted()
	return out
}

// filterLocked keeps the items for which keep is true and restores the
// heap's order; s.mu is held.
func (s *schedule[T]) filterLocked(keep func(it *item[T]) bool) {
	total, k := s.heap.len(), 0
	for i := range total {
		it := s.heap.at(i)
		if !keep(it) {
			continue
		}
		if k != i {
			*s.heap.at(k) = *it
		}
		k++
	}
	if k == total {
		return
	}
	s.heap.truncate(k)
	for i := (k - 2) / 4; i >= 0; i-- { // heapify: sift every parent down
		s.down(i)
	}
	s.counted()
	s.poke()
}

// takeKeyed cancels the scheduled keyed item it, if its job still waits,
// and returns its job.
func (s *Store[T]) takeKeyed(it *item[T]) (queuetype.Job[T], bool) {
	var j queuetype.Job[T]
	e := it.ent
	sh := s.keys.shardOf(e)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !e.is(it.id, keyPending) {
		return j, false // cancelled or claimed meanwhile
	}
	s.fill(&j, it)
	if _, del := s.cancelEntry(e); del {
		sh.reclaim(e)
	}
	return j, true
}

// Restore puts back a job Take removed, as it was: with its ID, attempt
// and RunAt. Like a job put back by Retry, it is refused for neither the
// capacity nor MaxPending, and takes no group; a due job that finds its
// ready queue full waits in the schedule, RequeueDelay later, as a due job
// does at promotion. It returns a *DuplicateError, and restores nothing,
// when another job holds the key.
func (s *Store[T]) Restore(job queuetype.Job[T]) error {
	if job.ID <= 0 || job.ID > MaxID {
		return fmt.Errorf("queue: in-memory store: job ID %d out of 1..%d", job.ID, int64(MaxID))
	}
	it := s.item(&job)
	if !job.RunAt.IsZero() {
		it.at = max(s.instant(job.RunAt), 1)
	}
	if job.Key == "" {
		s.restore(&it)
		return nil
	}
	h := s.keys.hash(job.Key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(job.Key, h)
	switch {
	case e == nil:
		e = sh.add(job.Key, h, packKey(it.id, keyPending))
	case e.gone():
		e.st.Store(packKey(it.id, keyPending)) // the key's own gone entry
	default:
		return e.dupErr()
	}
	e.more, e.prio = it.more, it.prio
	it.ent = e
	e.sched = s.restore(&it) // under the shard's lock, which Cancel takes to read it
	return nil
}

// restore places it in its ready queue when it is due and there is room,
// else in the schedule, and reports whether it went to the schedule.
func (s *Store[T]) restore(it *item[T]) bool {
	now := s.now()
	if it.at <= now && s.push(it, false) == pushed {
		return false
	}
	if it.at <= now {
		it.at = after(now, s.cfg.RequeueDelay)
	}
	s.sched.push(*it, false)
	return true
}

// Holds reports whether a job of the priorities (by index) for which want
// is true waits ready or scheduled. It looks at every scheduled job.
func (s *Store[T]) Holds(want func(prio int) bool) bool {
	for p := range s.rings {
		if r := s.rings[p].Load(); r != nil && want(p) && r.len() > int(s.tombs[p].Load()) {
			return true
		}
	}
	s.sched.mu.Lock()
	defer s.sched.mu.Unlock()
	for i := range s.sched.heap.len() {
		if it := s.sched.heap.at(i); want(int(it.prio)) && (it.ent == nil || it.ent.is(it.id, keyPending)) {
			return true
		}
	}
	return false
}

// Pending returns the number of jobs MaxPending bounds: ready, scheduled
// and coalesced reruns.
func (s *Store[T]) Pending() int {
	return s.Len() + s.sched.len() + int(s.keys.waiting.Load())
}
