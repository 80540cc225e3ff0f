package memstore

import (
	"container/heap"

	"github.com/queuekit/queue/queuetype"
)

// Unique windows (Job.UniqueFor). A job accepted with a window leaves a
// mark on its key until the window ends: while the mark stands, Add
// refuses every job with that key, whatever became of the first one. A
// mark lives in its key's shard, under the shard's lock that Add already
// holds, so a keyed Add of a shard that holds no mark pays one nil check,
// and one that does pays a map lookup (and a clock reading). Cancel,
// CancelMatch and Purge leave marks alone: a window means at most one
// accepted job with its key per window, and a cancelled job was accepted.
//
// Marks expire: each shard keeps its marks in a heap by expiry, and Add
// drops the expired ones at the top of its shard's heap before it looks
// (and Stats does in every shard). So that a shard no Add visits does not
// hold expired marks for ever, an Add that sets a mark sweeps every shard
// once the store holds twice as many marks as the last sweep left (and at
// least minMarkSweep): marks held stay within twice those of the windows
// that have not ended, each Add paying O(log n) amortised.

// mark is one key's window.
type mark struct {
	until int64                     // the instant the window ends
	dup   *queuetype.DuplicateError // the refusal, made on first use and kept
}

// markExp is a mark's place in its shard's expiry heap. A key whose
// window ended and was marked again has two; the earlier one finds the
// map's mark ending later and leaves it.
type markExp struct {
	until int64
	key   string
}

// markHeap orders a shard's marks by expiry, earliest first.
type markHeap []markExp

func (h markHeap) Len() int           { return len(h) }
func (h markHeap) Less(i, j int) bool { return h[i].until < h[j].until }
func (h markHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *markHeap) Push(x any)        { *h = append(*h, x.(markExp)) }
func (h *markHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = markExp{}
	*h = old[:len(old)-1]
	return x
}

// minMarkSweep is the number of marks below which no Add sweeps every
// shard.
const minMarkSweep = 1024

// windowErr returns the refusal for key if a window on it is open at now,
// after dropping the shard's expired marks; sh.mu is held.
func (s *Store[T]) windowErr(sh *keyShard[T], key string, now int64) error {
	if !sh.hasMarks() {
		return nil
	}
	s.expireMarks(sh, now)
	m := sh.side.marks[key]
	if m == nil {
		return nil
	}
	if m.dup == nil {
		m.dup = queuetype.WindowDuplicate(key)
	}
	return m.dup
}

// setMark opens a window on key until until; sh.mu is held, and key has
// no open window.
func (s *Store[T]) setMark(sh *keyShard[T], key string, until int64) {
	if sh.side == nil {
		sh.side = new(shardSide[T])
	}
	sd := sh.side
	if sd.marks == nil {
		sd.marks = make(map[string]*mark)
	}
	if m := sd.marks[key]; m != nil {
		m.until = until // the key's expired mark, not swept yet
	} else {
		sd.marks[key] = &mark{until: until}
		s.marks.Add(1)
	}
	heap.Push(&sd.expiry, markExp{until: until, key: key})
}

// expireMarks drops sh's marks whose window ended by now; sh.mu is held
// and sh.side is not nil.
func (s *Store[T]) expireMarks(sh *keyShard[T], now int64) {
	sd := sh.side
	for len(sd.expiry) > 0 && sd.expiry[0].until <= now {
		x := heap.Pop(&sd.expiry).(markExp)
		if m := sd.marks[x.key]; m != nil && m.until <= now {
			delete(sd.marks, x.key)
			s.marks.Add(-1)
		}
	}
	if len(sd.expiry) == 0 {
		sd.marks, sd.expiry = nil, nil // give a burst's map and heap back
	}
}

// hasMarks reports whether sh holds a mark; sh.mu is held.
func (sh *keyShard[T]) hasMarks() bool { return sh.side != nil && sh.side.marks != nil }

// sweepMarks drops the expired marks of every shard, one shard's lock at
// a time, when the store holds enough marks since the last sweep. No
// shard lock may be held.
func (s *Store[T]) sweepMarks(force bool) {
	if !force && s.marks.Load() < s.markSweep.Load() {
		return
	}
	now := s.now()
	for i := range s.keys.shards {
		sh := &s.keys.shards[i]
		sh.mu.Lock()
		if sh.hasMarks() {
			s.expireMarks(sh, now)
		}
		sh.mu.Unlock()
	}
	s.markSweep.Store(max(2*s.marks.Load(), minMarkSweep))
}
