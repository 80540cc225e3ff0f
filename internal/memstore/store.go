package memstore

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/internal/core"
)

// Store keeps jobs in process memory. It is the queue's default store:
// queue.New creates one unless WithStore is given. Ready jobs wait in one lock-free
// ring per priority level (no lock and no allocation for a job without a
// key), scheduled jobs in a heap, pending keys in a sharded set whose
// entries a worker claims and releases with one compare-and-swap. Jobs do
// not survive the process.
type Store[T any] struct {
	cfg    core.StoreConfig
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
	drainAt   atomic.Int64 // the instant Drain was called: the drain runs what was due by then
	drainOnce sync.Once
	drainCh   chan struct{}

	mu      sync.Mutex // guards cancel, done
	cancel  context.CancelFunc
	done    chan struct{}
	batch   []item[T]          // promotion buffer; s.mu
	events  []core.Event       // events gathered under s.mu, reported after it
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
	at      int64     // due instant (ns since epoch); 0 means immediate
	ent     *keyEntry // the key's entry; nil for a job without key
	more    *jobMore  // nil for a job without group, target or max attempts
	attempt int32
	prio    uint8
	payload T
}

// jobMore is what few jobs set; it is allocated only for a job that sets
// one of them.
type jobMore struct {
	group, target string
	maxAttempts   int
}

func newMore(group, target string, maxAttempts int) *jobMore {
	if group == "" && target == "" && maxAttempts == 0 {
		return nil
	}
	return &jobMore{group: group, target: target, maxAttempts: maxAttempts}
}

// grp returns the job's group; m may be nil.
func (m *jobMore) grp() string {
	if m == nil {
		return ""
	}
	return m.group
}

// tgt returns the job's target; m may be nil.
func (m *jobMore) tgt() string {
	if m == nil {
		return ""
	}
	return m.target
}

// WorkerClaim is what a queue's worker keeps between claiming a job from
// the in-memory store (ClaimJob) and finishing it (FinishJob): the stripe
// it counts on, and the job's key entry, so that finishing a keyed job
// needs no map lookup. Make one per worker with NewWorkerClaim.
type WorkerClaim struct {
	stripe int
	id     int64
	ent    *keyEntry
}

// NewWorkerClaim returns the claim state of the worker numbered n, which
// counts its running jobs on stripe n modulo the number of stripes.
func NewWorkerClaim(n int) WorkerClaim { return WorkerClaim{stripe: n % runStripes} }

// memoryCapacityErr is the in-memory store's refusal of a capacity above
// MaxCapacity, named for the option that set it.
func memoryCapacityErr(n int) error {
	return core.OptErr("WithCapacity", n, "the in-memory store holds at most %d ready jobs", MaxCapacity)
}

// MaxCapacity is the largest WithCapacity the in-memory store
// accepts: it allocates each priority's ready queue up front, at twice the
// capacity (about 1 GiB per priority in use at this limit). Durable stores
// have no such limit.
const MaxCapacity = 1 << 23

// New returns an empty in-memory store. queue.New makes one when no
// WithStore is given; tests and stores that fall back to memory (and wrap
// it) call New themselves.
func New[T any]() *Store[T] {
	return &Store[T]{keys: newKeySet[T](), sched: newSchedule[T](), drainCh: make(chan struct{}),
		wake: make(chan struct{}, 1)}
}

// Init implements Store. It refuses a second call, with an *OptionError
// naming WithStore: a store holds one queue's jobs, so a store value
// passed to two queues' New is refused by the second.
func (s *Store[T]) Init(cfg core.StoreConfig) error {
	s.mu.Lock() // two queues' New may race for the store
	defer s.mu.Unlock()
	if s.rings != nil {
		return core.OptErr("WithStore", fmt.Sprintf("%T", s), "the store already belongs to queue %q; a store serves one queue: make one per queue", s.cfg.Name)
	}
	if len(cfg.Priorities) == 0 || len(cfg.Priorities) > 255 {
		return fmt.Errorf("queue: in-memory store: need 1..255 priorities, got %d", len(cfg.Priorities))
	}
	if cfg.Capacity > MaxCapacity {
		// Each ready queue is allocated whole, at twice the capacity.
		return memoryCapacityErr(cfg.Capacity)
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
func (s *Store[T]) ring(p uint8) *ring[T] {
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
func (s *Store[T]) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return core.ErrStarted
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
func (s *Store[T]) Close(ctx context.Context) error {
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

func (s *Store[T]) now() int64 { return s.instant(s.cfg.Clock.Now()) }

// instant converts t to the store's time line; the subtraction uses the
// monotonic readings when both times have one.
func (s *Store[T]) instant(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

// after returns the instant d after now, saturating as instant does: a
// RequeueDelay near math.MaxInt64 must not wrap into the past, where the
// job would be promoted, find no room and be requeued again at once.
func after(now int64, d time.Duration) int64 {
	if int64(d) > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + int64(d)
}

// Add implements Store.
func (s *Store[T]) Add(_ context.Context, job core.Job[T]) (core.Added, error) {
	return s.AddJob(&job, false, 0)
}

// AddJob is Add without copying the job: the queue's hot path calls it
// directly. future says job.RunAt was just computed as now plus a
// positive delay: the job is scheduled without reading the clock again.
// parked is how many jobs the queue holds parked for a target's slot,
// which count against MaxPending.
func (s *Store[T]) AddJob(job *core.Job[T], future bool, parked int) (core.Added, error) {
	p := s.cfg.PriorityIndex(job.Priority)
	if p < 0 {
		return core.Added{}, fmt.Errorf("%w %q", core.ErrUnknownPriority, job.Priority)
	}
	if s.atLimit(parked) {
		return core.Added{}, core.ErrPendingLimit
	}
	it := item[T]{prio: uint8(p), payload: job.Payload, more: newMore(job.Group, job.Target, job.MaxAttempts)}
	scheduled := false
	if !job.RunAt.IsZero() {
		// A due job keeps its instant too: the job's RunAt reports when it
		// became due, which the wait-time metric measures from.
		it.at = max(s.instant(job.RunAt), 1)
		scheduled = future || it.at > s.now()
	}
	it.id = s.ids.Add(1)
	if job.Key == "" {
		return s.place(&it, scheduled)
	}
	h := s.keys.hash(job.Key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(job.Key, h)
	if e != nil && !e.gone() {
		id, st := e.load()
		if st != keyRunning || !s.cfg.Coalesce {
			return core.Added{}, e.dupErr() // pending, or a rerun already waits
		}
		rerun := it // a copy, so that it itself does not escape on the fast path
		rerun.ent = e
		sh.setRerun(e, &rerun)
		s.keys.waiting.Add(1)
		if e.move(id, keyRunning, keyRerun) {
			return core.Added{ID: it.id, Coalesced: true}, nil
		}
		// The running job ended meanwhile: the key is free, and its gone
		// entry is this job's.
		s.takeRerun(sh, e)
	}
	// The entry is the job's before the job goes into a ring, where a
	// worker may claim it at once; after that, add writes the entry only
	// if place did not do as asked, so as not to pull its cache line back
	// from the worker.
	if e == nil {
		e = sh.add(job.Key, h, packKey(it.id, keyPending))
	} else {
		e.st.Store(packKey(it.id, keyPending)) // the key's own gone entry
	}
	e.more, e.prio, e.sched = it.more, it.prio, scheduled
	it.ent = e
	added, err := s.place(&it, scheduled)
	if err != nil {
		e.st.Store(packKey(it.id, keyGone))
		sh.reclaim(e)
		return added, err
	}
	if added.Scheduled != scheduled {
		e.sched = true // crowded out of its ring: waits in the schedule
	}
	return added, nil
}

// atLimit reports whether the store, with parked jobs more, holds
// MaxPending jobs. It reads counters kept without locks: the schedule's
// live count and the reruns' count; while those leave room for a full
// ready queue it does not count the ready jobs at all, so that the ready
// path pays two loads for the bound.
func (s *Store[T]) atLimit(parked int) bool {
	limit := s.cfg.MaxPending
	if limit <= 0 {
		return false
	}
	held := int(s.sched.live.Load()+s.keys.waiting.Load()) + parked
	if held < limit-s.cfg.Capacity {
		return false
	}
	return held+s.Len() >= limit
}

// place puts it into the schedule or its ready queue. The key's shard
// lock, if any, is held by the caller, so a concurrent Cancel cannot slip
// between the two steps.
func (s *Store[T]) place(it *item[T], scheduled bool) (core.Added, error) {
	if scheduled {
		if dup := s.sched.push(*it, true); dup != nil {
			return core.Added{}, dup
		}
		return core.Added{ID: it.id, Scheduled: true}, nil
	}
	if res := s.push(it, true); res != pushed {
		if res == pushClosed {
			return core.Added{}, core.ErrClosed
		}
		if r := s.ring(it.prio); uint64(r.len()) < r.limit || s.Len() >= s.cfg.Capacity {
			return core.Added{}, core.ErrQueueFull
		}
		// Below capacity, but the ring's slots are all taken, so by
		// cancelled items that no worker has skipped yet (every worker is
		// busy): the job waits in the schedule, due now, for room.
		it.at = max(it.at, s.now(), 1)
		s.sched.push(*it, false)
		return core.Added{ID: it.id, Scheduled: true}, nil
	}
	return core.Added{ID: it.id}, nil
}

// push offers it to its ready queue without blocking, and wakes an idle
// worker if there is one. fresh says it is a new job, which a drained
// store refuses.
func (s *Store[T]) push(it *item[T], fresh bool) pushResult {
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
func (s *Store[T]) wakeOne() {
	if s.sleepers.Load() > 0 {
		select {
		case s.wake <- struct{}{}:
		default: // a token is already waiting
		}
	}
}

func (s *Store[T]) tombstones() int {
	n := int64(0)
	for i := range s.tombs {
		n += s.tombs[i].Load()
	}
	return int(n)
}

// Len implements Store: ready jobs, not counting cancelled ones still in line.
func (s *Store[T]) Len() int {
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
func (s *Store[T]) Claim(ctx context.Context) (core.Job[T], error) {
	var job core.Job[T]
	err := s.ClaimJob(ctx, &job, &WorkerClaim{}) // any stripe: only the sum counts
	return job, err
}

// ClaimJob is Claim writing into *job, counting the claim on mc's stripe and
// keeping the job's key entry in mc: the queue's workers call it
// directly, with a job they reuse, so that no Job is copied on the way.
func (s *Store[T]) ClaimJob(ctx context.Context, job *core.Job[T], mc *WorkerClaim) error {
	// The item is filled in place by pop. Returned by value through
	// poll and next, it was spilled field by field at each return and
	// read back in 16-byte pieces, which store forwarding cannot serve:
	// the stalls cost a quarter of a job's time (see docs/benchmarks.md).
	var it item[T]
	for {
		if err := s.next(ctx, &it); err != nil {
			return err
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
			return core.ErrDrained
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
// if there is one.
func (s *Store[T]) poll(it *item[T]) bool {
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil && r.pop(it) {
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
func (s *Store[T]) fill(j *core.Job[T], it *item[T]) {
	j.ID, j.Priority, j.Attempt, j.Payload = it.id, s.cfg.Priorities[it.prio].Name, int(it.attempt), it.payload
	j.RunAt = time.Time{}
	if it.at != 0 {
		j.RunAt = s.epoch.Add(time.Duration(it.at))
	}
	j.Key, j.Group, j.Target, j.MaxAttempts = "", "", "", 0
	if it.ent != nil {
		j.Key = it.ent.key
	}
	if x := it.more; x != nil {
		j.Group, j.Target, j.MaxAttempts = x.group, x.target, x.maxAttempts
	}
}

func (s *Store[T]) item(j *core.Job[T]) item[T] {
	it := item[T]{id: j.ID, attempt: int32(j.Attempt), payload: j.Payload}
	if p := s.cfg.PriorityIndex(j.Priority); p > 0 {
		it.prio = uint8(p)
	}
	it.more = newMore(j.Group, j.Target, j.MaxAttempts) // the caller sets ent to the key's entry
	return it
}

// Complete implements Store.
func (s *Store[T]) Complete(_ context.Context, job core.Job[T]) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

// Dead implements Store; the in-memory store keeps no dead jobs (the
// queue's OnDead hook receives them).
func (s *Store[T]) Dead(_ context.Context, job core.Job[T], _ error) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

// CancelClaimed implements ClaimCanceller; the in-memory store keeps no
// finished jobs, so it is Complete.
func (s *Store[T]) CancelClaimed(_ context.Context, job core.Job[T], _ error) error {
	s.finish(&job, s.stripe(job.ID), nil)
	return nil
}

// stripe returns the running-counter stripe for a job the caller does not
// know the worker of.
func (s *Store[T]) stripe(id int64) int { return int(uint64(id) % runStripes) }

// finish is FinishJob for a job claimed on stripe, with its key entry
// ent when the caller has it (nil makes it look the key up).
func (s *Store[T]) finish(job *core.Job[T], stripe int, ent *keyEntry) {
	s.FinishJob(job, &WorkerClaim{stripe: stripe, id: job.ID, ent: ent})
}

// FinishJob is Complete for a job the worker holding wc claimed with
// ClaimJob: it counts the job off wc's stripe and releases its key through
// the key entry the claim found, with no lookup unless a rerun waits.
func (s *Store[T]) FinishJob(job *core.Job[T], wc *WorkerClaim) {
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
func (s *Store[T]) Retry(_ context.Context, job core.Job[T], at time.Time, _ error) error {
	return s.reschedule(&job, at, false)
}

// Defer implements Store.
func (s *Store[T]) Defer(_ context.Context, job core.Job[T], at time.Time, _ error) error {
	return s.reschedule(&job, at, true)
}

func (s *Store[T]) reschedule(job *core.Job[T], at time.Time, undo bool) error {
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
		return core.ErrSuperseded
	}
	// Nothing else moves a running entry while the shard is locked: the
	// job's own finish is this call.
	it.ent, e.sched, e.more, e.prio = e, true, it.more, it.prio
	e.st.Store(packKey(id, keyPending))
	s.sched.push(it, false)
	return nil
}

// Cancel implements Store.
func (s *Store[T]) Cancel(_ context.Context, key string) (int, error) {
	if key == "" {
		return 0, nil
	}
	h := s.keys.hash(key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	n := 0
	if e := sh.find(key, h); e != nil {
		var del bool
		if n, del = s.cancelEntry(e); del {
			sh.reclaim(e)
		}
	}
	return n, nil
}

// CancelMatch implements Store. It visits every pending key.
func (s *Store[T]) CancelMatch(_ context.Context, match func(key string) bool) (int, error) {
	total := 0
	s.keys.entries(func(e *keyEntry) bool {
		if !match(e.key) {
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
func (s *Store[T]) cancelEntry(e *keyEntry) (int, bool) {
	for {
		id, st := e.load()
		switch st {
		case keyGone:
			return 0, true
		case keyRunning:
			return 0, false
		case keyRerun:
			// Only finish's slow path, under this lock, moves a rerun entry.
			s.takeRerun(s.keys.shardOf(e), e)
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
			s.sched.cancelled()
			if g := e.more.grp(); g != "" && s.sched.groups[g].id == id {
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
// once it is released (StoreConfig.Report must not run under store locks).
func (s *Store[T]) takeEvents() []core.Event {
	evs := s.events
	s.events = nil
	return evs
}

func (s *Store[T]) reportAll(evs []core.Event) {
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
	s.events = append(s.events, core.Event{Kind: core.EventRequeued, JobID: it.id, Key: key, Target: it.more.tgt(),
		Priority: s.cfg.Priorities[it.prio].Name, Attempt: int(it.attempt), Delay: s.cfg.RequeueDelay})
}

// Stats implements Store.
func (s *Store[T]) Stats(context.Context) (core.StoreStats, error) {
	keys, reruns := s.keys.counts() // reruns: exact, under the shards' locks
	st := core.StoreStats{
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
func (s *Store[T]) Scheduled(_ context.Context, n int) ([]core.ScheduledJob, error) {
	// earliest leaves out the items it sees cancelled; one cancelled
	// after it looked is filtered below, under its key's lock (which the
	// schedule's lock may not be held with), so ask for a few extra.
	items := s.sched.earliest(n + 8)
	out := make([]core.ScheduledJob, 0, n)
	for i := range items {
		if len(out) == n {
			break
		}
		var j core.Job[T]
		if !s.fillPending(&j, &items[i]) {
			continue // cancelled
		}
		out = append(out, core.ScheduledJob{ID: j.ID, Key: j.Key, Group: j.Group, Target: j.Target,
			Priority: j.Priority, RunAt: j.RunAt, Attempt: j.Attempt})
	}
	return out, nil
}

// fillPending fills *j from it unless it is a keyed item whose job no
// longer holds its key; it reports whether it did.
func (s *Store[T]) fillPending(j *core.Job[T], it *item[T]) bool {
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

// Purge implements Store. It may race Enqueue, Cancel, claims and the
// scheduler, so it accounts item by item, as a claim does: an item it
// takes out of a ring or the schedule is a job it cancels if the job is
// still pending (a compare-and-swap on its key entry), or one cancelled
// before, whose tombstone or dead count it takes back; and it cancels
// coalesced reruns. A job that moves between the schedule and a ring
// while Purge runs, or is enqueued meanwhile, may survive it; every job
// is counted once either way.
func (s *Store[T]) Purge(context.Context) (int, error) {
	n := 0
	for i := range s.rings {
		if r := s.rings[i].Load(); r != nil {
			var it item[T]
			for r.pop(&it) {
				if purged(&it) {
					n++
				} else {
					s.tombs[it.prio].Add(-1)
				}
			}
		}
	}
	s.sched.mu.Lock()
	for i := range s.sched.heap.len() {
		if purged(s.sched.heap.at(i)) {
			n++
		} else {
			s.sched.dead--
		}
	}
	s.sched.heap = tiers[T]{}
	clear(s.sched.groups)
	s.sched.counted()
	s.sched.mu.Unlock()
	s.keys.entries(func(e *keyEntry) bool {
		id, st := e.load()
		switch st {
		case keyGone:
			return true
		case keyRerun:
			// Only finish's slow path, under this lock, moves a rerun entry.
			s.takeRerun(s.keys.shardOf(e), e)
			e.st.Store(packKey(id, keyRunning))
			n++
		}
		return false
	})
	return n, nil
}

// purged ends a job whose item Purge took out of the store: true if it
// was pending (now cancelled), false if it had been cancelled already.
func purged[T any](it *item[T]) bool {
	return it.ent == nil || it.ent.move(it.id, keyPending, keyGone)
}

// Drain implements Store: Claim stops waiting once the ready queues are
// empty, and due jobs are no longer promoted.
func (s *Store[T]) Drain() {
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
		s.drainAt.Store(max(s.now(), 1))
		s.drained.Store(true)
		close(s.drainCh)
		s.sched.poke()
	})
}
