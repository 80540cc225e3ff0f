package storekit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/queuekit/queue/queuetype"
)

// ErrDrained is returned by Store.Claim after Store.Drain once there is no
// more work for this process.
var ErrDrained = errors.New("queue: store drained")

// ErrSuperseded is returned by Store.Retry and Store.Defer when a newer
// coalesced job for the same key replaced the job put back. The queue
// counts it as cancelled.
var ErrSuperseded = errors.New("queue: retry superseded by a newer job for the same key")

// Added describes an accepted job.
type Added struct {
	ID        int64 // the job's ID
	Scheduled bool  // the job waits in the schedule
	Coalesced bool  // the job is the rerun of its running key
}

// MaxShare bounds Priority.Share.
const MaxShare = 1000

// Config is what a Store learns from its queue in Init.
type Config struct {
	// Name is the queue's name (WithName), "default" unless set.
	Name string
	// Priorities lists the priority levels, highest first (lowest Weight).
	Priorities []queuetype.Priority
	// DefaultPriority is the label used for Job.Priority == "".
	DefaultPriority string
	// Capacity bounds the ready jobs.
	Capacity int
	// MaxPending bounds the jobs the in-memory store holds (ready,
	// scheduled, coalesced reruns): Add of a new job beyond it returns
	// ErrPendingLimit; jobs put back (Retry, Defer, reruns) are never
	// refused. 0 means no bound. Durable stores ignore it: their jobs live
	// in the database (see WithCapacity's pending bound).
	MaxPending int
	// RequeueDelay is how long a due job waits when its ready queue is
	// full at promotion.
	RequeueDelay time.Duration
	// Coalesce tells whether an Add for a running key becomes its rerun
	// (true) or ErrDuplicate (false).
	Coalesce bool
	// MaxAttempts is the default attempt limit, for stores that
	// dead-letter expired leases.
	MaxAttempts int
	// Clock is the time source; never nil.
	Clock queuetype.Clock
	// Logger receives the store's logs; never nil (it may discard).
	Logger *slog.Logger
	// Report receives the events a store decides on its own: EventRequeued,
	// EventRescued, EventDead (janitor) and EventCancelled (superseded);
	// and, for jobs a store accepts or refuses outside the queue's
	// Enqueue (a batch enqueue of its own), EventEnqueued, EventCoalesced
	// and EventDropped, which the queue counts and observes as Enqueue's.
	// Never nil. It must be called without holding store locks.
	Report func(queuetype.Event)
	// EnqueueHook runs the queue's enqueue hooks (queue.WithEnqueueHook)
	// for a job that a store accepts on an enqueue path of its own (a
	// batch, or an insert in the caller's transaction), so that those
	// jobs carry the same Meta (a trace context, say) as Enqueue's. It is
	// nil when the queue has no hooks. Stores call it through
	// EnqueueHooks and EnqueueHook, before they store anything; an error
	// refuses the job.
	EnqueueHook func(ctx context.Context, job *HookJob) error
}

// RunCanceller is implemented by durable stores through which an operator
// cancels a running job (admin Cancel): the store's Heartbeat returns the
// job's ID among the lost ones, and CancelRequested(id) then reports true,
// so that the queue ends the run as cancelled rather than as a lost
// lease.
type RunCanceller interface {
	// CancelRequested reports whether an operator asked to cancel the
	// running job with ID id.
	CancelRequested(id int64) bool
}

// Stats is a snapshot of a store's contents.
type Stats struct {
	Ready           int            `json:"ready"`             // jobs ready to run
	ReadyByPriority map[string]int `json:"ready_by_priority"` // ready jobs per priority label
	Scheduled       int            `json:"scheduled"`         // jobs waiting for their time (including retries)
	Waiting         int            `json:"waiting"`           // coalesced reruns waiting for their key's running job
	Running         int            `json:"running"`           // jobs claimed and not finished (for durable stores: by any process)
	PendingKeys     int            `json:"pending_keys"`      // keys held by queued, scheduled or running jobs
	Dead            int            `json:"dead"`              // dead-lettered jobs retained (durable stores)
	Backend         string         `json:"backend"`           // "memory", "postgres", "redis"
	Leader          bool           `json:"leader"`            // this process runs the store's maintenance
	Healthy         bool           `json:"healthy"`           // the backend is reachable
	Detail          string         `json:"detail,omitempty"`  // backend-specific state, e.g. "fallback: in-memory"
}

// Weighted reports whether the priorities are weighted (every level has a
// Share) rather than strict.
func (c *Config) Weighted() bool {
	for _, p := range c.Priorities {
		if p.Share <= 0 {
			return false
		}
	}
	return len(c.Priorities) > 0
}

// PriorityIndex returns the index of label in Priorities ("" is the
// default priority), or -1.
func (c *Config) PriorityIndex(label string) int {
	if label == "" {
		label = c.DefaultPriority
	}
	for i := range c.Priorities {
		if c.Priorities[i].Name == label {
			return i
		}
	}
	return -1
}

// UnknownPriority returns the error for a job whose Priority label is
// not one of the levels: it wraps ErrUnknownPriority and names the label
// and the valid ones, so that every store words it alike.
func (c *Config) UnknownPriority(label string) error {
	return fmt.Errorf("%w %q (the queue's priorities: %s)", queuetype.ErrUnknownPriority, label, queuetype.PriorityNames(c.Priorities))
}

// Store is the seam between the queue engine and where jobs live. The
// engine owns workers, outcomes, retries, target health, admission and
// metrics; a Store owns the jobs: the ready queues (strict priority order,
// FIFO within a priority), the schedule, pending keys, coalesced reruns,
// cancellation and, for durable stores, leases.
//
// The in-memory store is the default. The pgstore and redisstore modules
// implement the same contract, which storetest.Run checks. A
// Store value belongs to one Queue.
//
// All methods are safe for concurrent use. Methods that take a Job accept
// the Job exactly as Claim returned it.
type Store[T any] interface {
	// Init binds the store to its queue's configuration. New calls it
	// once, before any other method; an error fails New.
	Init(cfg Config) error

	// Start starts the store's background work: the in-memory
	// scheduler, a durable store's listener, janitor and leader election.
	// Add works before Start; Claim may block until Start.
	Start(ctx context.Context) error

	// Add accepts a job. A job whose RunAt is zero or not after the
	// clock's now is ready at once; a later one is scheduled. Add returns
	// ErrDuplicate when job.Key is queued or scheduled (or running, when
	// coalescing is off) or when job.Group has a scheduled job and job is
	// scheduled; ErrQueueFull when a ready job does not fit in Capacity.
	// When job.Key is running and coalescing is on, the job is kept as
	// the key's single rerun and Added.Coalesced is true. A ctx already
	// done refuses the job with an error matching ctx.Err(); an unknown
	// Priority with Config.UnknownPriority's error. On error nothing
	// is stored.
	Add(ctx context.Context, job queuetype.Job[T]) (Added, error)

	// Claim waits for the next ready job in priority order, marks it
	// running, increments its Attempt, and returns it. It returns
	// ctx.Err() when ctx ends first and ErrDrained once Drain was called
	// and no ready job remains for this process.
	Claim(ctx context.Context) (queuetype.Job[T], error)

	// Complete ends a claimed job as done (or, for a retry past the
	// ceiling, treated as done) and releases its key; a coalesced rerun of
	// the key becomes ready.
	//
	// Complete, Retry, Defer, Dead and CancelClaimed return an error
	// matching ErrLeaseLost when the claim is no longer this run's (its
	// lease expired and the job was rescued): the outcome was not
	// recorded, and the job is the rescue's to finish.
	Complete(ctx context.Context, job queuetype.Job[T]) error

	// Retry schedules a claimed job to run again at at, keeping its key.
	// cause is recorded as the job's last error. If the key has a
	// coalesced rerun waiting, the retry is dropped in favour of the newer
	// job and Retry returns ErrSuperseded.
	Retry(ctx context.Context, job queuetype.Job[T], at time.Time, cause error) error

	// Defer puts a claimed job back to run at at without using up an
	// attempt: for jobs taken before their time, for targets that are
	// suspended or at their concurrency limit, and for a RetryAfter
	// outcome (the downstream's "retry in", not a failure of the job).
	// cause, when not nil, is recorded as the job's last error (the
	// downstream's reason). If the key has a coalesced rerun waiting, the
	// job may be dropped in favour of the newer one, and Defer then
	// returns ErrSuperseded.
	Defer(ctx context.Context, job queuetype.Job[T], at time.Time, cause error) error

	// Dead ends a claimed job as dead-lettered with cause and releases its
	// key (a coalesced rerun becomes ready).
	Dead(ctx context.Context, job queuetype.Job[T], cause error) error

	// Cancel cancels the queued or scheduled job with key, and a
	// coalesced rerun of a running one, so that it never runs. It reports
	// how many jobs it cancelled: usually 0 or 1, but a durable store may
	// hold two for one key (a job rescued while its rerun waits).
	Cancel(ctx context.Context, key string) (int, error)

	// CancelMatch cancels every queued, scheduled or rerun job whose key
	// satisfies match, and reports how many. It may visit every pending
	// key; match must be fast and must not call the queue.
	CancelMatch(ctx context.Context, match func(key string) bool) (int, error)

	// PromoteDue moves scheduled jobs that are due into the ready queues
	// and reports how many it moved. A job that finds its ready queue full
	// is rescheduled RequeueDelay later, never dropped. Stores run it by
	// themselves; tests call it to step a fake clock.
	PromoteDue(ctx context.Context) (int, error)

	// Len returns the number of ready jobs. It is called on hot paths and
	// must be cheap; a durable store may return a recent count.
	Len() int

	// Stats returns a snapshot of the store's contents.
	Stats(ctx context.Context) (Stats, error)

	// Scheduled returns up to n scheduled jobs, earliest first.
	Scheduled(ctx context.Context, n int) ([]queuetype.ScheduledJob, error)

	// Purge removes every ready and scheduled job (and rerun) and their
	// keys, and reports how many it removed. Running jobs are untouched.
	Purge(ctx context.Context) (int, error)

	// Drain tells the store that this process will stop claiming: Claim
	// stops waiting and returns ErrDrained when no ready job remains (the
	// in-memory store) or at once (durable stores, whose backlog other
	// processes share). Drain is idempotent.
	Drain()

	// Close stops the store's background work and waits for it, or for
	// ctx to end. It does not close connections the caller passed in.
	Close(ctx context.Context) error
}

// Leaser is implemented by stores whose claims are leases that expire
// unless renewed: the durable stores. The queue heartbeats the leases of its
// running jobs every HeartbeatInterval and cancels the context of a job
// whose lease was lost.
type Leaser interface {
	// Heartbeat extends the leases of the given running jobs and returns
	// the IDs whose lease this process no longer holds.
	Heartbeat(ctx context.Context, ids []int64) (lost []int64, err error)
	// RescueExpired returns jobs whose lease expired to the ready queue
	// (or dead-letters them after their last attempt) and reports how many
	// it rescued. The leader runs it by itself; tests call it directly.
	RescueExpired(ctx context.Context) (int, error)
	// HeartbeatInterval is how often the queue should call Heartbeat.
	HeartbeatInterval() time.Duration
}

// ClaimCanceller is implemented by stores that keep a cancelled state for
// claimed jobs (a durable store's jobs table). The queue ends a claimed job
// whose target is disabled with CancelClaimed when the store has it, and
// with Complete otherwise; either way the queue counts it as cancelled.
type ClaimCanceller[T any] interface {
	// CancelClaimed ends a claimed job as cancelled with reason and
	// releases its key (a coalesced rerun becomes ready).
	CancelClaimed(ctx context.Context, job queuetype.Job[T], reason error) error
}

// HoldStore is implemented by stores that tell the jobs held back for
// their target from the jobs scheduled on purpose: the in-memory store,
// pgstore and redisstore. A claimed job whose target is suspended, or
// whose circuit breaker is open, goes back to wait for the end of it;
// with a HoldStore the queue puts it back with Hold, and when the target
// is resumed (Queue.Resume, the admin API's ResumeTarget and Enable, or
// any process of the queue doing either, as the store announces it) it
// calls ReleaseHeld, so that the held jobs run at once instead of at the
// end of a suspension that no longer holds. A job scheduled for later,
// or retried after a failure, keeps its time. Without a HoldStore the
// queue uses Defer, and held jobs wait for the suspension's end.
type HoldStore[T any] interface {
	// Hold puts a claimed job back to run at at, as Defer does with no
	// cause (the attempt is given back; ErrSuperseded, ErrLeaseLost), and
	// marks it held for its target until it is claimed again.
	Hold(ctx context.Context, job queuetype.Job[T], at time.Time) error
	// ReleaseHeld makes every job that Hold put back for target and that
	// is not yet due due now, in every process of the queue, and reports
	// how many it moved. A held job keeps its place otherwise: its
	// priority, key and group.
	ReleaseHeld(ctx context.Context, target string) (int, error)
}

// ErrLeaseLost is matched (with errors.Is) by the error a durable store
// returns for the outcome of a run whose claim it no longer holds: the
// lease expired and the job was rescued, to run again or be
// dead-lettered. The queue then counts no outcome for the run (the job's
// outcome is the rescue's) and logs a warning.
var ErrLeaseLost = errors.New("queue: lease lost")

// TargetStore is implemented by stores that share target health and
// fan-out cadence among every process of a queue, and keep them across
// restarts: pgstore and redisstore. The in-memory store does not
// implement it, and a queue on a store without it keeps target health in
// process, as it always has.
//
// The queue never calls a TargetStore on its hot path: Fanout, Due and
// the dispatch of a job read the queue's own view. A change made in this
// process (a suspension, a disabling and its reason, a breaker opening
// or closing, a Resume, a SetNextDue) updates the view at once and is
// written by one background goroutine, batched, with SaveTargets; the
// store tells every process with WatchTargets, and every process also
// reloads the whole state with LoadTargets once a second, which bounds
// the staleness of its view when notifications are lost. See "Fleet
// state" in docs/OPERATIONS.md.
//
// A store's entries are keyed by TargetState's Target and Key; the last
// write of an entry wins. All methods are safe for concurrent use.
type TargetStore interface {
	// LoadTargets returns every entry the store keeps for the queue.
	// Entries whose time has long passed (a next-due time, a suspension)
	// may be left out or pruned.
	LoadTargets(ctx context.Context) ([]TargetState, error)
	// SaveTargets writes the entries, in one round trip where the store
	// can, replacing those with the same Target and Key; an empty entry
	// (TargetState.Empty) is deleted. It then tells every process's
	// WatchTargets function, this one's included.
	SaveTargets(ctx context.Context, states []TargetState) error
	// WatchTargets sets the function the store calls, from its own
	// goroutine and in the order the store applied them, with each entry
	// any process of the queue saves, once Start has run. fn does not
	// block. The queue calls it once, before Start. A store that cannot
	// notify may ignore it: the queue then sees changes at its next
	// reload.
	WatchTargets(fn func(TargetState))
}

// Admitter is implemented by stores whose processes share one admission
// bucket (pgstore, redisstore): with it, Admit's token bucket is one
// bucket for every process of the queue instead of one per process. The
// queue does not ask the store on every Admit: it takes tokens in small
// leases and spends them locally (see Queue.Admit for the bound on
// over-admission). A store without it keeps the bucket in the process.
type Admitter interface {
	// TakeTokens takes up to n tokens (n ≥ 1) from the queue's bucket,
	// which refills at perSecond tokens a second and holds at most burst,
	// atomically and by the store's clock, and reports how many it took,
	// 0..n. When it took none, wait is how long until the bucket holds a
	// token again. A bucket never used is full.
	TakeTokens(ctx context.Context, perSecond float64, burst, n int) (got int, wait time.Duration, err error)
}

// FleetSizer is implemented by stores that several processes share
// (pgstore, redisstore): it reports how many processes of the queue are
// alive, from the presence each started store renews in the store. Under
// ScaleByDepth each process sizes its pool on its share of the depth, the
// ready jobs divided by this count, so that the fleet's workers follow
// the depth instead of each process's.
type FleetSizer interface {
	// Processes returns the number of started processes of the queue, this
	// one included, as last seen: at least 1. It is called by the scaler
	// and must be cheap (a cached count).
	Processes() int
}

// SlotStore is implemented by stores that hold per-target concurrency
// slots for every process of a queue (pgstore, redisstore; the in-memory
// store too, where one process is the whole fleet): with it, a
// WithTargetConcurrency limit of k lets at most k jobs of one target run
// at once across the fleet, not k in each process.
//
// A slot is leased to a holder (an opaque string the queue makes unique)
// for a time-to-live, judged by the store's clock; the queue renews the
// leases it holds every third of the TTL and releases a slot, from a
// goroutine of its own, when its job ends, unless a job of the same
// target in the process takes the slot over first. A process that dies
// holds its slots until their leases expire.
//
// A process that gets no slot waits in the target's line, kept in the
// store: its jobs wait, parked in process, and one of its workers asks
// again when WatchSlots says a slot of the target was released, or after
// half a second. A freed slot goes to the first process in the line, not
// to whoever asks first, and a process that holds slots while another
// waits gives each back as its job ends, rather than to its own next
// parked job, so that the slots go round the waiting processes in the
// order they began to wait. See "Fleet state" in docs/OPERATIONS.md.
//
// The queue uses a SlotStore only under a fixed WithTargetConcurrency
// limit (the fair share is each process's own), and not with the
// in-memory store it makes itself, where the process's own count is
// exact. All methods are safe for concurrent use.
type SlotStore interface {
	// AcquireSlot leases one of req.Target's slots to req.Holder for
	// req.TTL when fewer than req.Limit of them are leased (unexpired)
	// and more are free than processes wait ahead of req.Process in the
	// target's line, atomically. A holder that holds a slot of the
	// target keeps it (its lease renewed). A granted process leaves the
	// line; a refused one takes its place in it, or keeps it, for
	// req.Line, and the refusal is told to every process's WatchSlots
	// function. The answer says whether the slot was granted and how
	// many other processes wait in the line. req.Limit, req.TTL and
	// req.Line must be > 0, req.Waited >= 0, the strings not empty.
	AcquireSlot(ctx context.Context, req SlotRequest) (SlotAnswer, error)
	// RenewSlots extends to ttl from now the leases of target's slots
	// that holders hold, and returns the holders that hold none (their
	// lease expired and the slot went to another holder, or was
	// released).
	RenewSlots(ctx context.Context, target string, holders []string, ttl time.Duration) (lost []string, err error)
	// ReleaseSlot ends holder's lease of a slot of target (nothing
	// happens when it holds none) and, when it held one, tells every
	// process's WatchSlots function. It returns how many processes
	// other than process wait in the target's line.
	ReleaseSlot(ctx context.Context, target, holder, process string) (waiting int, err error)
	// LeaveSlotLine takes process out of target's line, when it is in
	// it: it no longer waits for a slot of the target.
	LeaveSlotLine(ctx context.Context, target, process string) error
	// WatchSlots sets the function the store calls, from its own
	// goroutine, when a process of the queue released a slot of target
	// (waiter is "") or was refused one and waits in target's line
	// (waiter is that process), once Start has run. fn does not block.
	// The queue calls it once, before Start; a store that cannot notify
	// may ignore it.
	WatchSlots(fn func(target, waiter string))
}
