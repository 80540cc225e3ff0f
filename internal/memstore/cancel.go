package memstore

import "context"

// Cancel implements Store.
func (s *Store[T]) Cancel(_ context.Context, key string) (int, error) {
	if key == "" {
		return 0, nil
	}
	h := s.keys.hash(key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	if e := sh.find(key, h); e != nil {
		var del bool
		if n, del = s.cancelEntry(e); del {
			sh.reclaim(e)
		}
	}
	return n, nil
}

// CancelMatch implements Store. It visits every pending key.
func (s *Store[T]) CancelMatch(_ context.Context, match func(key string) bool) (int, error) {
	total := 0
	s.keys.entries(func(e *keyEntry) bool {
		if !match(e.key) {
			return false
		}
		n, del := s.cancelEntry(e)
		total += n
		return del
	})
	return total, nil
}

// cancelEntry cancels what e holds that has not started: a pending job or
// a running job's rerun. It reports how many jobs it cancelled and whether
// the entry should go. The entry's shard lock is held.
func (s *Store[T]) cancelEntry(e *keyEntry) (int, bool) {
	for {
		id, st := e.load()
		switch st {
		case keyGone:
			return 0, true
		case keyRunning:
			return 0, false
		case keyRerun:
			// Only finish's slow path, under this lock, moves a rerun entry.
			s.takeRerun(s.keys.shardOf(e), e)
			e.st.Store(packKey(id, keyRunning))
			return 1, false
		}
		if !s.cancelPending(e, id) {
			continue // claimed meanwhile: running now
		}
		return 1, true
	}
}

// cancelPending cancels the pending job id that e holds, and reports
// false when e no longer holds it pending (a worker claimed it meanwhile).
// The entry's shard lock is held; the entry should go when it returns true.
func (s *Store[T]) cancelPending(e *keyEntry, id int64) bool {
	if !e.move(id, keyPending, keyGone) {
		return false
	}
	// The item stays where it is and is skipped when it surfaces;
	// until then it is counted out of Len and the schedule's length.
	if e.sched {
		s.sched.mu.Lock()
		s.sched.cancelled()
		if g := e.more.grp(); g != "" && s.sched.groups[g].id == id {
			delete(s.sched.groups, g)
		}
		s.sched.mu.Unlock()
	} else {
		s.tombs[e.prio].Add(1)
	}
	return true
}

// Purge implements Store. It may race Enqueue, Cancel, claims and the
// scheduler, so it accounts item by item, as a claim does: an item it
// takes out of a ring or the schedule is a job it cancels if the job is
// still pending (a compare-and-swap on its key entry), or one cancelled
// before, whose tombstone or dead count it takes back; and it cancels
// coalesced reruns. A job that moves between the schedule and a ring
// while Purge runs, or is enqueued meanwhile, may survive it; every job
// is counted once either way.
func (s *Store[T]) Purge(context.Context) (int, error) {
	n := 0
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil {
			var it item[T]
			for s.pop(r, &it, false) {
				if it.id > 0 && purged(&it) {
					n++
				} else {
					s.tombs[it.prio].Add(-1)
				}
			}
		}
	}
	s.sched.mu.Lock()
	for i := range s.sched.heap.len() {
		if purged(s.sched.heap.at(i)) {
			n++
		} else {
			s.sched.dead--
		}
	}
	s.sched.heap = tiers[T]{}
	clear(s.sched.groups)
	s.sched.counted()
	s.sched.mu.Unlock()
	s.keys.entries(func(e *keyEntry) bool {
		id, st := e.load()
		switch st {
		case keyGone:
			return true
		case keyRerun:
			// Only finish's slow path, under this lock, moves a rerun entry.
			s.takeRerun(s.keys.shardOf(e), e)
			e.st.Store(packKey(id, keyRunning))
			n++
		}
		return false
	})
	return n, nil
}

// purged ends a job whose item Purge took out of the store: true if it
// was pending (now cancelled), false if it had been cancelled already.
func purged[T any](it *item[T]) bool {
	return it.ent == nil || it.ent.move(it.id, keyPending, keyGone)
}
