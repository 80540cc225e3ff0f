package queue

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/queuekit/queue/storekit"
)

// JobInfo is what a Middleware or an enqueue hook sees of a job: its
// routing fields and metadata, without the payload (whose type they do
// not know).
//
// The queue reuses a worker's JobInfo, and its LogAttrs' backing array,
// from one run to the next: a Middleware must not keep the pointer, or
// the slice, after it returns.
type JobInfo struct {
	Queue    string    // the queue's name (WithName)
	ID       int64     // the job's ID; 0 in an enqueue hook (not assigned yet)
	Key      string    // the pending key
	Group    string    // the schedule group
	Target   string    // the downstream the job calls
	Priority string    // the priority label, "" resolved to the queue's default
	RunAt    time.Time // when the job became, or becomes, due; zero means at once
	// Attempt is the run's attempt, from 1; 0 in an enqueue hook.
	Attempt int
	// MaxAttempts is the job's attempt limit: its own, or the queue's
	// default (WithRetry) when it sets none.
	MaxAttempts int
	// Meta is the job's metadata. An enqueue hook may change it: the job
	// is stored with the hook's Meta. A Middleware's changes are ignored.
	Meta Meta

	// Err, Outcome and RetryIn are set when a Middleware's next returns.

	// Err is what the handler returned: a *PanicError for a recovered
	// panic, nil for a success.
	Err error
	// Outcome is EventDone, EventRetried, EventDead, EventCancelled (the
	// admin API cancelled the run) or EventDeferred (Shutdown interrupted
	// the run: the job is put back without using an attempt). It is what
	// the queue is about to record: the store may still decide otherwise
	// (a retry superseded by a newer job of the same key ends cancelled).
	Outcome EventKind
	// RetryIn is, with EventRetried, the delay before the next attempt.
	RetryIn time.Duration

	// LogAttrs are added to the logger that Logger returns in the
	// handler (and in later middleware): a Middleware may append to it,
	// e.g. trace_id and span_id, before it calls next.
	LogAttrs []slog.Attr
}

// Middleware wraps every run of a job. It must call next exactly once,
// and may pass next a derived ctx (carrying a span, say); the handler's
// ctx derives from it. A Middleware that returns without calling next
// fails the run with an error naming it, retried like any error (the
// handler does not run); a second call of next does nothing and is
// logged.
//
// When next returns, the run's result has been classified (job.Err,
// job.Outcome, job.RetryIn) but not yet written to the store: a
// Middleware cannot change the outcome (to change errors, wrap the
// Handler). A panic in a Middleware is recovered: before next was called
// it fails the run as a handler's panic does (a *PanicError); after next
// returned, the run's outcome stands and the panic is logged.
//
// A Middleware runs on the worker, as the handler does: a slow one slows
// every run.
type Middleware func(ctx context.Context, job *JobInfo, next func(context.Context))

// WithMiddleware adds middleware around every run of a job (default
// none). The first given is the outermost; several WithMiddleware options
// append in order. The order around a run is: middleware, then the job's
// timeout (WithJobTimeout) and lease context, then the handler. A nil
// Middleware is refused.
//
// With no middleware a run costs nothing more.
func WithMiddleware(mw ...Middleware) Option {
	return func(c *config) error {
		for i, m := range mw {
			if m == nil {
				return optErr("WithMiddleware", fmt.Sprintf("argument %d", i), "the middleware is nil")
			}
		}
		c.middleware = append(c.middleware, mw...)
		return nil
	}
}

// WithEnqueueHook adds hook, called by Enqueue, EnqueueAt and EnqueueIn
// (and so by the periodic loop) with the caller's ctx before the job is
// validated and stored. The hook may change job.Meta (to inject a trace
// context, say): the job is stored with it; changes to the other fields
// are ignored; the hook must not keep job after it returns (the queue
// reuses it). An error refuses the Enqueue with that error wrapped, and
// nothing is stored; a panic in the hook is recovered and refuses it as
// an error. Several hooks run in the order given, each seeing the Meta
// the one before left. A nil hook is refused.
//
// The hooks run on the goroutine that calls Enqueue, for each call. Jobs
// that a durable store enqueues on a path of its own (pgstore's and
// sqlitestore's EnqueueTx, every store's EnqueueMany) pass through them
// too, with that call's ctx, before the store writes any of them
// (storekit.Config.EnqueueHook): a refusal there refuses the whole call.
func WithEnqueueHook(hook func(ctx context.Context, job *JobInfo) error) Option {
	return func(c *config) error {
		if hook == nil {
			return optErr("WithEnqueueHook", "nil", "the hook is nil")
		}
		c.enqueueHooks = append(c.enqueueHooks, hook)
		return nil
	}
}

// Logger returns the logger for the job whose handler (or Middleware)
// ctx is ctx: the queue's (WithLogger; the default slog logger if none
// was given) with the attributes queue, job_id, key (when set), attempt,
// target (when set) and the run's JobInfo.LogAttrs. Outside a run it
// returns the default slog logger (slog.Default). Call it while the run
// lasts: from a goroutine that outlives the handler it may describe the
// worker's next job.
func Logger(ctx context.Context) *slog.Logger {
	if ctx != nil {
		if s, ok := ctx.Value(runSlotKey{}).(runLogger); ok {
			if l := s.logger(); l != nil {
				return l
			}
		}
	}
	return slog.Default()
}

// runSlotKey is the context key of a worker's runSlot.
type runSlotKey struct{}

// runLogger is what Logger finds in a run's context: a worker's runSlot,
// whatever the queue's payload type.
type runLogger interface {
	logger() *slog.Logger
}

// runSlot is the value a worker's long-lived context carries (workerRun's
// base): Logger finds the worker's running job through it, without a
// context.WithValue per run.
type runSlot[T any] struct {
	q *Queue[T]
	w *worker[T]
}

func (s *runSlot[T]) logger() *slog.Logger {
	if s.w.running() == 0 {
		return nil // between runs
	}
	job := s.w.run.job
	base, n := s.q.jobLog, 5
	m := s.w.run.mw
	if m != nil {
		n += len(m.info.LogAttrs)
	}
	attrs := make([]slog.Attr, 0, n) // attributes, not With's ...any: no boxing
	if base == nil {                 // no WithLogger: the default logger, as it is now
		base = slog.Default()
		attrs = append(attrs, slog.String("queue", s.q.cfg.name))
	}
	attrs = append(attrs, slog.Int64("job_id", job.ID))
	if job.Key != "" {
		attrs = append(attrs, slog.String("key", job.Key))
	}
	attrs = append(attrs, slog.Int("attempt", job.Attempt))
	if job.Target != "" {
		attrs = append(attrs, slog.String("target", job.Target))
	}
	if m != nil {
		attrs = append(attrs, m.info.LogAttrs...)
	}
	return slog.New(base.Handler().WithAttrs(attrs))
}

// newRunBase returns w's long-lived run context: the queue's run context
// with w's runSlot, from which every run of w derives.
func (q *Queue[T]) newRunBase(w *worker[T]) context.Context {
	return context.WithValue(q.runCtx, runSlotKey{}, &runSlot[T]{q: q, w: w})
}

// mwRun is a worker's middleware chain and the state of its current run,
// made once per worker when the queue has middleware: a run allocates
// nothing for it.
type mwRun[T any] struct {
	info  JobInfo
	nexts []func(context.Context) // nexts[i] is the next that middleware i is given
	job   *Job[T]
	// The run's state, reset by runWrapped.
	depth    int  // the innermost middleware called so far
	ended    bool // the run's result is classified (endInner)
	timed    bool // the run is timed for the metrics and observers
	sampled  bool // the run is timed for admin.RunTimes
	periodic bool
	cut      bool // the admin API cancelled the run
	start    time.Time
	took     time.Duration
	v        verdict
}

// newMW builds w's middleware chain.
func (q *Queue[T]) newMW(w *worker[T]) *mwRun[T] {
	mws := q.cfg.middleware
	m := &mwRun[T]{nexts: make([]func(context.Context), len(mws))}
	last := len(mws) - 1
	m.nexts[last] = func(ctx context.Context) { q.runInner(w, m, ctx) }
	for i := last - 1; i >= 0; i-- {
		mw, next, depth := mws[i+1], m.nexts[i+1], i+1
		m.nexts[i] = func(ctx context.Context) {
			m.depth = depth
			mw(ctx, &m.info, next)
			if !m.ended {
				// The outer middleware sees the outcome of a run that
				// this one did not let reach the handler.
				q.endInner(w, m, q.skippedNext(depth))
			}
		}
	}
	return m
}

// runWrapped is run's tail for a queue with middleware: it runs the
// chain, whose innermost next runs the handler and classifies its result
// (runInner), and then records the outcome. The run is published
// (worker.cur) and ctx is the run's parent context.
func (q *Queue[T]) runWrapped(w *worker[T], ctx context.Context, job *Job[T], start time.Time, timed, sampled, periodic bool) {
	m := w.run.mw
	prio := job.Priority
	if prio == "" {
		prio = q.cfg.defaultPriority
	}
	clear(m.info.LogAttrs) // keeps no attribute of the last run alive
	m.info = JobInfo{Queue: q.cfg.name, ID: job.ID, Key: job.Key, Group: job.Group, Target: job.Target,
		Priority: prio, RunAt: job.RunAt, Attempt: job.Attempt, MaxAttempts: maxAttempts(job, q.cfg.maxAttempts),
		Meta: job.Meta, LogAttrs: m.info.LogAttrs[:0]}
	m.job, m.depth, m.ended, m.cut, m.took, m.v = job, 0, false, false, 0, verdict{}
	m.start, m.timed, m.sampled, m.periodic = start, timed, sampled, periodic
	pe := q.callChain(ctx, m)
	if !m.ended {
		err := error(pe)
		if pe == nil {
			err = q.skippedNext(0)
		}
		q.endInner(w, m, err)
	} else if pe != nil {
		q.log.Error("middleware panicked after its next returned; the run's outcome stands",
			"job", job.ID, "key", job.Key, "panic", pe.Value, "stack", string(pe.Stack))
	}
	m.info.Meta = Meta{}
	m.job = nil
	if m.cut {
		q.endCut(w, job)
		return
	}
	if periodic {
		q.per.finishRun(w, job, &m.v, m.took)
	} else {
		q.finishRun(w, job, &m.v, m.took)
	}
}

// callChain calls the outermost middleware, recovering a panic.
func (q *Queue[T]) callChain(ctx context.Context, m *mwRun[T]) (pe *PanicError) {
	defer func() {
		if v := recover(); v != nil {
			pe = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	q.cfg.middleware[0](ctx, &m.info, m.nexts[0])
	return nil
}

// runInner is the innermost next: the job's timeout and lease context
// around the handler, whose result it classifies into m.
func (q *Queue[T]) runInner(w *worker[T], m *mwRun[T], ctx context.Context) {
	job := m.job
	if m.ended || job == nil {
		q.log.Error("middleware called next more than once, or after its run ended; ignored",
			"middleware", q.mwNames[m.depth])
		return
	}
	ctx, cancel := q.jobCtx(w, ctx)
	if cancel != nil {
		defer cancel()
	}
	err := q.call(ctx, job)
	if m.timed || m.sampled {
		w.ended = q.clock.Now()
		took := max(w.ended.Sub(m.start), 1)
		if m.sampled {
			w.run.timed(took)
		}
		if m.timed {
			m.took = took
		}
	}
	q.endInner(w, m, err)
}

// endInner ends the run, as run does after the handler returns, and
// classifies err into m.v and m.info.
func (q *Queue[T]) endInner(w *worker[T], m *mwRun[T], err error) {
	m.ended = true
	m.cut = q.endRun(w, m.job.ID)
	if q.leaser != nil {
		w.lost.Store(nil)
	}
	m.info.Err = err
	if m.cut {
		m.info.Outcome = EventCancelled
		return
	}
	m.v = q.decide(w, m.job, err)
	m.info.Outcome, m.info.RetryIn = m.v.kind, m.v.in
}

// jobCtx derives the handler's context from ctx: the job timeout
// (WithJobTimeout), and a cancel a lost lease calls. cancel is nil when
// ctx is returned as it is.
func (q *Queue[T]) jobCtx(w *worker[T], ctx context.Context) (context.Context, context.CancelFunc) {
	var cancel context.CancelFunc
	if q.cfg.jobTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, q.cfg.jobTimeout)
	} else if q.leaser != nil {
		ctx, cancel = context.WithCancel(ctx)
	}
	if cancel != nil && q.leaser != nil {
		c := cancel // only this copy escapes, and only with a leaser
		w.lost.Store(&c)
	}
	return ctx, cancel
}

// skippedNext is the error of a run whose middleware i returned without
// calling next.
func (q *Queue[T]) skippedNext(i int) error {
	return fmt.Errorf("queue: middleware %d (%s) returned without calling next", i, q.mwNames[i])
}

// middlewareNames names each middleware by its function, for the error
// of one that does not call next.
func middlewareNames(mws []Middleware) []string {
	names := make([]string, len(mws))
	for i, m := range mws {
		names[i] = "unnamed"
		if f := runtime.FuncForPC(reflect.ValueOf(m).Pointer()); f != nil {
			names[i] = f.Name()
		}
	}
	return names
}

// hookInfos recycles the JobInfo an enqueue hook is given: a hook's
// JobInfo escapes (the hook is a func value), and would otherwise cost an
// allocation per Enqueue.
var hookInfos = sync.Pool{New: func() any { return new(JobInfo) }}

// enqueueHooks runs the WithEnqueueHook hooks for job, and stores the
// Meta they leave in job.
func (q *Queue[T]) enqueueHooks(ctx context.Context, job *Job[T]) error {
	h := storekit.HookJob{Key: job.Key, Group: job.Group, Target: job.Target, Priority: job.Priority,
		RunAt: job.RunAt, MaxAttempts: job.MaxAttempts, Meta: job.Meta}
	if err := q.runEnqueueHooks(ctx, &h); err != nil {
		return fmt.Errorf("queue: Enqueue: %w", err)
	}
	job.Meta = h.Meta
	return nil
}

// storeEnqueueHook is the store's storekit.Config.EnqueueHook: the
// WithEnqueueHook hooks for a job that a durable store enqueues on a path
// of its own (a batch, a transactional insert).
func (q *Queue[T]) storeEnqueueHook(ctx context.Context, job *storekit.HookJob) error {
	if err := q.runEnqueueHooks(ctx, job); err != nil {
		return fmt.Errorf("queue: %w", err)
	}
	return nil
}

// runEnqueueHooks runs the WithEnqueueHook hooks, in order, for job and
// leaves the Meta they set in job.Meta.
func (q *Queue[T]) runEnqueueHooks(ctx context.Context, job *storekit.HookJob) (err error) {
	prio := job.Priority
	if prio == "" {
		prio = q.cfg.defaultPriority
	}
	attempts := job.MaxAttempts
	if attempts <= 0 {
		attempts = q.cfg.maxAttempts
	}
	info := hookInfos.Get().(*JobInfo)
	*info = JobInfo{Queue: q.cfg.name, Key: job.Key, Group: job.Group, Target: job.Target, Priority: prio,
		RunAt: job.RunAt, MaxAttempts: attempts, Meta: job.Meta}
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("enqueue hook panicked: %v", v)
		}
		*info = JobInfo{}
		hookInfos.Put(info)
	}()
	for i, h := range q.cfg.enqueueHooks {
		if err := h(ctx, info); err != nil {
			return fmt.Errorf("refused by enqueue hook %d: %w", i, err)
		}
	}
	job.Meta = info.Meta
	return nil
}
