package memstore

import (
	"context"
	"math"

	"github.com/queuekit/queue/queuetype"
)

// PromoteDue implements Store.
func (s *Store[T]) PromoteDue(context.Context) (int, error) {
	s.mu.Lock()
	n := s.promoteN()
	evs := s.takeEvents()
	s.mu.Unlock()
	s.reportAll(evs)
	return n, nil
}

// promote is the scheduler goroutine's step: it returns the next due instant.
func (s *Store[T]) promote() int64 {
	s.mu.Lock()
	s.promoteN()
	evs := s.takeEvents()
	next := int64(0)
	if !s.drained.Load() {
		s.sched.mu.Lock()
		if s.sched.heap.len() > 0 {
			next = max(s.sched.heap.at(0).at, 1)
		}
		s.sched.mu.Unlock()
	}
	s.mu.Unlock()
	s.reportAll(evs)
	return next
}

// takeEvents hands over the events gathered under s.mu, to be reported
// once it is released (storekit.Config.Report must not run under store locks).
func (s *Store[T]) takeEvents() []queuetype.Event {
	evs := s.events
	s.events = nil
	return evs
}

func (s *Store[T]) reportAll(evs []queuetype.Event) {
	for _, ev := range evs {
		s.cfg.Report(ev)
	}
}

// promoteDrained is the drain's promotion: workers run it once the ready
// queues are empty, as the scheduler no longer does. It promotes only
// what was due when the drain began (and coalesced reruns released
// since, dated then): a retry or a scheduled job that comes due while
// the drain runs is kept, as scheduled jobs are, or handlers that keep
// asking to run again would keep the drain going for ever.
func (s *Store[T]) promoteDrained() int {
	s.mu.Lock()
	n := s.promoteDue(s.drainAt.Load())
	evs := s.takeEvents()
	s.mu.Unlock()
	s.reportAll(evs)
	return n
}

// promoteN moves due items to the ready queues in bounded batches, unless
// the store is drained; s.mu is held.
func (s *Store[T]) promoteN() int {
	if s.drained.Load() {
		return 0
	}
	return s.promoteDue(math.MaxInt64)
}

// promoteDue moves items due by now, and by upTo, to the ready queues in
// bounded batches; s.mu is held.
func (s *Store[T]) promoteDue(upTo int64) int {
	moved := 0
	for {
		now := min(s.now(), upTo)
		var next int64
		s.batch, next = s.sched.popDue(now, s.batch[:0], 1024)
		for _, it := range s.batch {
			if s.promoteOne(it, now) {
				moved++
			}
		}
		if len(s.batch) < 1024 || next > now {
			clear(s.batch)
			return moved
		}
	}
}

// promoteOne moves one due item to its ready queue, or back into the
// schedule RequeueDelay later when the queue is full (and reports the
// requeue); it reports whether it moved the item. For a keyed item it
// holds the key's shard lock, so that Cancel sees where the item is; s.mu
// is held.
func (s *Store[T]) promoteOne(it item[T], now int64) bool {
	e := it.ent
	if e == nil {
		if s.push(&it, false) == pushed {
			return true
		}
		s.requeue(it, now, "")
		return false
	}
	sh := s.keys.shardOf(e)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !e.is(it.id, keyPending) {
		s.sched.mu.Lock()
		s.sched.dead--
		s.sched.counted()
		s.sched.mu.Unlock()
		return false
	}
	if s.push(&it, false) == pushed {
		e.sched = false
		return true
	}
	s.requeue(it, now, e.key)
	return false
}

// requeue puts a due item that found its ready queue full back into the
// schedule, RequeueDelay later, and records the event; s.mu and the
// item's key's shard lock, if it has a key, are held.
func (s *Store[T]) requeue(it item[T], now int64, key string) {
	it.at = after(now, s.cfg.RequeueDelay)
	s.sched.push(it, false)
	s.events = append(s.events, queuetype.Event{Kind: queuetype.EventRequeued, JobID: it.id, Key: key, Target: it.more.tgt(),
		Priority: s.cfg.Priorities[it.prio].Name, Attempt: int(it.attempt), Delay: s.cfg.RequeueDelay})
}
