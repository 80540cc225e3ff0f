package memstore

import (
	"context"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Complete implements Store.
func (s *Store[T]) Complete(_ context.Context, job queuetype.Job[T]) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

// Dead implements Store; the in-memory store keeps no dead jobs (the
// queue's OnDead hook receives them).
func (s *Store[T]) Dead(_ context.Context, job queuetype.Job[T], _ error) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

// CancelClaimed implements ClaimCanceller; the in-memory store keeps no
// finished jobs, so it is Complete.
func (s *Store[T]) CancelClaimed(_ context.Context, job queuetype.Job[T], _ error) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

// stripe returns the running-counter stripe for a job the caller does not
// know the worker of.
func (s *Store[T]) stripe(id int64) int { return int(uint64(id) % runStripes) }

// finish is FinishJob for a job claimed on stripe, with its key entry
// ent when the caller has it (nil makes it look the key up).
func (s *Store[T]) finish(job *queuetype.Job[T], stripe int, ent *keyEntry) {
	s.FinishJob(job, &WorkerClaim{stripe: stripe, id: job.ID, ent: ent})
}

// FinishJob is Complete for a job the worker holding wc claimed with
// ClaimJob: it counts the job off wc's stripe and releases its key through
// the key entry the claim found, with no lookup unless a rerun waits.
func (s *Store[T]) FinishJob(job *queuetype.Job[T], wc *WorkerClaim) {
	s.running[wc.stripe].n.Add(-1)
	if job.Key == "" {
		return
	}
	var ent *keyEntry
	if wc.id == job.ID {
		ent = wc.ent
	}
	if ent != nil && ent.move(job.ID, keyRunning, keyGone) {
		return // no rerun waits: the key is free, and the entry is reclaimed later
	}
	var sh *keyShard[T]
	if ent != nil {
		sh = s.keys.shardOf(ent)
	} else {
		sh = s.keys.shard(s.keys.hash(job.Key))
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := ent
	if e == nil {
		if e = sh.find(job.Key, s.keys.hash(job.Key)); e == nil {
			return
		}
	}
	id, st := e.load()
	if id != job.ID {
		return
	}
	switch st {
	case keyRunning:
		e.st.Store(packKey(id, keyGone))
		sh.reclaim(e)
	case keyRerun:
		s.releaseRerun(sh, e)
	}
}

// takeRerun removes and returns e's rerun (sh.takeRerun), keeping the
// count of reruns; sh is e's shard, and its lock is held.
func (s *Store[T]) takeRerun(sh *keyShard[T], e *keyEntry) *item[T] {
	r := sh.takeRerun(e)
	if r != nil {
		s.keys.waiting.Add(-1)
	}
	return r
}

// releaseRerun makes e's rerun the key's pending job; sh is e's shard, and
// its lock is held.
func (s *Store[T]) releaseRerun(sh *keyShard[T], e *keyEntry) {
	r := *s.takeRerun(sh, e)
	e.sched, e.prio, e.more = false, r.prio, r.more
	// Pending before the push: a worker may claim r at once.
	e.st.Store(packKey(r.id, keyPending))
	if (r.at != 0 && r.at > s.now()) || s.push(&r, false) != pushed {
		// Not due yet, or no room: it waits in the schedule, never
		// dropped. A drain runs it once the ring has room: it is due, and
		// dated as of the drain's start, as what the drain runs is.
		if now := s.now(); r.at <= now {
			r.at = after(now, s.cfg.RequeueDelay)
			if s.drained.Load() {
				r.at = min(now, s.drainAt.Load())
			}
		}
		e.sched = true
		s.sched.push(r, false)
	}
}

// Retry implements Store.
func (s *Store[T]) Retry(_ context.Context, job queuetype.Job[T], at time.Time, _ error) error {
	return s.reschedule(&job, at, false, false)
}

// Defer implements Store.
func (s *Store[T]) Defer(_ context.Context, job queuetype.Job[T], at time.Time, _ error) error {
	return s.reschedule(&job, at, true, false)
}

// Hold implements queue.HoldStore: Defer, with the job marked held for
// its target (ReleaseHeld).
func (s *Store[T]) Hold(_ context.Context, job queuetype.Job[T], at time.Time) error {
	return s.reschedule(&job, at, true, true)
}

// reschedule puts a claimed job back in the schedule; undo gives its
// attempt back, and held marks it held for its target (a job without a
// target has nothing to be held for).
func (s *Store[T]) reschedule(job *queuetype.Job[T], at time.Time, undo, held bool) error {
	s.running[s.stripe(job.ID)].n.Add(-1)
	it := s.item(job)
	if undo {
		it.attempt--
	}
	if held && it.more != nil {
		it.more.held = true // a jobMore of its own, made by item
	}
	it.at = max(s.instant(at), 1)
	if job.Key == "" {
		s.sched.push(it, false)
		return nil
	}
	h := s.keys.hash(job.Key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(job.Key, h)
	if e == nil {
		return nil
	}
	id, st := e.load()
	if id != job.ID || (st != keyRunning && st != keyRerun) {
		return nil // not this job's entry any more
	}
	if st == keyRerun {
		s.releaseRerun(sh, e)
		return storekit.ErrSuperseded
	}
	// Nothing else moves a running entry while the shard is locked: the
	// job's own finish is this call.
	it.ent, e.sched, e.more, e.prio = e, true, it.more, it.prio
	e.st.Store(packKey(id, keyPending))
	s.sched.push(it, false)
	return nil
}
