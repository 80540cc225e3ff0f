package memstore

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Store keeps jobs in process memory. It is the queue's default store:
// queue.New creates one (NewWithStore takes another store). Ready jobs wait in one lock-free
// ring per priority level (no lock and no allocation for a job without a
// key), scheduled jobs in a heap, pending keys in a sharded set whose
// entries a worker claims and releases with one compare-and-swap. Jobs do
// not survive the process.
type Store[T any] struct {
	cfg    storekit.Config
	epoch  time.Time
	rings  []atomic.Pointer[ring[T]] // ready queues by priority index, highest first; made on first use
	multi  atomic.Bool               // more than one ring exists: capacity is shared
	ringMu sync.Mutex                // serialises making and closing rings
	closed bool                      // Drain closed the rings to new jobs; ringMu
	tombs  []atomic.Int64            // by priority: cancelled items still in a ring
	cycle  []uint8                   // weighted dispatch order (storekit.ShareCycle); nil: strict
	keys   *keySet[T]
	sched  *schedule[T]
	wake   chan struct{}

	// The fields above are read by every claim; the counters below are
	// written often, each on a cache line of its own so that those writes
	// do not evict the fields above from the workers' caches.
	_   [64]byte
	ids atomic.Int64
	_   [56]byte
	// tick counts weighted claims: claim n prefers level cycle[n mod len].
	tick atomic.Uint64
	_    [56]byte
	// Idle workers park on wake after announcing themselves in sleepers;
	// a push that sees a sleeper leaves a token. Busy workers never touch
	// either.
	sleepers atomic.Int32
	_        [60]byte

	marks     atomic.Int64 // unique-window marks held in every shard
	markSweep atomic.Int64 // marks at which an Add sweeps every shard (see unique.go)

	drained   atomic.Bool
	drainAt   atomic.Int64 // the instant Drain was called: the drain runs what was due by then
	drainOnce sync.Once
	drainCh   chan struct{}

	mu      sync.Mutex // guards cancel, done
	cancel  context.CancelFunc
	done    chan struct{}
	batch   []item[T]          // promotion buffer; s.mu
	events  []queuetype.Event  // events gathered under s.mu, reported after it
	running [runStripes]stripe // claimed jobs, striped so that workers do not share a counter; only the sum means anything
	scanMu  sync.RWMutex       // held by an admin scan while it freezes the rings; a pop that finds its ring frozen waits for it (admin.go)
	slotTab slotTable          // storekit.SlotStore's slots (slots.go)
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
	more    *jobMore  // nil for a job without group, target, max attempts or metadata
	attempt int32
	prio    uint8
	payload T
}

// jobMore is what few jobs set; it is allocated only for a job that sets
// one of them.
type jobMore struct {
	group, target string
	maxAttempts   int
	meta          queuetype.Meta
	held          bool // put back by Hold: ReleaseHeld makes it due (a claim builds a new jobMore)
}

func newMore(group, target string, maxAttempts int, meta queuetype.Meta) *jobMore {
	if group == "" && target == "" && maxAttempts == 0 && meta.IsZero() {
		return nil
	}
	return &jobMore{group: group, target: target, maxAttempts: maxAttempts, meta: meta}
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
	return queuetype.NewOptionError("WithCapacity", n, "the in-memory store holds at most %d ready jobs", MaxCapacity)
}

// MaxCapacity is the largest WithCapacity the in-memory store
// accepts: it allocates each priority's ready queue up front, at twice the
// capacity (about 1 GiB per priority in use at this limit). Durable stores
// have no such limit.
const MaxCapacity = 1 << 23

// New returns an empty in-memory store. queue.New makes one when no
// other store is given; tests and stores that fall back to memory (and wrap
// it) call New themselves.
func New[T any]() *Store[T] {
	s := &Store[T]{keys: newKeySet[T](), sched: newSchedule[T](), drainCh: make(chan struct{}),
		wake: make(chan struct{}, 1)}
	s.markSweep.Store(minMarkSweep)
	return s
}

// Init implements Store. It refuses a second call, with an *OptionError
// naming NewWithStore: a store holds one queue's jobs, so a store value
// passed to two queues' New is refused by the second.
func (s *Store[T]) Init(cfg storekit.Config) error {
	s.mu.Lock() // two queues' New may race for the store
	defer s.mu.Unlock()
	if s.rings != nil {
		return queuetype.NewOptionError("NewWithStore", fmt.Sprintf("%T", s), "the store already belongs to queue %q; a store serves one queue: make one per queue", s.cfg.Name)
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
	s.cycle = storekit.ShareCycle(cfg.Shares())
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
		return queuetype.ErrStarted
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
