package memstore

import (
	"context"
	"runtime"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Claim implements Store.
func (s *Store[T]) Claim(ctx context.Context) (queuetype.Job[T], error) {
	var job queuetype.Job[T]
	err := s.ClaimJob(ctx, &job, &WorkerClaim{}) // any stripe: only the sum counts
	return job, err
}

// ClaimJob is Claim writing into *job, counting the claim on mc's stripe and
// keeping the job's key entry in mc: the queue's workers call it
// directly, with a job they reuse, so that no Job is copied on the way.
func (s *Store[T]) ClaimJob(ctx context.Context, job *queuetype.Job[T], mc *WorkerClaim) error {
	// The item is filled in place by pop. Returned by value through
	// poll and next, it was spilled field by field at each return and
	// read back in 16-byte pieces, which store forwarding cannot serve:
	// the stalls cost a quarter of a job's time (see docs/benchmarks.md).
	var it item[T]
	for {
		if err := s.next(ctx, &it); err != nil {
			return err
		}
		if it.id < 0 {
			s.tombs[it.prio].Add(-1) // removed by ID while it was ready (admin.go)
			continue
		}
		if it.at != 0 && it.at > s.now() {
			// Taken before its time (only a clock that jumps makes this
			// happen): back to the schedule.
			s.unpromote(it)
			continue
		}
		mc.ent = nil
		if it.ent != nil {
			if !it.ent.move(it.id, keyPending, keyRunning) {
				s.tombs[it.prio].Add(-1) // cancelled while it was ready
				continue
			}
			mc.id, mc.ent = it.id, it.ent
		}
		it.attempt++
		s.running[mc.stripe].n.Add(1)
		s.fill(job, &it)
		return nil
	}
}

// next takes the next item in priority order into *it, parking when
// there is none.
func (s *Store[T]) next(ctx context.Context, it *item[T]) error {
	for {
		if err := ctx.Err(); err != nil {
			return err // retired, though maybe woken by a token
		}
		if s.poll(it) {
			return nil
		}
		if s.drained.Load() {
			// Jobs that became ready but found the ring full (coalesced
			// reruns, jobs crowded out by cancelled ones) wait in the
			// schedule, due now: the drain (Stop, not Shutdown) runs them too.
			if ctx.Err() == nil && s.promoteDrained() > 0 {
				continue
			}
			if s.publishing() {
				// An Enqueue that won a ring's tail before Drain closed it
				// has not published its item yet: it will run too.
				runtime.Gosched()
				continue
			}
			return storekit.ErrDrained
		}
		// Announce, then look again: a push either sees the sleeper and
		// leaves a token, or published its item before this second look.
		s.sleepers.Add(1)
		if s.poll(it) {
			s.sleepers.Add(-1)
			return nil
		}
		select {
		case <-s.wake:
		case <-s.drainCh:
		case <-ctx.Done():
			s.sleepers.Add(-1)
			return ctx.Err()
		}
		s.sleepers.Add(-1)
		if s.poll(it) {
			if s.Len() > 0 {
				s.wakeOne() // more where this came from: wake the next sleeper
			}
			return nil
		}
	}
}

// publishing reports whether a ring holds positions that poll could not
// take: pushes that have won the tail but not yet published their item.
func (s *Store[T]) publishing() bool {
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil && r.len() > 0 {
			return true
		}
	}
	return false
}

// poll takes the oldest item of the highest non-empty priority into *it,
// if there is one. Under weighted dispatch, when more than one ring
// exists, it first tries the level the cycle names for this claim; with
// one ring the cycle could name no other, and the claim leaves the
// cycle's shared counter alone, which every worker's claim would
// otherwise write.
func (s *Store[T]) poll(it *item[T]) bool {
	if c := s.cycle; c != nil && s.multi.Load() {
		p := c[(s.tick.Add(1)-1)%uint64(len(c))]
		if r := s.rings[p].Load(); r != nil && s.pop(r, it, true) {
			return true
		}
	}
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil && s.pop(r, it, true) {
			return true
		}
	}
	return false
}

// unpromote returns a ready item to the schedule.
func (s *Store[T]) unpromote(it item[T]) {
	e := it.ent
	if e == nil {
		s.sched.push(it, false)
		return
	}
	sh := s.keys.shardOf(e)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e.is(it.id, keyPending) {
		e.sched = true
		s.sched.push(it, false)
		return
	}
	s.tombs[it.prio].Add(-1) // cancelled while it was ready
}

// fill sets every field of *j from it. The caller holds it's key: it has
// claimed the job, or holds the key's shard lock and has seen the job
// pending.
func (s *Store[T]) fill(j *queuetype.Job[T], it *item[T]) {
	j.ID, j.Priority, j.Attempt, j.Payload = it.id, s.cfg.Priorities[it.prio].Name, int(it.attempt), it.payload
	j.RunAt = time.Time{}
	if it.at != 0 {
		j.RunAt = s.epoch.Add(time.Duration(it.at))
	}
	j.Key, j.Group, j.Target, j.MaxAttempts, j.Meta = "", "", "", 0, queuetype.Meta{}
	if it.ent != nil {
		j.Key = it.ent.key
	}
	if x := it.more; x != nil {
		j.Group, j.Target, j.MaxAttempts, j.Meta = x.group, x.target, x.maxAttempts, x.meta
	}
}

func (s *Store[T]) item(j *queuetype.Job[T]) item[T] {
	it := item[T]{id: j.ID, attempt: int32(j.Attempt), payload: j.Payload}
	if p := s.cfg.PriorityIndex(j.Priority); p > 0 {
		it.prio = uint8(p)
	}
	it.more = newMore(j.Group, j.Target, j.MaxAttempts, j.Meta) // the caller sets ent to the key's entry
	return it
}
