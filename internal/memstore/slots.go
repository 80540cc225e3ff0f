package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/queuekit/queue/storekit"
)

// slotTable is the store's concurrency slots (storekit.SlotStore): per
// target, each holder's lease expiry by the store's clock, and the line
// of the processes waiting for one. A queue on the in-memory store does
// not use it (its process is the fleet, and its own count is exact); it
// is the contract's reference, which storetest checks.
type slotTable struct {
	mu    sync.Mutex
	slots map[string]map[string]time.Time // target -> holder -> expiry
	line  map[string]map[string]place     // target -> process -> its place
	watch func(target, waiter string)
}

// place is a process's place in a target's line: since orders the line,
// and the place is given up at expiry.
type place struct{ since, expiry time.Time }

func slotArgs(target, holder string, limit int, ttl time.Duration) error {
	switch {
	case target == "":
		return fmt.Errorf("memstore: slot: empty target")
	case holder == "":
		return fmt.Errorf("memstore: slot of %q: empty holder", target)
	case limit < 1:
		return fmt.Errorf("memstore: slot of %q: limit %d: must be >= 1", target, limit)
	case ttl <= 0:
		return fmt.Errorf("memstore: slot of %q: ttl %s: must be > 0", target, ttl)
	}
	return nil
}

// lineArgs checks the line's part of a request.
func lineArgs(req storekit.SlotRequest) error {
	switch {
	case req.Process == "":
		return fmt.Errorf("memstore: slot of %q: empty process", req.Target)
	case req.Waited < 0:
		return fmt.Errorf("memstore: slot of %q: waited %s: must be >= 0", req.Target, req.Waited)
	case req.Line <= 0:
		return fmt.Errorf("memstore: slot of %q: line %s: must be > 0", req.Target, req.Line)
	}
	return nil
}

// AcquireSlot implements storekit.SlotStore.
func (s *Store[T]) AcquireSlot(_ context.Context, req storekit.SlotRequest) (storekit.SlotAnswer, error) {
	if err := slotArgs(req.Target, req.Holder, req.Limit, req.TTL); err != nil {
		return storekit.SlotAnswer{}, err
	}
	if err := lineArgs(req); err != nil {
		return storekit.SlotAnswer{}, err
	}
	now := s.cfg.Clock.Now()
	st := &s.slotTab
	st.mu.Lock()
	held := st.slots[req.Target]
	for h, exp := range held {
		if !now.Before(exp) {
			delete(held, h)
		}
	}
	line := st.line[req.Target]
	since := now.Add(-req.Waited)
	ahead := 0
	for p, pl := range line {
		switch {
		case !now.Before(pl.expiry):
			delete(line, p)
		case p != req.Process && pl.since.Before(since):
			ahead++
		}
	}
	_, holds := held[req.Holder]
	if holds || len(held)+ahead < req.Limit {
		if held == nil {
			if st.slots == nil {
				st.slots = map[string]map[string]time.Time{}
			}
			held = map[string]time.Time{}
			st.slots[req.Target] = held
		}
		held[req.Holder] = now.Add(req.TTL)
		delete(line, req.Process)
		ans := storekit.SlotAnswer{Granted: true, Waiting: len(line)}
		st.tidyLine(req.Target)
		st.mu.Unlock()
		return ans, nil
	}
	if line == nil {
		if st.line == nil {
			st.line = map[string]map[string]place{}
		}
		line = map[string]place{}
		st.line[req.Target] = line
	}
	line[req.Process] = place{since: since, expiry: now.Add(req.Line)}
	ans := storekit.SlotAnswer{Waiting: len(line) - 1}
	fn := st.watch
	st.mu.Unlock()
	if fn != nil {
		fn(req.Target, req.Process)
	}
	return ans, nil
}

// tidyLine drops target's line when it is empty; st.mu is held.
func (st *slotTable) tidyLine(target string) {
	if l, ok := st.line[target]; ok && len(l) == 0 {
		delete(st.line, target)
	}
}

// waiting counts the processes other than process in target's line;
// st.mu is held.
func (st *slotTable) waiting(target, process string, now time.Time) int {
	n := 0
	for p, pl := range st.line[target] {
		if p != process && now.Before(pl.expiry) {
			n++
		}
	}
	return n
}

// RenewSlots implements storekit.SlotStore.
func (s *Store[T]) RenewSlots(_ context.Context, target string, holders []string, ttl time.Duration) ([]string, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("memstore: RenewSlots of %q: ttl %s: must be > 0", target, ttl)
	}
	now := s.cfg.Clock.Now()
	st := &s.slotTab
	st.mu.Lock()
	defer st.mu.Unlock()
	held := st.slots[target]
	var lost []string
	for _, h := range holders {
		// An expired lease no one has taken since is still the
		// holder's: an entry is deleted when a slot goes to another.
		if _, ok := held[h]; ok {
			held[h] = now.Add(ttl)
		} else {
			lost = append(lost, h)
		}
	}
	return lost, nil
}

// ReleaseSlot implements storekit.SlotStore.
func (s *Store[T]) ReleaseSlot(_ context.Context, target, holder, process string) (int, error) {
	now := s.cfg.Clock.Now()
	st := &s.slotTab
	st.mu.Lock()
	_, ok := st.slots[target][holder]
	if ok {
		delete(st.slots[target], holder)
		if len(st.slots[target]) == 0 {
			delete(st.slots, target)
		}
	}
	waiting := st.waiting(target, process, now)
	fn := st.watch
	st.mu.Unlock()
	if ok && fn != nil {
		fn(target, "")
	}
	return waiting, nil
}

// LeaveSlotLine implements storekit.SlotStore.
func (s *Store[T]) LeaveSlotLine(_ context.Context, target, process string) error {
	st := &s.slotTab
	st.mu.Lock()
	delete(st.line[target], process)
	st.tidyLine(target)
	st.mu.Unlock()
	return nil
}

// WatchSlots implements storekit.SlotStore: AcquireSlot and ReleaseSlot call
// fn.
func (s *Store[T]) WatchSlots(fn func(target, waiter string)) {
	s.slotTab.mu.Lock()
	s.slotTab.watch = fn
	s.slotTab.mu.Unlock()
}
