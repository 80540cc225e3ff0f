package memstore

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// slotTable is the store's concurrency slots (queue.SlotStore): per
// target, each holder's lease expiry by the store's clock. A queue on the
// in-memory store does not use it (its process is the fleet, and its own
// count is exact); it is the contract's reference, which storetest checks.
type slotTable struct {
	mu    sync.Mutex
	slots map[string]map[string]time.Time // target -> holder -> expiry
	watch func(target string)
}

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

// AcquireSlot implements queue.SlotStore.
func (s *Store[T]) AcquireSlot(_ context.Context, target, holder string, limit int, ttl time.Duration) (bool, error) {
	if err := slotArgs(target, holder, limit, ttl); err != nil {
		return false, err
	}
	now := s.cfg.Clock.Now()
	st := &s.slotTab
	st.mu.Lock()
	defer st.mu.Unlock()
	held := st.slots[target]
	for h, exp := range held {
		if !now.Before(exp) {
			delete(held, h)
		}
	}
	if _, ok := held[holder]; !ok && len(held) >= limit {
		return false, nil
	}
	if held == nil {
		if st.slots == nil {
			st.slots = map[string]map[string]time.Time{}
		}
		held = map[string]time.Time{}
		st.slots[target] = held
	}
	held[holder] = now.Add(ttl)
	return true, nil
}

// RenewSlots implements queue.SlotStore.
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

// ReleaseSlot implements queue.SlotStore.
func (s *Store[T]) ReleaseSlot(_ context.Context, target, holder string) error {
	st := &s.slotTab
	st.mu.Lock()
	_, ok := st.slots[target][holder]
	if ok {
		delete(st.slots[target], holder)
		if len(st.slots[target]) == 0 {
			delete(st.slots, target)
		}
	}
	fn := st.watch
	st.mu.Unlock()
	if ok && fn != nil {
		fn(target)
	}
	return nil
}

// WatchSlots implements queue.SlotStore: ReleaseSlot calls fn.
func (s *Store[T]) WatchSlots(fn func(target string)) {
	s.slotTab.mu.Lock()
	s.slotTab.watch = fn
	s.slotTab.mu.Unlock()
}
