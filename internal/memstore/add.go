package memstore

import (
	"context"
	"fmt"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Add implements Store. A ctx already done refuses the job with an error
// matching ctx.Err(), as every store does.
func (s *Store[T]) Add(ctx context.Context, job queuetype.Job[T]) (storekit.Added, error) {
	if err := ctx.Err(); err != nil {
		return storekit.Added{}, fmt.Errorf("memstore: add: %w", err)
	}
	return s.AddJob(&job, false, 0)
}

// AddJob is Add without copying the job: the queue's hot path calls it
// directly. future says job.RunAt was just computed as now plus a
// positive delay: the job is scheduled without reading the clock again.
// parked is how many jobs the queue holds parked for a target's slot,
// which count against MaxPending.
func (s *Store[T]) AddJob(job *queuetype.Job[T], future bool, parked int) (storekit.Added, error) {
	return s.addJob(job, future, parked, 0)
}

// addJob is AddJob giving the job the ID id, or the next of the store's
// own IDs when id is 0 (see Put).
func (s *Store[T]) addJob(job *queuetype.Job[T], future bool, parked int, id int64) (storekit.Added, error) {
	p := s.cfg.PriorityIndex(job.Priority)
	if p < 0 {
		return storekit.Added{}, s.cfg.UnknownPriority(job.Priority)
	}
	if s.atLimit(parked) {
		return storekit.Added{}, queuetype.ErrPendingLimit
	}
	it := item[T]{prio: uint8(p), payload: job.Payload, more: newMore(job.Group, job.Target, job.MaxAttempts, job.Meta)}
	scheduled := false
	if !job.RunAt.IsZero() {
		// A due job keeps its instant too: the job's RunAt reports when it
		// became due, which the wait-time metric measures from.
		it.at = max(s.instant(job.RunAt), 1)
		scheduled = future || it.at > s.now()
	}
	if it.id = id; id == 0 {
		it.id = s.ids.Add(1)
	}
	if job.Key == "" {
		return s.place(&it, scheduled)
	}
	if job.UniqueFor > 0 {
		s.sweepMarks(false)
	}
	h := s.keys.hash(job.Key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	var now int64
	if job.UniqueFor > 0 || sh.hasMarks() {
		// A window, open or to be opened, outranks the key's other rules:
		// even a running key's rerun is refused while it is open.
		now = s.now()
		if err := s.windowErr(sh, job.Key, now); err != nil {
			return storekit.Added{}, err
		}
	}
	e := sh.find(job.Key, h)
	if e != nil && !e.gone() {
		id, st := e.load()
		if st != keyRunning || !s.cfg.Coalesce {
			return storekit.Added{}, e.dupErr() // pending, or a rerun already waits
		}
		rerun := it // a copy, so that it itself does not escape on the fast path
		rerun.ent = e
		sh.setRerun(e, &rerun)
		s.keys.waiting.Add(1)
		if e.move(id, keyRunning, keyRerun) {
			if job.UniqueFor > 0 {
				s.setMark(sh, job.Key, after(now, job.UniqueFor))
			}
			return storekit.Added{ID: it.id, Coalesced: true}, nil
		}
		// The running job ended meanwhile: the key is free, and its gone
		// entry is this job's.
		s.takeRerun(sh, e)
	}
	// The entry is the job's before the job goes into a ring, where a
	// worker may claim it at once; after that, add writes the entry only
	// if place did not do as asked, so as not to pull its cache line back
	// from the worker.
	if e == nil {
		e = sh.add(job.Key, h, packKey(it.id, keyPending))
	} else {
		e.st.Store(packKey(it.id, keyPending)) // the key's own gone entry
	}
	e.more, e.prio, e.sched = it.more, it.prio, scheduled
	it.ent = e
	added, err := s.place(&it, scheduled)
	if err != nil {
		e.st.Store(packKey(it.id, keyGone))
		sh.reclaim(e)
		return added, err
	}
	if added.Scheduled != scheduled {
		e.sched = true // crowded out of its ring: waits in the schedule
	}
	if job.UniqueFor > 0 {
		s.setMark(sh, job.Key, after(now, job.UniqueFor))
	}
	return added, nil
}

// atLimit reports whether the store, with parked jobs more, holds
// MaxPending jobs. It reads counters kept without locks: the schedule's
// live count and the reruns' count; while those leave room for a full
// ready queue it does not count the ready jobs at all, so that the ready
// path pays two loads for the bound.
func (s *Store[T]) atLimit(parked int) bool {
	limit := s.cfg.MaxPending
	if limit <= 0 {
		return false
	}
	held := int(s.sched.live.Load()+s.keys.waiting.Load()) + parked
	if held < limit-s.cfg.Capacity {
		return false
	}
	return held+s.Len() >= limit
}

// place puts it into the schedule or its ready queue. The key's shard
// lock, if any, is held by the caller, so a concurrent Cancel cannot slip
// between the two steps.
func (s *Store[T]) place(it *item[T], scheduled bool) (storekit.Added, error) {
	if scheduled {
		if dup := s.sched.push(*it, true); dup != nil {
			return storekit.Added{}, dup
		}
		return storekit.Added{ID: it.id, Scheduled: true}, nil
	}
	if res := s.push(it, true); res != pushed {
		if res == pushClosed {
			return storekit.Added{}, queuetype.ErrClosed
		}
		if r := s.ring(it.prio); uint64(r.len()) < r.limit || s.Len() >= s.cfg.Capacity {
			return storekit.Added{}, queuetype.ErrQueueFull
		}
		// Below capacity, but the ring's slots are all taken, so by
		// cancelled items that no worker has skipped yet (every worker is
		// busy): the job waits in the schedule, due now, for room.
		it.at = max(it.at, s.now(), 1)
		s.sched.push(*it, false)
		return storekit.Added{ID: it.id, Scheduled: true}, nil
	}
	return storekit.Added{ID: it.id}, nil
}

// push offers it to its ready queue without blocking, and wakes an idle
// worker if there is one. fresh says it is a new job, which a drained
// store refuses.
func (s *Store[T]) push(it *item[T], fresh bool) pushResult {
	r := s.ring(it.prio)
	// The capacity counts live items in every ring: this ring may hold
	// what the others and the cancelled items leave.
	room := s.cfg.Capacity + s.tombstones()
	if s.multi.Load() {
		for i := range s.rings {
			if o := s.rings[i].Load(); o != nil && o != r {
				room -= o.len()
			}
		}
	}
	if room <= 0 {
		room = 0 // still tell a closed ring from a full one
	}
	// A new job without a key comes from Add holding no lock: only its
	// push may yield. A keyed one holds its key's shard lock, and reruns
	// and promotions may hold the schedule's or a shard's.
	res := r.push(it, uint64(room), fresh, fresh && it.ent == nil)
	if res == pushed {
		s.wakeOne()
	}
	return res
}

// wakeOne leaves a token for a parked worker, if one is parked. At most
// one token waits at a time; a worker that wakes to find more work passes
// the token on (next), so a burst wakes workers one by one, and parked
// workers are not woken for nothing.
func (s *Store[T]) wakeOne() {
	if s.sleepers.Load() > 0 {
		select {
		case s.wake <- struct{}{}:
		default: // a token is already waiting
		}
	}
}

func (s *Store[T]) tombstones() int {
	n := int64(0)
	for i := range s.tombs {
		n += s.tombs[i].Load()
	}
	return int(n)
}

// Len implements Store: ready jobs, not counting cancelled ones still in line.
func (s *Store[T]) Len() int {
	n := 0
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil {
			n += r.len()
		}
	}
	// A claimer takes an item out of its ring before it drops the item's
	// tombstone; never report less than nothing meanwhile.
	return max(n-s.tombstones(), 0)
}
