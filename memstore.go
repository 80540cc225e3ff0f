package queue

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// MemoryStore keeps jobs in process memory. It is the default Store: New
// creates one unless WithStore is given. Ready jobs wait in one lock-free
// ring per priority level (no lock and no allocation for a job without a
// key), scheduled jobs in a heap, pending keys in a sharded set whose
// entries a worker claims and releases with one compare-and-swap. Jobs do
// not survive the process.
type MemoryStore[T any] struct {
	cfg    StoreConfig
	epoch  time.Time
	rings  []atomic.Pointer[ring[T]] // ready queues by priority index, highest first; made on first use
	multi  atomic.Bool               // more than one ring exists: capacity is shared
	ringMu sync.Mutex                // serialises making and closing rings
	closed bool                      // Drain closed the rings to new jobs; ringMu
	tombs  []atomic.Int64            // by priority: cancelled items still in a ring
	keys   *keySet[T]
	sched  *schedule[T]
	wake   chan struct{}

	// The fields above are read by every claim; the counters below are
	// written often, each on a cache line of its own so that those writes
	// do not evict the fields above from the workers' caches.
	_   [64]byte
	ids atomic.Int64
	_   [56]byte
	// Idle workers park on wake after announcing themselves in sleepers;
	// a push that sees a sleeper leaves a token. Busy workers never touch
	// either.
	sleepers atomic.Int32
	_        [60]byte

	drained   atomic.Bool
	drainOnce sync.Once
	drainCh   chan struct{}

	mu      sync.Mutex // guards cancel, done
	cancel  context.CancelFunc
	done    chan struct{}
	batch   []item[T]          // promotion buffer; s.mu
	events  []Event            // events gathered under s.mu, reported after it
	running [runStripes]stripe // claimed jobs, striped so that workers do not share a counter; only the sum means anything
}

// runStripes is the number of stripes of the running counter. A queue's
// worker counts its claims and finishes on stripe worker ID mod
// runStripes; the Store methods, which do not know the worker, use stripe
// 0 (Claim) or the job's ID (Complete, Retry and the rest). A stripe can
// go negative; only the sum means anything, and it is exact.
const runStripes = 16

// stripe is a counter on a cache line of its own.
type stripe struct {
	n atomic.Int64
	_ [56]byte
}

// item is a job as the in-memory store holds it: compact, so that a
// million scheduled jobs stay small.
type item[T any] struct {
	id      int64
	at      int64       // due instant (ns since epoch); 0 means immediate
	meta    *jobMeta[T] // nil for a job without key, group, target or max attempts
	attempt int32
	prio    uint8
	payload T
}

type jobMeta[T any] struct {
	key   string
	entry *keyEntry[T] // the key's entry while this job holds or waits for the key
	more  *jobMore     // nil when the job has no group, target or max attempts
}

// jobMore is what few jobs set; a job with a key and nothing else costs
// 64 bytes instead of 112.
type jobMore struct {
	group, target string
	maxAttempts   int
}

func (m *jobMeta[T]) group() string {
	if m.more == nil {
		return ""
	}
	return m.more.group
}

func (m *jobMeta[T]) target() string {
	if m.more == nil {
		return ""
	}
	return m.more.target
}

// keyedMeta is a keyed job's meta and the entry it will hold, in one
// allocation; keyedMetaMore adds the rest, and metaMore is the meta of a
// job without key.
type (
	keyedMeta[T any] struct {
		m jobMeta[T]
		e keyEntry[T]
	}
	keyedMetaMore[T any] struct {
		keyedMeta[T]
		x jobMore
	}
	metaMore[T any] struct {
		m jobMeta[T]
		x jobMore
	}
)

// newMeta returns the meta of a job with these fields, and its key entry
// if it has a key; nil if the job sets none of them.
func newMeta[T any](key, group, target string, maxAttempts int) (*jobMeta[T], *keyEntry[T]) {
	more := group != "" || target != "" || maxAttempts != 0
	switch {
	case key != "" && more:
		km := &keyedMetaMore[T]{x: jobMore{group: group, target: target, maxAttempts: maxAttempts}}
		km.m = jobMeta[T]{key: key, entry: &km.e, more: &km.x}
		return &km.m, &km.e
	case key != "":
		km := &keyedMeta[T]{}
		km.m = jobMeta[T]{key: key, entry: &km.e}
		return &km.m, &km.e
	case more:
		mm := &metaMore[T]{x: jobMore{group: group, target: target, maxAttempts: maxAttempts}}
		mm.m.more = &mm.x
		return &mm.m, nil
	}
	return nil, nil
}

// memClaim is what a queue's worker keeps between claiming a job from the
// in-memory store and finishing it: the stripe it counts on, and the
// job's key entry, so that finishing a keyed job needs no map lookup.
type memClaim[T any] struct {
	stripe int
	id     int64
	ent    *keyEntry[T]
}

var _ Store[int] = (*MemoryStore[int])(nil)

// MaxMemoryCapacity is the largest WithCapacity the in-memory store
// accepts: it allocates each priority's ready queue up front, at twice the
// capacity (about 1 GiB per priority in use at this limit). Durable stores
// have no such limit.
const MaxMemoryCapacity = 1 << 23

// NewMemoryStore returns an empty in-memory store, to pass to WithStore
// (New makes one by itself when none is given).
func NewMemoryStore[T any]() *MemoryStore[T] {
	return &MemoryStore[T]{keys: newKeySet[T](), sched: newSchedule[T](), drainCh: make(chan struct{}),
		wake: make(chan struct{}, 1)}
}

// Init implements Store.
func (s *MemoryStore[T]) Init(cfg StoreConfig) error {
	if s.rings != nil {
		return fmt.Errorf("queue: MemoryStore already bound to queue %q", s.cfg.Name)
	}
	if len(cfg.Priorities) == 0 || len(cfg.Priorities) > 255 {
		return fmt.Errorf("queue: MemoryStore: need 1..255 priorities, got %d", len(cfg.Priorities))
	}
	if cfg.Capacity > MaxMemoryCapacity {
		// Each ready queue is allocated whole, at twice the capacity.
		return optErr("WithCapacity", cfg.Capacity, "the in-memory store holds at most %d ready jobs", MaxMemoryCapacity)
	}
	s.cfg = cfg
	// Instants count from a day before now, so that every instant the
	// store deals in is positive and 0 can mean "no instant".
	s.epoch = cfg.Clock.Now().Add(-24 * time.Hour)
	s.rings = make([]atomic.Pointer[ring[T]], len(cfg.Priorities))
	s.tombs = make([]atomic.Int64, len(cfg.Priorities))
	s.ring(uint8(cfg.PriorityIndex("")))
	return nil
}

// ring returns the ready queue of priority p, making it on first use.
// Rings are sized for twice the capacity, so that cancelled items waiting
// to be skipped do not crowd out live ones.
func (s *MemoryStore[T]) ring(p uint8) *ring[T] {
	if r := s.rings[p].Load(); r != nil {
		return r
	}
	s.ringMu.Lock()
	defer s.ringMu.Unlock()
	if r := s.rings[p].Load(); r != nil {
		return r
	}
	r := newRing[T](2 * s.cfg.Capacity)
	if s.closed {
		r.close()
	}
	s.rings[p].Store(r)
	n := 0
	for i := range s.rings {
		if s.rings[i].Load() != nil {
			n++
		}
	}
	s.multi.Store(n > 1)
	return r
}

// Start implements Store: it starts the scheduler goroutine.
func (s *MemoryStore[T]) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return ErrStarted
	}
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.sched.run(ctx, s.cfg.Clock, s.now, s.promote)
	}()
	return nil
}

// Close implements Store: it stops the scheduler. Jobs stay in the store.
func (s *MemoryStore[T]) Close(ctx context.Context) error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *MemoryStore[T]) now() int64 { return s.instant(s.cfg.Clock.Now()) }

// instant converts t to the store's time line; the subtraction uses the
// monotonic readings when both times have one.
func (s *MemoryStore[T]) instant(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

// Add implements Store.
func (s *MemoryStore[T]) Add(_ context.Context, job Job[T]) (Added, error) {
	return s.add(&job, false)
}

// add is Add without copying the job: the queue's hot path calls it
// directly. future says job.RunAt was just computed as now plus a
// positive delay: the job is scheduled without reading the clock again.
func (s *MemoryStore[T]) add(job *Job[T], future bool) (Added, error) {
	p := s.cfg.PriorityIndex(job.Priority)
	if p < 0 {
		return Added{}, fmt.Errorf("%w %q", ErrUnknownPriority, job.Priority)
	}
	it := item[T]{prio: uint8(p), payload: job.Payload}
	var fresh *keyEntry[T]
	it.meta, fresh = newMeta[T](job.Key, job.Group, job.Target, job.MaxAttempts)
	scheduled := false
	if !job.RunAt.IsZero() {
		// A due job keeps its instant too: the job's RunAt reports when it
		// became due, which the wait-time metric measures from.
		it.at = max(s.instant(job.RunAt), 1)
		scheduled = future || it.at > s.now()
	}
	it.id = s.ids.Add(1)
	if job.Key == "" {
		return s.place(it, scheduled)
	}
	h := s.keys.hash(job.Key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, slot := s.keys.find(sh, job.Key, h)
	if e != nil && !e.gone() {
		id, st := e.load()
		if st != keyRunning || !s.cfg.Coalesce {
			return Added{}, ErrDuplicate // pending, or a rerun already waits
		}
		rerun := it // a copy, so that it itself does not escape on the fast path
		rerun.meta.entry = e
		sh.setRerun(e, &rerun)
		if e.move(id, keyRunning, keyRerun) {
			return Added{ID: it.id, Coalesced: true}, nil
		}
		// The running job ended meanwhile: the key is free.
		sh.takeRerun(e)
		it.meta.entry = fresh
	}
	// The entry goes in before the job goes into a ring, where a worker
	// may claim it at once.
	fresh.st.Store(packKey(it.id, keyPending))
	fresh.h, fresh.meta, fresh.prio = h, it.meta, it.prio
	s.keys.insert(sh, slot, fresh)
	added, err := s.place(it, scheduled)
	if err != nil {
		fresh.st.Store(packKey(it.id, keyGone))
		s.keys.remove(sh, fresh)
		return added, err
	}
	fresh.sched = added.Scheduled
	return added, nil
}

// place puts it into the schedule or its ready queue. The key's shard
// lock, if any, is held by the caller, so a concurrent Cancel cannot slip
// between the two steps.
func (s *MemoryStore[T]) place(it item[T], scheduled bool) (Added, error) {
	if scheduled {
		if !s.sched.push(it, true) {
			return Added{}, ErrDuplicate
		}
		return Added{ID: it.id, Scheduled: true}, nil
	}
	if res := s.push(it, true); res != pushed {
		if res == pushClosed {
			return Added{}, ErrClosed
		}
		if r := s.ring(it.prio); uint64(r.len()) < r.limit || s.Len() >= s.cfg.Capacity {
			return Added{}, ErrQueueFull
		}
		// Below capacity, but the ring's slots are all taken, so by
		// cancelled items that no worker has skipped yet (every worker is
		// busy): the job waits in the schedule, due now, for room.
		it.at = max(it.at, s.now(), 1)
		s.sched.push(it, false)
		return Added{ID: it.id, Scheduled: true}, nil
	}
	return Added{ID: it.id}, nil
}

// push offers it to its ready queue without blocking, and wakes an idle
// worker if there is one. fresh says it is a new job, which a drained
// store refuses.
func (s *MemoryStore[T]) push(it item[T], fresh bool) pushResult {
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
	res := r.push(it, uint64(room), fresh)
	if res == pushed {
		s.wakeOne()
	}
	return res
}

// wakeOne leaves a token for a parked worker, if one is parked. At most
// one token waits at a time; a worker that wakes to find more work passes
// the token on (next), so a burst wakes workers one by one, and parked
// workers are not woken for nothing.
func (s *MemoryStore[T]) wakeOne() {
	if s.sleepers.Load() > 0 {
		select {
		case s.wake <- struct{}{}:
		default: // a token is already waiting
		}
	}
}

func (s *MemoryStore[T]) tombstones() int {
	n := int64(0)
	for i := range s.tombs {
		n += s.tombs[i].Load()
	}
	return int(n)
}

// Len implements Store: ready jobs, not counting cancelled ones still in line.
func (s *MemoryStore[T]) Len() int {
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

// Claim implements Store.
func (s *MemoryStore[T]) Claim(ctx context.Context) (Job[T], error) {
	var job Job[T]
	err := s.claim(ctx, &job, &memClaim[T]{}) // any stripe: only the sum counts
	return job, err
}

// claim is Claim writing into *job, counting the claim on mc's stripe and
// keeping the job's key entry in mc: the queue's workers call it
// directly, with a job they reuse, so that no Job is copied on the way.
func (s *MemoryStore[T]) claim(ctx context.Context, job *Job[T], mc *memClaim[T]) error {
	for {
		it, err := s.next(ctx)
		if err != nil {
			return err
		}
		if it.at != 0 && it.at > s.now() {
			// Taken before its time (only a clock that jumps makes this
			// happen): back to the schedule.
			s.unpromote(it)
			continue
		}
		mc.ent = nil
		if it.meta != nil && it.meta.key != "" {
			if !it.meta.entry.move(it.id, keyPending, keyRunning) {
				s.tombs[it.prio].Add(-1) // cancelled while it was ready
				continue
			}
			mc.id, mc.ent = it.id, it.meta.entry
		}
		it.attempt++
		s.running[mc.stripe].n.Add(1)
		s.fill(job, &it)
		return nil
	}
}

// next takes the next item in priority order, parking when there is none.
func (s *MemoryStore[T]) next(ctx context.Context) (item[T], error) {
	for {
		if err := ctx.Err(); err != nil {
			return item[T]{}, err // retired, though maybe woken by a token
		}
		if it, ok := s.poll(); ok {
			return it, nil
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
			return item[T]{}, ErrDrained
		}
		// Announce, then look again: a push either sees the sleeper and
		// leaves a token, or published its item before this second look.
		s.sleepers.Add(1)
		if it, ok := s.poll(); ok {
			s.sleepers.Add(-1)
			return it, nil
		}
		select {
		case <-s.wake:
		case <-s.drainCh:
		case <-ctx.Done():
			s.sleepers.Add(-1)
			return item[T]{}, ctx.Err()
		}
		s.sleepers.Add(-1)
		if it, ok := s.poll(); ok {
			if s.Len() > 0 {
				s.wakeOne() // more where this came from: wake the next sleeper
			}
			return it, nil
		}
	}
}

// publishing reports whether a ring holds positions that poll could not
// take: pushes that have won the tail but not yet published their item.
func (s *MemoryStore[T]) publishing() bool {
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil && r.len() > 0 {
			return true
		}
	}
	return false
}

// poll takes the oldest item of the highest non-empty priority, if any.
func (s *MemoryStore[T]) poll() (item[T], bool) {
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil {
			if it, ok := r.pop(); ok {
				return it, true
			}
		}
	}
	return item[T]{}, false
}

// unpromote returns a ready item to the schedule.
func (s *MemoryStore[T]) unpromote(it item[T]) {
	if it.meta == nil || it.meta.key == "" {
		s.sched.push(it, false)
		return
	}
	e := it.meta.entry
	sh := s.keys.shard(e.h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e.is(it.id, keyPending) {
		e.sched = true
		s.sched.push(it, false)
		return
	}
	s.tombs[it.prio].Add(-1) // cancelled while it was ready
}

// fill sets every field of *j from it.
func (s *MemoryStore[T]) fill(j *Job[T], it *item[T]) {
	j.ID, j.Priority, j.Attempt, j.Payload = it.id, s.cfg.Priorities[it.prio].Name, int(it.attempt), it.payload
	j.RunAt = time.Time{}
	if it.at != 0 {
		j.RunAt = s.epoch.Add(time.Duration(it.at))
	}
	j.Key, j.Group, j.Target, j.MaxAttempts = "", "", "", 0
	if m := it.meta; m != nil {
		j.Key = m.key
		if x := m.more; x != nil {
			j.Group, j.Target, j.MaxAttempts = x.group, x.target, x.maxAttempts
		}
	}
}

func (s *MemoryStore[T]) item(j *Job[T]) item[T] {
	it := item[T]{id: j.ID, attempt: int32(j.Attempt), payload: j.Payload}
	if p := s.cfg.PriorityIndex(j.Priority); p > 0 {
		it.prio = uint8(p)
	}
	it.meta, _ = newMeta[T](j.Key, j.Group, j.Target, j.MaxAttempts) // the caller sets meta.entry to the key's entry
	return it
}

// Complete implements Store.
func (s *MemoryStore[T]) Complete(_ context.Context, job Job[T]) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

// Dead implements Store; the in-memory store keeps no dead jobs (the
// queue's OnDead hook receives them).
func (s *MemoryStore[T]) Dead(_ context.Context, job Job[T], _ error) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

// CancelClaimed implements ClaimCanceller; the in-memory store keeps no
// finished jobs, so it is Complete.
func (s *MemoryStore[T]) CancelClaimed(_ context.Context, job Job[T], _ error) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

var _ ClaimCanceller[int] = (*MemoryStore[int])(nil)

// stripe returns the running-counter stripe for a job the caller does not
// know the worker of.
func (s *MemoryStore[T]) stripe(id int64) int { return int(uint64(id) % runStripes) }

// finish releases a finished job's key, promoting its rerun, and counts
// the finish on stripe. ent is the job's key entry if the caller has it
// (a worker that claimed the job), or nil.
func (s *MemoryStore[T]) finish(job *Job[T], stripe int, ent *keyEntry[T]) {
	s.running[stripe].n.Add(-1)
	if job.Key == "" {
		return
	}
	if ent != nil && ent.move(job.ID, keyRunning, keyGone) {
		s.keys.release(ent) // no rerun waits: the key is free
		return
	}
	var h uint64
	if ent != nil {
		h = ent.h
	} else {
		h = s.keys.hash(job.Key)
	}
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := ent
	if e == nil {
		if e, _ = s.keys.find(sh, job.Key, h); e == nil {
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
		s.keys.remove(sh, e)
	case keyRerun:
		s.releaseRerun(sh, e)
	}
}

// releaseRerun makes e's rerun the key's pending job; sh is e's shard, and
// its lock is held.
func (s *MemoryStore[T]) releaseRerun(sh *keyShard[T], e *keyEntry[T]) {
	r := *sh.takeRerun(e)
	e.sched, e.prio, e.meta = false, r.prio, r.meta
	// Pending before the push: a worker may claim r at once.
	e.st.Store(packKey(r.id, keyPending))
	if (r.at != 0 && r.at > s.now()) || s.push(r, false) != pushed {
		// Not due yet, or no room: it waits in the schedule, never
		// dropped. A drain runs it once the ring has room (it is due).
		if now := s.now(); r.at <= now {
			r.at = now
			if !s.drained.Load() {
				r.at += int64(s.cfg.RequeueDelay)
			}
		}
		e.sched = true
		s.sched.push(r, false)
	}
}

// Retry implements Store.
func (s *MemoryStore[T]) Retry(_ context.Context, job Job[T], at time.Time, _ error) error {
	return s.reschedule(&job, at, false)
}

// Defer implements Store.
func (s *MemoryStore[T]) Defer(_ context.Context, job Job[T], at time.Time, _ error) error {
	return s.reschedule(&job, at, true)
}

func (s *MemoryStore[T]) reschedule(job *Job[T], at time.Time, undo bool) error {
	s.running[s.stripe(job.ID)].n.Add(-1)
	it := s.item(job)
	if undo {
		it.attempt--
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
	e, _ := s.keys.find(sh, job.Key, h)
	if e == nil {
		return nil
	}
	id, st := e.load()
	if id != job.ID || (st != keyRunning && st != keyRerun) {
		return nil // not this job's entry any more
	}
	if st == keyRerun {
		s.releaseRerun(sh, e)
		return ErrSuperseded
	}
	// Nothing else moves a running entry while the shard is locked: the
	// job's own finish is this call.
	it.meta.entry, e.sched = e, true
	e.st.Store(packKey(id, keyPending))
	s.sched.push(it, false)
	return nil
}

// Cancel implements Store.
func (s *MemoryStore[T]) Cancel(_ context.Context, key string) (int, error) {
	if key == "" {
		return 0, nil
	}
	h := s.keys.hash(key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	if e, _ := s.keys.find(sh, key, h); e != nil {
		var del bool
		if n, del = s.cancelEntry(e); del {
			s.keys.remove(sh, e)
		}
	}
	return n, nil
}

// CancelMatch implements Store. It visits every pending key.
func (s *MemoryStore[T]) CancelMatch(_ context.Context, match func(key string) bool) (int, error) {
	total := 0
	s.keys.entries(func(e *keyEntry[T]) bool {
		if !match(e.meta.key) {
			return false
		}
		n, del := s.cancelEntry(e)
		total += n
		return del
	})
	return total, nil
}

// cancelEntry cancels what e holds that has not started: a pending job or
// a running job's rerun. It reports how many jobs it cancelled and whether
// the entry should go. The entry's shard lock is held.
func (s *MemoryStore[T]) cancelEntry(e *keyEntry[T]) (int, bool) {
	for {
		id, st := e.load()
		switch st {
		case keyGone:
			return 0, true
		case keyRunning:
			return 0, false
		case keyRerun:
			// Only finish's slow path, under this lock, moves a rerun entry.
			s.keys.shard(e.h).takeRerun(e)
			e.st.Store(packKey(id, keyRunning))
			return 1, false
		}
		if !e.move(id, keyPending, keyGone) {
			continue // claimed meanwhile: running now
		}
		// The item stays where it is and is skipped when it surfaces;
		// until then it is counted out of Len and the schedule's length.
		if e.sched {
			s.sched.mu.Lock()
			s.sched.dead++
			if g := e.meta.group(); g != "" && s.sched.groups[g] == id {
				delete(s.sched.groups, g)
			}
			s.sched.mu.Unlock()
		} else {
			s.tombs[e.prio].Add(1)
		}
		return 1, true
	}
}

// PromoteDue implements Store.
func (s *MemoryStore[T]) PromoteDue(context.Context) (int, error) {
	s.mu.Lock()
	n := s.promoteN()
	evs := s.takeEvents()
	s.mu.Unlock()
	s.reportAll(evs)
	return n, nil
}

// promote is the scheduler goroutine's step: it returns the next due instant.
func (s *MemoryStore[T]) promote() int64 {
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
// once it is released (StoreConfig.Report must not run under store locks).
func (s *MemoryStore[T]) takeEvents() []Event {
	evs := s.events
	s.events = nil
	return evs
}

func (s *MemoryStore[T]) reportAll(evs []Event) {
	for _, ev := range evs {
		s.cfg.Report(ev)
	}
}

// promoteDrained is the drain's promotion: workers run it once the ready
// queues are empty, as the scheduler no longer does.
func (s *MemoryStore[T]) promoteDrained() int {
	s.mu.Lock()
	n := s.promoteDue()
	evs := s.takeEvents()
	s.mu.Unlock()
	s.reportAll(evs)
	return n
}

// promoteN moves due items to the ready queues in bounded batches, unless
// the store is drained; s.mu is held.
func (s *MemoryStore[T]) promoteN() int {
	if s.drained.Load() {
		return 0
	}
	return s.promoteDue()
}

// promoteDue moves due items to the ready queues in bounded batches; s.mu is held.
func (s *MemoryStore[T]) promoteDue() int {
	moved := 0
	for {
		now := s.now()
		var next int64
		s.batch, next = s.sched.popDue(now, s.batch[:0], 1024)
		for _, it := range s.batch {
			switch s.promoteOne(it, now) {
			case promoted:
				moved++
			case requeued:
				s.events = append(s.events, s.event(EventRequeued, &it, s.cfg.RequeueDelay))
			}
		}
		if len(s.batch) < 1024 || next > now {
			clear(s.batch)
			return moved
		}
	}
}

type promotion uint8

const (
	promoted promotion = iota
	requeued
	skipped
)

// promoteOne moves one due item to its ready queue, or back into the
// schedule RequeueDelay later when the queue is full. For a keyed item it
// holds the key's shard lock, so that Cancel sees where the item is.
func (s *MemoryStore[T]) promoteOne(it item[T], now int64) promotion {
	if it.meta == nil || it.meta.key == "" {
		if s.push(it, false) == pushed {
			return promoted
		}
		it.at = now + int64(s.cfg.RequeueDelay)
		s.sched.push(it, false)
		return requeued
	}
	e := it.meta.entry
	sh := s.keys.shard(e.h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !e.is(it.id, keyPending) {
		s.sched.mu.Lock()
		s.sched.dead--
		s.sched.mu.Unlock()
		return skipped
	}
	if s.push(it, false) == pushed {
		e.sched = false
		return promoted
	}
	it.at = now + int64(s.cfg.RequeueDelay)
	s.sched.push(it, false)
	return requeued
}

// live reports whether it still holds its key, pending.
func (s *MemoryStore[T]) live(it *item[T]) bool { return it.meta.entry.is(it.id, keyPending) }

func (s *MemoryStore[T]) event(k EventKind, it *item[T], d time.Duration) Event {
	ev := Event{Kind: k, JobID: it.id, Priority: s.cfg.Priorities[it.prio].Name, Attempt: int(it.attempt), Delay: d}
	if m := it.meta; m != nil {
		ev.Key, ev.Target = m.key, m.target()
	}
	return ev
}

// Stats implements Store.
func (s *MemoryStore[T]) Stats(context.Context) (StoreStats, error) {
	keys, reruns := s.keys.counts()
	st := StoreStats{
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

func (s *MemoryStore[T]) runningCount() int {
	n := int64(0)
	for i := range s.running {
		n += s.running[i].n.Load()
	}
	return int(n)
}

// Scheduled implements Store.
func (s *MemoryStore[T]) Scheduled(_ context.Context, n int) ([]ScheduledJob, error) {
	// Cancelled items are filtered after the schedule's lock is released
	// (lock order), so ask for enough extra to cover them.
	s.sched.mu.Lock()
	extra := min(s.sched.dead, 1024)
	s.sched.mu.Unlock()
	items := s.sched.earliest(n + extra)
	out := make([]ScheduledJob, 0, n)
	for i := range items {
		if len(out) == n {
			break
		}
		if m := items[i].meta; m != nil && m.key != "" && !s.live(&items[i]) {
			continue
		}
		var j Job[T]
		s.fill(&j, &items[i])
		out = append(out, ScheduledJob{ID: j.ID, Key: j.Key, Group: j.Group, Target: j.Target,
			Priority: j.Priority, RunAt: j.RunAt, Attempt: j.Attempt})
	}
	return out, nil
}

// Purge implements Store.
func (s *MemoryStore[T]) Purge(context.Context) (int, error) {
	n := 0
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil {
			for _, ok := r.pop(); ok; _, ok = r.pop() {
				n++
			}
		}
	}
	s.sched.mu.Lock()
	n += s.sched.heap.len()
	n -= s.sched.dead
	s.sched.heap, s.sched.dead = tiers[T]{}, 0
	clear(s.sched.groups)
	s.sched.mu.Unlock()
	for i := range s.tombs {
		n -= int(s.tombs[i].Swap(0))
	}
	s.keys.entries(func(e *keyEntry[T]) bool {
		for {
			id, st := e.load()
			switch st {
			case keyGone:
				return true // claimed and finished meanwhile
			case keyRunning:
				return false
			case keyRerun:
				s.keys.shard(e.h).takeRerun(e)
				e.st.Store(packKey(id, keyRunning))
				n++
				return false
			}
			if e.move(id, keyPending, keyGone) {
				return true
			}
		}
	})
	return n, nil
}

// Drain implements Store: Claim stops waiting once the ready queues are
// empty, and due jobs are no longer promoted.
func (s *MemoryStore[T]) Drain() {
	s.drainOnce.Do(func() {
		// Close the rings to new jobs first: an Enqueue that raced Stop
		// either got its job into a ring before this, and the drain runs
		// it, or gets ErrClosed.
		s.ringMu.Lock()
		s.closed = true
		for i := range s.rings {
			if r := s.rings[i].Load(); r != nil {
				r.close()
			}
		}
		s.ringMu.Unlock()
		s.drained.Store(true)
		close(s.drainCh)
		s.sched.poke()
	})
}
