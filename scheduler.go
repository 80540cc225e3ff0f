package queue

import (
	"context"
	"sync"
	"time"
)

// schedule is the in-memory store's time-ordered set of future jobs: a
// 4-ary min-heap of items ordered by due instant, then ID (FIFO for equal
// instants). Instants are nanoseconds since the store's epoch, taken from
// monotonic clock readings, so equal instants compare equal and wall-clock
// jumps do not reorder jobs. One goroutine sleeps until the earliest due
// instant; no job has a timer of its own.
type schedule[T any] struct {
	mu     sync.Mutex
	heap   []item[T]
	groups map[string]int64 // group -> ID of its scheduled job
	dead   int              // cancelled items still in heap
	wake   chan struct{}    // a new earliest item, or drain
}

func newSchedule[T any]() *schedule[T] {
	return &schedule[T]{groups: make(map[string]int64), wake: make(chan struct{}, 1)}
}

func (s *schedule[T]) less(i, j int) bool {
	a, b := &s.heap[i], &s.heap[j]
	return a.at < b.at || (a.at == b.at && a.id < b.id)
}

// pushLocked adds it; s.mu must be held.
func (s *schedule[T]) pushLocked(it item[T]) {
	s.heap = append(s.heap, it)
	i := len(s.heap) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !s.less(i, p) {
			break
		}
		s.heap[i], s.heap[p] = s.heap[p], s.heap[i]
		i = p
	}
	if i == 0 {
		s.poke()
	}
}

// push adds it, reserving its group when reserveGroup; it reports false
// when the group already has a scheduled job.
func (s *schedule[T]) push(it item[T], reserveGroup bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reserveGroup && it.meta != nil && it.meta.group != "" {
		if _, taken := s.groups[it.meta.group]; taken {
			return false
		}
		s.groups[it.meta.group] = it.id
	}
	s.pushLocked(it)
	return true
}

// popLocked removes and returns the earliest item; s.mu must be held and
// the heap non-empty.
func (s *schedule[T]) popLocked() item[T] {
	h := s.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	var zero item[T]
	h[n] = zero // drop references for the GC
	s.heap = h[:n]
	i := 0
	for {
		min := i
		for c := 4*i + 1; c <= 4*i+4 && c < n; c++ {
			if s.less(c, min) {
				min = c
			}
		}
		if min == i {
			break
		}
		s.heap[i], s.heap[min] = s.heap[min], s.heap[i]
		i = min
	}
	return top
}

// popDue removes up to max items due at now into buf, freeing their
// groups, and returns buf and the instant of the next item (0 if none).
func (s *schedule[T]) popDue(now int64, buf []item[T], max int) ([]item[T], int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.heap) > 0 && s.heap[0].at <= now && len(buf) < max {
		it := s.popLocked()
		if it.meta != nil && it.meta.group != "" && s.groups[it.meta.group] == it.id {
			delete(s.groups, it.meta.group)
		}
		buf = append(buf, it)
	}
	if len(s.heap) == 0 {
		return buf, 0
	}
	return buf, s.heap[0].at
}

// freeGroup releases group if job id holds it.
func (s *schedule[T]) freeGroup(group string, id int64) {
	if group == "" {
		return
	}
	s.mu.Lock()
	if s.groups[group] == id {
		delete(s.groups, group)
	}
	s.mu.Unlock()
}

func (s *schedule[T]) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// len returns the number of live scheduled items.
func (s *schedule[T]) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.heap) - s.dead
}

// earliest returns up to n items in due order without removing them. It
// walks the heap best-first, so it costs O(n²) at worst, never O(len).
func (s *schedule[T]) earliest(n int) []item[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []item[T]
	frontier := []int{}
	if len(s.heap) > 0 {
		frontier = append(frontier, 0)
	}
	for len(frontier) > 0 && len(out) < n {
		best := 0
		for i := range frontier {
			if s.less(frontier[i], frontier[best]) {
				best = i
			}
		}
		idx := frontier[best]
		frontier[best] = frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		out = append(out, s.heap[idx])
		for c := 4*idx + 1; c <= 4*idx+4 && c < len(s.heap); c++ {
			frontier = append(frontier, c)
		}
	}
	return out
}

// run promotes due items with promote until ctx ends, sleeping until the
// earliest due instant or a wake-up. promote returns the next due instant
// (0 if none).
func (s *schedule[T]) run(ctx context.Context, clk Clock, now func() int64, promote func() int64) {
	timer := clk.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := promote()
		if next > 0 {
			d := time.Duration(next - now())
			if d < 0 {
				d = 0
			}
			timer.Reset(d)
		} else {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-timer.C():
		}
	}
}
