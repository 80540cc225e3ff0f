package memstore

import (
	"context"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Stats implements Store.
func (s *Store[T]) Stats(context.Context) (storekit.Stats, error) {
	if s.marks.Load() > 0 {
		s.sweepMarks(true) // a scrape drops expired windows no Add has visited
	}
	keys, reruns := s.keys.counts() // reruns: exact, under the shards' locks
	st := storekit.Stats{
		Ready:           s.Len(),
		ReadyByPriority: make(map[string]int, len(s.rings)),
		Scheduled:       s.sched.len(),
		Waiting:         reruns,
		Running:         s.runningCount(),
		PendingKeys:     keys,
		Backend:         "memory",
		Leader:          true,
		Healthy:         true,
	}
	for i := range s.rings {
		n := 0
		if r := s.rings[i].Load(); r != nil {
			n = max(r.len()-int(s.tombs[i].Load()), 0)
		}
		st.ReadyByPriority[s.cfg.Priorities[i].Name] = n
	}
	return st, nil
}

func (s *Store[T]) runningCount() int {
	n := int64(0)
	for i := range s.running {
		n += s.running[i].n.Load()
	}
	return int(n)
}

// Scheduled implements Store.
func (s *Store[T]) Scheduled(_ context.Context, n int) ([]queuetype.ScheduledJob, error) {
	// earliest leaves out the items it sees cancelled; one cancelled
	// after it looked is filtered below, under its key's lock (which the
	// schedule's lock may not be held with), so ask for a few extra.
	items := s.sched.earliest(n + 8)
	out := make([]queuetype.ScheduledJob, 0, n)
	for i := range items {
		if len(out) == n {
			break
		}
		var j queuetype.Job[T]
		if !s.fillPending(&j, &items[i]) {
			continue // cancelled
		}
		out = append(out, queuetype.ScheduledJob{ID: j.ID, Key: j.Key, Group: j.Group, Target: j.Target,
			Priority: j.Priority, RunAt: j.RunAt, Attempt: j.Attempt})
	}
	return out, nil
}

// fillPending fills *j from it unless it is a keyed item whose job no
// longer holds its key; it reports whether it did.
func (s *Store[T]) fillPending(j *queuetype.Job[T], it *item[T]) bool {
	if e := it.ent; e != nil {
		sh := s.keys.shardOf(e)
		sh.mu.Lock()
		defer sh.mu.Unlock()
		if !e.is(it.id, keyPending) {
			return false
		}
	}
	s.fill(j, it)
	return true
}
