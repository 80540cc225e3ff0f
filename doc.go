// Package queue is an embeddable job queue: a bounded FIFO with
// non-blocking enqueue, precise scheduling of future jobs, a pending-key
// dedupe set, named priorities, retries with backoff and BitTorrent BEP 31
// "retry in" rules, admission control that engages only when the queue
// fills, fan-out throttling with per-target suspension, disabling and
// circuit breaking, an autoscaling worker pool, and Prometheus metrics.
// The same API runs on PostgreSQL or Redis through a store (the pgstore
// and redisstore modules, which implement the store contract of package
// storekit).
//
// Quick start, in a program that drains its queue on Ctrl-C:
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error {
//		return announce(ctx, j.Target, j.Payload)
//	}, queue.WithCapacity(10000, 0), queue.WithWorkers(10, 20)) // 0: pending bound 100 × capacity
//	if err != nil {
//		return err
//	}
//	if err := q.Start(context.Background()); err != nil { // not ctx: see below
//		return err
//	}
//	err = q.Enqueue(ctx, queue.Job[string]{Key: "hash:tracker1:peer", Target: "tracker1", Payload: req})
//	// ... serve until the signal ...
//	<-ctx.Done()
//	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
//	defer cancel()
//	if err := q.Stop(stopCtx); err != nil { // runs every job accepted so far
//		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
//		defer cancel()
//		return q.Shutdown(shutCtx) // too slow: cancel the handlers still running
//	}
//
// Start is given a context that no signal cancels because cancelling
// Start's context is a hard shutdown, as Shutdown is: the running
// handlers are cancelled and the jobs still waiting do not run. The
// example "ShutdownOnSignal" runs this pattern.
//
// A Queue is configured by options only: the package reads no flags and
// no environment variables. A zero argument to any option keeps that
// setting's default (see Option). A program that wants them binds its own names
// to options (the repository's examples/forwarder does, for a tracker's).
//
// # Concurrency
//
// Every method of Queue is safe for concurrent use. Enqueue, Admit and
// Fanout never block; Stop and Shutdown block until the workers are done
// or their context ends. Handlers run on the pool's workers, at most
// WithWorkers' max at a time.
//
// # Lifecycle
//
// New validates the options; nothing runs until Start, though Enqueue
// already accepts jobs. Start returns at once. Stop stops accepting jobs
// (Enqueue returns ErrClosed), lets the workers finish the ready jobs and
// returns; scheduled jobs are kept (durable stores keep them across
// restarts). Shutdown also cancels the running handlers' contexts and
// leaves the ready jobs unrun; so does cancelling the context passed to
// Start. Both return ctx.Err() (Shutdown: a *StuckError naming the
// running jobs) if their context ends first, and may be called again.
// Done is closed once the queue has stopped. With the in-memory store,
// jobs still ready or scheduled when the process exits are lost; a
// durable store keeps them. The library never installs signal handlers:
// the host decides what a signal means (see the quick start).
//
// # Scheduling
//
// A job whose RunAt is in the future waits in a time-ordered schedule. One
// goroutine sleeps until the earliest due time, so a job starts within
// milliseconds of its time; no job has a timer of its own. When the ready
// queue is full as a job comes due, the job is rescheduled
// WithRequeueDelay later (default 10 s), never dropped.
//
// [Queue.Periodic] runs a job on a [Schedule] ([Every], or a parsed cron
// expression): each period's run is an ordinary job keyed by the name and
// the period, with a unique window, so every process of a fleet can run
// the schedule and each period still runs once.
//
// # Priorities
//
// Each job has a priority (WithPriorities; by default high, normal and
// low, weighted 6:3:1). Dispatch is weighted by default: while several
// priorities have ready jobs, each gets at least its share of the claims
// (six in ten for high, three for normal, one for low), in a fixed
// interleaving, so a steady stream of high-priority jobs delays a
// low-priority one by a bounded number of claims instead of starving it.
// Levels whose Shares are all 0 are strict instead: a level runs only when
// every higher one is empty. Weighted is the default because starvation
// is silent (nothing fails; low-priority work just never runs), while the
// cost of weighting, high-priority jobs yielding one claim in ten to work
// that is waiting anyway, is visible and bounded. Jobs of one priority run
// in FIFO order either way. Durable stores weigh per process (each keeps
// its own counter), so across a fleet the shares hold per process.
//
// # Deduplication
//
// A job's Key is its pending key: while it is queued or scheduled, another
// Enqueue with that key returns ErrDuplicate. While it runs, another
// Enqueue is coalesced into exactly one more run after it (WithCoalesce).
// Retries keep the key. Group is a coarser key for scheduled jobs: one
// scheduled job per group. Cancel and CancelMatch cancel pending jobs by
// key so that they never run. Keys and groups are bytes: every store
// accepts any length and any bytes (NUL and invalid UTF-8 included),
// dedupes on the exact bytes and hands them back unchanged.
//
// A job with a UniqueFor window holds its key for that long after it is
// accepted, whatever becomes of it: "at most one job with this key per
// hour". Within the window every other job with the key is refused with a
// *DuplicateError, whether the first is queued, scheduled, running (it is
// not coalesced) or has ended done, dead or cancelled; after it, the
// rules above apply again. Cancel, CancelMatch and Purge end jobs, not
// windows: a cancelled job was accepted, and its window stands. Windows
// are judged by the store's time: the queue's Clock in memory (so
// synctest and fake clocks end them), the database's or Redis's clock on
// a durable store; expired windows are dropped, so they cost memory only
// while open. During a redisstore outage, windows opened meanwhile are
// held in the process's fallback only (see redisstore).
//
// # Outcomes and retries
//
// A handler's return value decides what happens next: nil is done,
// RetryAfter(d, err) runs again after d (never sooner than 1 s; at or
// beyond 10 min it counts as done: see WithRetryAfterBounds),
// Permanent(err) dead-letters at once, Overloaded(err) suspends the job's
// target and waits for it (using an attempt), Disable(err) disables the
// target, and any other error is retried with exponential
// backoff and jitter until WithRetry's maxAttempts, then dead-lettered
// (Queue.OnDead). A panic is recovered and counted as a failure.
//
// # Fair dispatch
//
// Jobs that name a Target share the workers fairly: while n targets have
// work, no target runs more than ⌈workers/n⌉ jobs at once, and a job
// beyond that waits, parked in process, while the workers take the other
// targets' jobs. A target counts as having work from its first job until
// 10 s after its last one ended; a target alone may use every worker. A
// target whose breaker is open or half-open, or that is suspended or
// disabled, takes no share. Without WithCircuitBreaker, five consecutive
// timeouts (context.DeadlineExceeded from WithJobTimeout, or a client
// timeout as ClassifyHTTP returns it) open a target's breaker for 30 s.
// So a dead or hung downstream holds at most its share of the workers,
// and only until its first timeouts open its breaker; the other targets
// keep the rest. WithTargetConcurrency(k) replaces the share by a fixed
// k; jobs without a Target are not limited. The share is the engine's,
// per process, and the same on every store; a fixed k on a store that
// implements storekit.SlotStore (pgstore, redisstore) holds for the whole fleet.
//
// # Admission control
//
// Admit is for a host to call when a new client request arrives. Below
// the WithRateLimit fill threshold (default 80 %) it always admits; at or
// above it a token bucket decides, and a refusal matches ErrRateLimited,
// carries a retry hint (RetryDelay) and its text is a ready client message
// ("busy, retry in 10 seconds"), worded by the host with WithRateLimit's
// RateLimit.Reason. On a store several processes share (one that
// implements Admitter: pgstore, redisstore), the bucket is one for the
// whole fleet, kept in the store and leased in small batches of tokens, so
// that N processes admit one bucket's worth, not N. Fanout picks the
// targets a request goes to:
// healthy, due, shuffled, capped — at top-N while the queue fills
// (WithFanout).
//
// SetConcurrency narrows (or, at 0, pauses) how many jobs a process runs
// at once, at run time; WithClaimGate gives every worker a host's gate to
// pass before each claim (a token bucket, a CPU budget). Both hold
// workers back before they claim, so a waiting worker holds no job; Stop
// and Shutdown lift both.
//
// # Metrics
//
// Stats returns a snapshot; StatsHandler serves it as text and JSON.
// WithMetrics registers Prometheus collectors on a registry the host
// passes, with a queue=<name> label. WithObserver receives every
// lifecycle event, for tracing.
//
// # Middleware and job context
//
// A job carries string metadata (Job.Meta) that every store keeps with
// it. WithEnqueueHook runs a hook in Enqueue, with the caller's ctx, that
// may set the job's Meta (a trace context, a request ID);
// WithMiddleware wraps every run, outermost first, around the job's
// timeout context and the handler, and sees the run's outcome when its
// next returns. Logger(ctx) in a handler returns the queue's logger with
// the job's ID, key, attempt and target, and the attributes a middleware
// added (a trace ID). Module otelqueue builds OpenTelemetry tracing on
// these. With no middleware and no hook, a run and an Enqueue cost
// nothing more.
//
// # Testing
//
// Build the queue inside a testing/synctest bubble and time is fake: a
// job scheduled an hour out runs after time.Sleep(time.Hour) returns,
// instantly. The bubble's clock starts at midnight UTC, 1 January 2000,
// a fire time of most schedules; a periodic job registered then first
// runs at its next fire time (Every(time.Hour): 01:00), never at once,
// so a test sleeps to that time (queuetest.Advance) and then looks, or
// sets RunAtStart to have one run at start. A handler that calls an HTTP
// service through a real socket blocks the bubble (network I/O is not
// durably blocking, so fake time never advances): give it
// queuetest.HTTPClient(h), which serves an http.Handler in process. Package queuetest has helpers for a program's own tests
// (Advance, Start, Drain, CheckCounts) and a FakeClock for tests that
// cannot use a bubble. Package storetest is for store authors: Run checks
// the contract (package storekit) every store passes.
package queue
