package memstore

import (
	"container/heap"
	"context"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/queuetype"
)

// schedule is the in-memory store's time-ordered set of future jobs: a
// 4-ary min-heap of items ordered by due instant, then ID (FIFO for equal
// instants). Instants are nanoseconds since the store's epoch, taken from
// monotonic clock readings, so equal instants compare equal and wall-clock
// jumps do not reorder jobs. One goroutine sleeps until the earliest due
// instant; no job has a timer of its own.
type schedule[T any] struct {
	mu     sync.Mutex
	heap   tiers[T]
	groups map[string]groupHold // group -> its scheduled job
	dead   int                  // cancelled items still in heap
	wake   chan struct{}        // a new earliest item, or drain
	live   atomic.Int64         // heap.len() - dead, for readers without mu (the pending bound)
}

// counted updates live after a change to the heap or dead; s.mu is held.
func (s *schedule[T]) counted() { s.live.Store(int64(s.heap.len() - s.dead)) }

// groupHold is a group's scheduled job, and the error for the jobs of
// the group refused meanwhile, made at the first of them and kept, so
// that refusing the others allocates nothing.
type groupHold struct {
	id  int64
	dup *queuetype.DuplicateError
}

func newSchedule[T any]() *schedule[T] {
	return &schedule[T]{groups: make(map[string]groupHold), wake: make(chan struct{}, 1)}
}

// tiers is the heap's array: a list of blocks, each twice the size of
// the one before, so that growing allocates one new block and never
// copies the items already held (with a million scheduled jobs, append's
// copies were a third of the cost of scheduling one), and the first
// blocks stay small for a small schedule.
type tiers[T any] struct {
	blocks [][]item[T] // block k holds items tierBase<<k ... tierBase<<(k+1) - 1, offset by tierBase
	n      int
}

// tierBits sizes the first block: 1 << tierBits items.
const tierBits = 4

// at returns item i, which must be < n.
func (t *tiers[T]) at(i int) *item[T] {
	x := uint(i) + 1<<tierBits
	k := bits.Len(x) - 1 - tierBits
	return &t.blocks[k][x-(1<<(k+tierBits))]
}

func (t *tiers[T]) len() int { return t.n }

func (t *tiers[T]) push(it item[T]) {
	if x := uint(t.n) + 1<<tierBits; x&(x-1) == 0 && bits.Len(x)-1-tierBits == len(t.blocks) {
		t.blocks = append(t.blocks, make([]item[T], x)) // block k has 1<<(k+tierBits) items
	}
	t.n++
	*t.at(t.n - 1) = it
}

// pop removes and returns the last item. A block is freed once the block
// below it is empty too, so that a schedule hovering at a block's edge
// does not allocate it again and again.
func (t *tiers[T]) pop() item[T] {
	t.n--
	p := t.at(t.n)
	it := *p
	*p = item[T]{} // drop references for the GC
	if k := len(t.blocks) - 1; k > 0 && uint(t.n)+1<<tierBits <= 1<<(k-1+tierBits) {
		t.blocks[k] = nil
		t.blocks = t.blocks[:k]
	}
	return it
}

// truncate keeps the first n items, dropping the references of the rest
// for the GC and freeing the blocks that no longer hold any.
func (t *tiers[T]) truncate(n int) {
	for i := n; i < t.n; i++ {
		*t.at(i) = item[T]{}
	}
	t.n = n
	for k := len(t.blocks) - 1; k > 0 && uint(n)+1<<tierBits <= 1<<(k+tierBits); k-- {
		t.blocks[k] = nil
		t.blocks = t.blocks[:k]
	}
}

func (s *schedule[T]) less(i, j int) bool {
	a, b := s.heap.at(i), s.heap.at(j)
	return a.at < b.at || (a.at == b.at && a.id < b.id)
}

func (s *schedule[T]) swap(i, j int) {
	a, b := s.heap.at(i), s.heap.at(j)
	*a, *b = *b, *a
}

// pushLocked adds it; s.mu must be held.
func (s *schedule[T]) pushLocked(it item[T]) {
	s.heap.push(it)
	i := s.heap.len() - 1
	for i > 0 {
		p := (i - 1) / 4
		if !s.less(i, p) {
			break
		}
		s.swap(i, p)
		i = p
	}
	if i == 0 {
		s.poke()
	}
	s.counted()
}

// push adds it, reserving its group when reserveGroup; it returns a
// *DuplicateError naming the group, and adds nothing, when the group
// already has a scheduled job.
func (s *schedule[T]) push(it item[T], reserveGroup bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := it.more.grp(); reserveGroup && g != "" {
		if h, taken := s.groups[g]; taken {
			if h.dup == nil || h.dup.Group != g || h.dup.Key != "" {
				h.dup = &queuetype.DuplicateError{Group: g}
				s.groups[g] = h
			}
			return h.dup
		}
		s.groups[g] = groupHold{id: it.id}
	}
	s.pushLocked(it)
	return nil
}

// popLocked removes and returns the earliest item; s.mu must be held and
// the heap non-empty.
func (s *schedule[T]) popLocked() item[T] {
	top := *s.heap.at(0)
	last := s.heap.pop()
	n := s.heap.len()
	if n == 0 {
		return top
	}
	*s.heap.at(0) = last
	s.down(0)
	return top
}

// popDue removes up to max items due at now into buf, freeing their
// groups, and returns buf and the instant of the next item (0 if none).
func (s *schedule[T]) popDue(now int64, buf []item[T], max int) ([]item[T], int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.heap.len() > 0 && s.heap.at(0).at <= now && len(buf) < max {
		it := s.popLocked()
		if g := it.more.grp(); g != "" && s.groups[g].id == it.id {
			delete(s.groups, g)
		}
		buf = append(buf, it)
	}
	s.counted()
	if s.heap.len() == 0 {
		return buf, 0
	}
	return buf, s.heap.at(0).at
}

func (s *schedule[T]) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// compactMin is the fewest cancelled items that make a compaction; a
// variable so that a test can make compactions frequent.
var compactMin = 1024

// cancelled counts one more cancelled item in the heap; s.mu is held. A
// cancelled item stays in the heap, skipped when it comes due, so that a
// cancel costs no heap surgery; but one cancelled an hour before its time
// held its payload for that hour, and a schedule of jobs cancelled as
// fast as they were added (a forwarder's re-announces, dropped as peers
// leave) grew without bound. Once cancelled items are most of the heap
// (and at least compactMin), they are swept out at once: each sweep costs
// the heap's length and removes at least half of it, so a cancel costs
// O(1) amortised.
func (s *schedule[T]) cancelled() {
	s.dead++
	if s.dead >= compactMin && 2*s.dead > s.heap.len() {
		s.compactLocked()
	}
	s.counted()
}

// compactLocked removes the cancelled items from the heap and restores
// its order; s.mu is held. An item is cancelled when its key's entry is no
// longer its job's pending entry: a scheduled item always has its job's
// pending entry until the job is cancelled, and never again after that
// (job IDs are not reused). It reads the entries without their shards'
// locks (the lock order forbids them here): a cancel that has moved an
// entry to gone but not yet counted it finds its item already removed,
// and dead is briefly below the truth by that one item, never above.
func (s *schedule[T]) compactLocked() {
	n := s.heap.len()
	k := 0
	for i := range n {
		it := s.heap.at(i)
		if it.ent != nil && !it.ent.is(it.id, keyPending) {
			continue
		}
		if k != i {
			*s.heap.at(k) = *it
		}
		k++
	}
	s.dead -= n - k
	s.heap.truncate(k)
	for i := (k - 2) / 4; i >= 0; i-- { // heapify: sift every parent down
		s.down(i)
	}
}

// down moves item i down to its place below; s.mu is held.
func (s *schedule[T]) down(i int) {
	n := s.heap.len()
	for {
		min := i
		for c := 4*i + 1; c <= 4*i+4 && c < n; c++ {
			if s.less(c, min) {
				min = c
			}
		}
		if min == i {
			return
		}
		s.swap(i, min)
		i = min
	}
}

// len returns the number of live scheduled items.
func (s *schedule[T]) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.heap.len()-s.dead, 0)
}

// earliest returns up to n items in due order without removing them,
// leaving out cancelled ones (see compactLocked); it looks at no more than
// n+maxSkip items, so that a heap crowded with cancelled items does not
// make it long. It walks the heap best-first with a frontier kept as a
// heap of its own: O(k log k) for the k items it looks at, never O(len).
// (A frontier scanned for its minimum at every step cost O(k²): asked
// for 10 jobs plus room for 1024 cancelled ones, every Stats call held
// the schedule's lock for milliseconds.)
func (s *schedule[T]) earliest(n int) []item[T] {
	const maxSkip = 1024
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []item[T]
	if s.heap.len() == 0 || n <= 0 {
		return out
	}
	f := frontier[T]{s: s, idx: []int{0}}
	for looked := 0; len(f.idx) > 0 && len(out) < n && looked < n+maxSkip; looked++ {
		i := heap.Pop(&f).(int)
		if it := s.heap.at(i); it.ent == nil || it.ent.is(it.id, keyPending) {
			out = append(out, *it)
		}
		for c := 4*i + 1; c <= 4*i+4 && c < s.heap.len(); c++ {
			heap.Push(&f, c)
		}
	}
	return out
}

// frontier is earliest's heap of schedule indices, ordered as the
// schedule orders its items.
type frontier[T any] struct {
	s   *schedule[T]
	idx []int
}

func (f *frontier[T]) Len() int           { return len(f.idx) }
func (f *frontier[T]) Less(i, j int) bool { return f.s.less(f.idx[i], f.idx[j]) }
func (f *frontier[T]) Swap(i, j int)      { f.idx[i], f.idx[j] = f.idx[j], f.idx[i] }
func (f *frontier[T]) Push(x any)         { f.idx = append(f.idx, x.(int)) }
func (f *frontier[T]) Pop() any {
	x := f.idx[len(f.idx)-1]
	f.idx = f.idx[:len(f.idx)-1]
	return x
}

// rearmSlack is how far the clock may move while arm arms the timer
// before arm arms it again.
const rearmSlack = 100 * time.Microsecond

// arm sets timer to fire at the instant next. A timer takes a duration,
// computed from a reading of the clock; if the clock moves on before the
// timer is armed (a fake clock's Advance from a test's goroutine moves it
// a whole step), the timer fires that much late, and a test that waits
// for the due job before it moves the clock again waits for ever. So arm
// reads the clock again, and arms the timer again while it moved more
// than rearmSlack: a real clock moves that much only if this goroutine
// was preempted, and then arming again is right too.
func arm(timer queuetype.Timer, next int64, now func() int64) {
	for {
		t0 := now()
		d := max(time.Duration(next-t0), 0)
		timer.Reset(d)
		if d == 0 || time.Duration(now()-t0) < rearmSlack {
			return
		}
	}
}

// run promotes due items with promote until ctx ends, sleeping until the
// earliest due instant or a wake-up. promote returns the next due instant
// (0 if none).
func (s *schedule[T]) run(ctx context.Context, clk queuetype.Clock, now func() int64, promote func() int64) {
	timer := clk.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next := promote()
		if next > 0 {
			arm(timer, next, now)
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

// ReleaseHeld implements queue.HoldStore: the jobs Hold put back for
// target that are not yet due become due now, and the scheduler promotes
// them. It visits the whole schedule: a Resume is rare.
func (s *Store[T]) ReleaseHeld(_ context.Context, target string) (int, error) {
	return s.sched.release(target, max(s.now(), 1)), nil
}

// release makes the live held items of target that are due after now due
// at now, restores the heap's order and reports how many it moved.
func (s *schedule[T]) release(target string, now int64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := range s.heap.len() {
		it := s.heap.at(i)
		if it.more == nil || !it.more.held || it.more.target != target || it.at <= now {
			continue
		}
		if it.ent != nil && !it.ent.is(it.id, keyPending) {
			continue // cancelled (see compactLocked)
		}
		it.at = now
		n++
	}
	if n > 0 {
		for i := (s.heap.len() - 2) / 4; i >= 0; i-- {
			s.down(i)
		}
		s.poke()
	}
	return n
}
