package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/storekit"
)

// Queue is a bounded job queue with a schedule, pending-key dedupe,
// admission control, target health and an autoscaling worker pool. Create
// one with New, call Start, and Enqueue jobs; a Queue is safe for
// concurrent use by any number of goroutines.
type Queue[T any] struct {
	cfg     config
	handler Handler[T]
	store   storekit.Store[T]
	mem     *memstore.Store[T]  // store, when it is the in-memory one: the hot path calls it directly
	leaser  storekit.Leaser     // nil unless the store leases jobs
	fleet   storekit.FleetSizer // nil unless the store counts the queue's processes
	clock   Clock
	log     *slog.Logger
	onDead  atomic.Pointer[[]func(context.Context, Job[T], error)] // OnDead's hooks, copied on write
	admit   *admission
	targets *targets[T]
	obs     *observers
	per     *periodic[T]  // the periodic jobs (Periodic)
	adm     adminState[T] // Admin's state (admin.go)
	jobLog  *slog.Logger  // Logger's base: the host's logger with the queue's name; nil for slog.Default
	mwNames []string      // the middleware's function names (middlewareNames)

	// Written by every Enqueue: kept off the cache lines of the fields
	// above, which every worker reads for every job.
	_     [64]byte
	state atomic.Int32 // lifecycle state
	// A durable store's Enqueue calls hold a read lock from the state
	// check until the store answers; the stop takes the write lock (and
	// keeps it) before it drains the store, so the drain sees every
	// accepted job. Enqueue only tries the read lock: a stop that holds or
	// waits for the write lock has begun, and Enqueue returns ErrClosed.
	inflight sync.RWMutex
	ctr      counters
	_        [64]byte
	// startMu serialises Start, and is held across Store.Start (which may
	// dial a server) so that q.mu, which Stats takes, is not; the stop
	// takes it before it drains and closes the store, so a Start under
	// way finishes first.
	deadMu   sync.Mutex  // serialises OnDead registrations
	held     heldRelease // ReleaseHeld calls under way (held.go)
	startMu  sync.Mutex
	mu       sync.Mutex // guards the fields below and the pool
	runCtx   context.Context
	bgCtx    context.Context    // runCtx's values without its cancellation: for store writes that must outlive Shutdown
	runStop  context.CancelFunc // cancels running jobs (Shutdown)
	bgStop   context.CancelFunc // stops the scaler, heartbeats and fleet sync
	pool     pool[T]
	gate     gateState // SetConcurrency, WithClaimGate (gate.go)
	done     chan struct{}
	stopping chan struct{} // closed when Stop or Shutdown begins
	stopOnce sync.Once
	stopFrom int32 // the state the stop began in; written once, under stopOnce
	closeErr error
}

const (
	stateNew int32 = iota
	stateRunning
	stateStopping
	stateStopped
)

// New returns a queue that runs handler for each job and keeps its jobs
// in memory. It validates every option and returns an *OptionError naming
// the first bad one. Nothing runs until Start; jobs may be enqueued before
// it.
func New[T any](handler Handler[T], opts ...Option) (*Queue[T], error) {
	return newQueue(memstore.New[T](), "New", handler, opts)
}

// NewWithStore is New with the jobs kept in store, such as a pgstore or
// redisstore Store. The store's payload type is the queue's, so a
// mismatch does not compile. The store must not be shared with another
// Queue; New calls its Init, and Stop and Shutdown close it.
func NewWithStore[T any](store storekit.Store[T], handler Handler[T], opts ...Option) (*Queue[T], error) {
	if store == nil {
		return nil, errors.New("queue: NewWithStore: the store is nil")
	}
	return newQueue(store, "NewWithStore", handler, opts)
}

func newQueue[T any](store storekit.Store[T], fn string, handler Handler[T], opts []Option) (*Queue[T], error) {
	if handler == nil {
		return nil, errors.New("queue: " + fn + ": the handler is nil")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.clock == nil {
		cfg.clock = systemClock{}
	}
	var jobLog *slog.Logger
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler) // quiet, at no cost
	} else {
		jobLog = cfg.logger.With("queue", cfg.name)
	}
	q := &Queue[T]{
		cfg:      cfg,
		handler:  handler,
		clock:    cfg.clock,
		log:      cfg.logger.With("queue", cfg.name),
		admit:    newAdmission(cfg.admission),
		done:     make(chan struct{}),
		stopping: make(chan struct{}),
		jobLog:   jobLog,
		mwNames:  middlewareNames(cfg.middleware),
	}
	q.gate.init(cfg.claimGate, cfg.maxWorkers)
	q.targets = newTargets[T](cfg.targets, cfg.clock, q.targetEvent)
	q.targets.onFreed = q.releaseHeld
	q.per = newPeriodic(q)
	q.targets.bindFleet(store, q.log)
	q.store = store
	q.leaser, _ = q.store.(storekit.Leaser)
	_, mem := q.store.(*memstore.Store[T])
	q.targets.bindSlots(store, mem, q.leaser)
	q.adm.used.Store(cancelsRuns(store)) // see cancelsRuns
	q.joinFleet()
	q.mem, _ = q.store.(*memstore.Store[T])
	obs, err := newObservers(q, cfg.metrics)
	if err != nil {
		return nil, err
	}
	q.obs = obs
	var hook func(context.Context, *storekit.HookJob) error
	if len(cfg.enqueueHooks) > 0 {
		hook = q.storeEnqueueHook
	}
	err = q.store.Init(storekit.Config{
		Name:            cfg.name,
		Priorities:      cfg.priorities,
		DefaultPriority: cfg.defaultPriority,
		Capacity:        cfg.capacity,
		MaxPending:      cfg.maxPending,
		RequeueDelay:    cfg.requeueDelay,
		Coalesce:        cfg.coalesce,
		MaxAttempts:     cfg.maxAttempts,
		Clock:           cfg.clock,
		Logger:          q.log,
		Report:          q.storeEvent,
		EnqueueHook:     hook,
	})
	if err != nil {
		obs.unregister()
		var oe *OptionError
		if errors.As(err, &oe) {
			return nil, err // it reads "queue: invalid option ..." already
		}
		return nil, fmt.Errorf("queue: store: %w", err)
	}
	return q, nil
}

// Start starts the workers, the scaler and the store's background work,
// and returns at once. The contexts handlers receive carry ctx's values.
//
// Cancelling ctx is a hard shutdown, the same as calling
// Shutdown(context.Background()), whether or not a Stop has begun (a Stop
// still draining is cut short): Enqueue returns ErrClosed, the running
// handlers' contexts are cancelled and their jobs put back without using
// an attempt, ready and scheduled jobs are not run (the in-memory store's
// are lost when the process exits; a durable store keeps them), and Done
// is closed once the handlers have returned. So a program that should
// drain on SIGINT or SIGTERM passes Start a context no signal cancels
// (context.Background()), waits for the signal, and then calls Stop with
// a timeout, and Shutdown if that expires; see the example
// "ShutdownOnSignal".
//
// Start returns ErrStarted if called twice (the second call changes
// nothing) and ErrClosed after Stop or Shutdown, even one called before
// Start or while Start was starting the store (the stop then closes the
// store; no worker starts). An error from the store's Start is returned
// wrapped, and the queue is not started. A nil ctx panics.
func (q *Queue[T]) Start(ctx context.Context) error {
	if ctx == nil {
		panic("queue: Start: nil context")
	}
	q.startMu.Lock()
	defer q.startMu.Unlock()
	switch q.state.Load() {
	case stateRunning:
		return ErrStarted
	case stateStopping, stateStopped:
		return ErrClosed
	}
	if err := q.store.Start(ctx); err != nil {
		return fmt.Errorf("queue: starting store: %w", err)
	}
	q.targets.loadFleet(ctx) // the stored health, before any job runs
	q.mu.Lock()
	defer q.mu.Unlock()
	base := context.WithoutCancel(ctx)
	q.bgCtx = base
	q.runCtx, q.runStop = context.WithCancel(base)
	var bg context.Context
	bg, q.bgStop = context.WithCancel(base)
	if !q.state.CompareAndSwap(stateNew, stateRunning) {
		// Stop or Shutdown began while the store was starting: the stop,
		// which waits for startMu before it closes the store, finishes it.
		return ErrClosed
	}
	q.pool.init(q)
	for range q.cfg.baseWorkers {
		q.pool.add()
	}
	go q.scaler(bg)
	q.per.start()
	if q.leaser != nil {
		go q.heartbeats(bg)
	}
	if q.targets.slots != nil {
		q.targets.slots.started.Store(true)
		go q.slotLoop(bg)
	}
	q.targets.startFleet(bg)
	go func() {
		// Until the queue is done, not only until a stop begins: a Stop
		// whose own ctx ended leaves the queue draining, and cancelling
		// ctx must still interrupt its jobs.
		select {
		case <-ctx.Done():
			_ = q.Shutdown(context.Background())
		case <-q.done:
		}
	}()
	return nil
}

// Enqueue adds job without blocking. A job whose RunAt is after now is
// scheduled; otherwise it joins the ready queue of its priority. It returns
// ErrQueueFull when the ready queue is at capacity (counted as
// dropped_full), ErrPendingLimit when the queue holds WithCapacity's pending bound of jobs
// (counted as dropped_limit; it matches ErrQueueFull too), a
// *DuplicateError (matching ErrDuplicate, naming the key
// or group) when job.Key is already pending (see WithCoalesce for running
// keys) or job.Group has a scheduled job, an error wrapping
// ErrUnknownPriority for an unknown label, an error wrapping
// ErrInvalidJob for a negative MaxAttempts, a caller-set ID or Attempt, or
// a negative UniqueFor or one without a Key, and ErrClosed once Stop or
// Shutdown has begun. A ctx already done refuses the job on every store,
// with an error matching ctx.Err(), before anything else is looked at. On
// error nothing was stored. A job with a UniqueFor
// window is also refused with a *DuplicateError while an earlier job's
// window on its Key is open, whether that job is pending, running or
// ended: see the package documentation's Dedupe section.
//
// ID and Attempt belong to the queue: a handler that enqueues the Job it
// received as a new job clears them first. (A caller-set ID is refused
// rather than ignored: it does not deduplicate, as asynq's TaskID does;
// Key does.)
//
// Jobs enqueued before Start run once the queue starts. A job accepted by
// Enqueue is never dropped without being counted. An Enqueue that races
// Stop either returns ErrClosed or is accepted, and then an accepted ready
// job runs before Stop returns.
//
// A handler may call Enqueue on its own queue: it never blocks, so a full
// queue returns ErrQueueFull at once. The payload is never inspected, so a
// nil pointer is a valid payload. Keys are stored and compared whole: any
// length works (a 1 MiB key included), but a key costs its length for as
// long as its job is pending, and Stats, the /stats page, logs and the
// recent-error ring show it in full; prefer short keys (a hash).
func (q *Queue[T]) Enqueue(ctx context.Context, job Job[T]) error {
	return q.enqueue(ctx, &job, false)
}

// enqueue is Enqueue; future says the caller has just computed job.RunAt
// as now plus a positive delay, so the in-memory store need not read the
// clock again to know the job is scheduled (a clock reading is a third of
// the cost of scheduling a job).
func (q *Queue[T]) enqueue(ctx context.Context, job *Job[T], future bool) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("queue: Enqueue: %w", err)
	}
	if len(q.cfg.enqueueHooks) > 0 {
		if err := q.enqueueHooks(ctx, job); err != nil {
			return err
		}
	}
	if q.mem == nil {
		// The in-memory store needs no guard: its Drain closes the ready
		// rings to new jobs, which orders every Enqueue before or after it.
		if !q.inflight.TryRLock() {
			return ErrClosed
		}
		defer q.inflight.RUnlock()
	}
	if q.state.Load() >= stateStopping {
		return ErrClosed
	}
	if p := q.targets.parked.Load(); p > 0 && !future && q.store.Len()+int(p) >= q.cfg.capacity &&
		(job.RunAt.IsZero() || !job.RunAt.After(q.clock.Now())) {
		// Jobs parked for a busy target's slot wait to run as ready jobs
		// do, and count against the capacity as they do.
		q.ctr.dropped.Add(1)
		q.emit(EventDropped, job, nil, 0)
		return ErrQueueFull
	}
	if job.ID != 0 || job.Attempt != 0 || job.MaxAttempts < 0 || (job.UniqueFor != 0 && (job.UniqueFor < 0 || job.Key == "")) ||
		(job.Target != "" && storekit.TargetProblem(job.Target) != "") || (!job.Meta.IsZero() && job.Meta.Check() != nil) {
		return invalidJob(job)
	}
	if job.RunAt.IsZero() && q.obs.prom != nil && q.obs.sample() {
		job.RunAt = q.clock.Now() // lets the wait-time histogram see this job
	}
	var (
		added storekit.Added
		err   error
	)
	if q.mem != nil {
		added, err = q.mem.AddJob(job, future, int(q.targets.parked.Load()))
	} else {
		added, err = q.store.Add(ctx, *job)
	}
	if err != nil {
		if err == ErrPendingLimit {
			q.ctr.droppedLimit.Add(1)
			q.emit(EventDropped, job, err, 0)
		} else if errors.Is(err, ErrQueueFull) {
			q.ctr.dropped.Add(1)
			q.emit(EventDropped, job, nil, 0)
		}
		if err == ErrDuplicate {
			// A store that does not say what the job collided on (the
			// in-memory one does, without allocating).
			err = &DuplicateError{Key: job.Key}
			if job.Group != "" && !job.RunAt.IsZero() {
				err = &DuplicateError{Key: job.Key, Group: job.Group}
			}
		}
		return err
	}
	q.ctr.enqueued.Add(1)
	if q.obs.active {
		job.ID = added.ID
		kind := EventEnqueued
		if added.Coalesced {
			kind = EventCoalesced
		}
		q.emit(kind, job, nil, 0)
	}
	if added.Coalesced {
		q.ctr.coalesced.Add(1)
	}
	return nil
}

// Purge removes every queued and scheduled job, counting each as
// cancelled, and reports how many. Running jobs are not touched. It is
// meant for test isolation.
func (q *Queue[T]) Purge(ctx context.Context) (int, error) {
	n, err := q.store.Purge(ctx)
	n += q.cancelParked(func(string) bool { return true }, true)
	q.cancelled(n, "")
	return n, err
}

// depth is the number of jobs waiting to run: the store's ready jobs and
// those parked for a target's slot. Fill, the admission limiter, the
// throttle and the scaler use it.
func (q *Queue[T]) depth() int { return q.store.Len() + int(q.targets.parked.Load()) }

// Stop stops accepting jobs (Enqueue returns ErrClosed), lets the workers
// finish the ready jobs (the in-memory store) or their running jobs
// (durable stores, whose backlog other processes share), and returns when
// they are done. Ready jobs include coalesced reruns released while Stop
// drains. Scheduled jobs are kept, not run, and so is a rerun or due job
// that found the ready queue full and waits WithRequeueDelay; so are the
// retries the drain's own runs ask for (a failure's backoff, RetryAfter),
// and scheduled jobs that come due while it runs: the drain runs what was
// ready when it began, so that handlers that keep asking to run again
// cannot keep Stop from returning. If ctx ends
// first, Stop returns ctx.Err() — a *StuckError listing the running jobs
// if there are any — and the queue keeps draining; calling Stop or
// Shutdown again, from any goroutine, waits again, and returns nil once
// the queue has stopped. Stop before Start closes the queue at once; jobs
// enqueued before it stay in the store. A handler that calls Stop waits
// for itself: Stop returns only when its ctx ends, and the queue stops
// after the handler returns. Stop lifts SetConcurrency's limit and
// WithClaimGate's gate (the gate's ctx ends): the drain runs on the
// whole pool, and neither can keep the queue from stopping. It lifts a
// pause of the admin API (Admin().Pause) in the same way, for this
// process: the in-memory store's drain runs its ready jobs, which would
// otherwise be lost with the process; a durable store's jobs stay ready
// in it, and the pause stays for the other processes.
func (q *Queue[T]) Stop(ctx context.Context) error {
	q.begin(false)
	return q.wait(ctx)
}

// Shutdown stops accepting jobs, cancels the contexts of running jobs and
// waits for their handlers to return. Ready and scheduled jobs stay in the
// store; a job interrupted by Shutdown is put back without using up an
// attempt. If ctx ends first — a handler that ignores its context never
// returns — Shutdown returns a *StuckError listing the jobs whose handlers
// have not returned; it matches ctx.Err() with errors.Is. The queue then
// stops (and Done is closed) when the last of them returns. Like Stop, it
// lifts SetConcurrency's limit and WithClaimGate's gate: workers waiting
// at either exit without claiming.
func (q *Queue[T]) Shutdown(ctx context.Context) error {
	q.begin(true)
	return q.wait(ctx)
}

// Done returns a channel closed when the queue has stopped.
func (q *Queue[T]) Done() <-chan struct{} { return q.done }

// begin moves the queue into stopping once; cancel also interrupts jobs.
// It never blocks on the store: waiting for Enqueue calls still in a
// durable store, the drain and the close run in the background, so that
// Stop and Shutdown can return when their ctx ends.
func (q *Queue[T]) begin(cancel bool) {
	q.stopOnce.Do(func() {
		prev := q.state.Swap(stateStopping)
		q.stopFrom = prev
		if cancel && prev == stateRunning {
			// Retire the workers before the drain, so that a worker that
			// sees the store drained also sees its context cancelled:
			// otherwise it could promote the jobs Shutdown is about to put
			// back, as if Stop were running them. (The scaler adds no
			// worker once the state is stopping.)
			q.mu.Lock()
			q.pool.retireAll()
			q.mu.Unlock()
		}
		close(q.stopping)
		// Lift the concurrency limit and the claim gate: workers waiting
		// at either see stopping closed, or their gate's ctx end, and go
		// on to drain (Stop) or exit (Shutdown).
		q.mu.Lock()
		q.liftGateLocked()
		q.mu.Unlock()
		// Drain now if nothing stands in the way, so that jobs Shutdown
		// interrupts below are put back into a store that no longer
		// promotes or hands out work (they stay scheduled, instead of
		// going round again). Otherwise the drain waits in the background
		// and the interrupt does not wait for it.
		drained := prev == stateRunning && q.inflight.TryLock()
		if drained {
			q.store.Drain()
		}
		go func() {
			if !drained {
				// startMu first: a Start inside Store.Start finishes
				// (it then sees the stop and starts nothing) before the
				// drain. Then the inflight write lock, taken under
				// startMu so that no Start can slip between the two:
				// Enqueue calls that passed the state check reach the
				// store, so the drain sees every accepted job.
				q.startMu.Lock()
				q.inflight.Lock()
				q.startMu.Unlock()
				q.store.Drain()
			}
			if prev == stateRunning {
				q.pool.wait()
			}
			q.finishStop()
		}()
	})
	if !cancel {
		return
	}
	// Interrupt the running jobs, on every Shutdown call: one that follows
	// a Stop still has work to do. Jobs interrupted are put back into the
	// store; the workers are retired first, so none claims them again.
	// A queue stopped before it ran has no jobs to interrupt.
	if q.stopFrom != stateRunning {
		return
	}
	q.mu.Lock()
	q.pool.retireAll()
	q.runStop()
	q.mu.Unlock()
}

func (q *Queue[T]) finishStop() {
	q.per.wait() // its loop returns when the stop begins
	q.mu.Lock()
	if q.bgStop != nil {
		q.bgStop()
	}
	q.mu.Unlock()
	q.targets.stopFleet() // its last writes go before the store closes
	q.targets.stopSlots() // and its last releases
	q.held.stop()         // and the held jobs' releases
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	q.closeErr = q.store.Close(ctx)
	cancel()
	q.obs.unregister()
	q.state.Store(stateStopped)
	close(q.done)
}

func (q *Queue[T]) wait(ctx context.Context) error {
	select {
	case <-q.done:
		return q.closeErr
	case <-ctx.Done():
		if stuck := q.pool.runningIDs(); len(stuck) > 0 {
			return &StuckError{JobIDs: stuck, Err: ctx.Err()}
		}
		return ctx.Err()
	}
}

// storeEvent counts and forwards events a store decided on its own.
func (q *Queue[T]) storeEvent(ev Event) {
	switch ev.Kind {
	case EventEnqueued, EventCoalesced, EventDropped: // a store's own batch enqueue
		q.countStoreEnqueue(ev.Kind)
	case EventRequeued:
		q.ctr.requeued.Add(1)
	case EventRescued:
		q.ctr.rescued.Add(1)
	case EventDead:
		q.ctr.dead.Add(1)
	case EventCancelled:
		q.ctr.cancelled.Add(1)
	}
	if ev.Time.IsZero() && (q.obs.active || ev.Kind == EventDead) {
		ev.Time = q.clock.Now()
	}
	if q.obs.active {
		q.obs.send(ev)
	}
	var de *DecodeError
	if ev.Kind == EventDead && errors.As(ev.Err, &de) {
		q.deadUndecodable(ev)
	}
}

// deadUndecodable ends, as kill ends the jobs the queue dead-letters, a
// job that its durable store dead-lettered on claiming it because its
// payload does not decode (ev, with a *DecodeError): the error goes into
// RecentErrors and the OnDead hooks get the job without its payload
// (storeEvent has counted it and sent EventDead). The hooks' context is
// a background one: a store may claim, and report, before Start has set
// the queue's own.
func (q *Queue[T]) deadUndecodable(ev Event) {
	job := Job[T]{ID: ev.JobID, Key: ev.Key, Target: ev.Target, Priority: ev.Priority, Attempt: ev.Attempt}
	q.obs.recordError(job.ID, job.Key, job.Target, job.Attempt, ev.Err, ev.Time)
	q.callOnDead(context.Background(), &job, ev.Err)
}

var (
	errTargetDisabled = errors.New("queue: target disabled")
	errCancelled      = errors.New("queue: cancelled")
)
