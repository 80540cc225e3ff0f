package queue

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Target health: every job may name a Target (a forwarder, an upstream
// API). The queue tracks each target's health from job outcomes:
//
//   - suspension: an overload (Overloaded, HTTP 429) suspends the target
//     for WithSuspend; queued jobs for it wait (until a Resume, if one
//     comes first), fan-out skips it.
//   - disabling: a non-retryable error, a rejection, "retry in: never" or
//     WithDisableAfter consecutive failures disables it until Resume;
//     queued jobs for it are cancelled.
//   - circuit breaking: closed → open after N consecutive failures →
//     half-open after the cool-down, letting a few probe jobs through; a
//     probe's success closes it, a failure re-opens. Jobs for the target
//     that a worker takes while the probes run wait in process for their
//     outcome (TargetStatus.Parked). By default only timeouts count (5 in
//     a row open it for 30 s, one probe); WithCircuitBreaker makes every
//     failure count, with its own thresholds.
//   - concurrency: by default a fair share of the pool (fair.go); with
//     WithTargetConcurrency, at most K jobs of one target run at once. The
//     rest wait their turn in the queue.

type targetConfig struct {
	suspend       time.Duration
	disableAfter  int // consecutive failures; 0 = never
	brkFailures   int // 0 = no breaker
	brkCooldown   time.Duration
	brkProbes     int
	brkTimeouts   bool // only timeouts count toward the breaker (the default breaker)
	concurrency   int  // 0 = the fair share (fair.go)
	fanoutMax     int
	throttlePct   int // 0 = never throttle
	throttleTopN  int
	shouldSuspend func(status int, err error) bool
	shuffle       func(n int, swap func(i, j int))
}

func defaultTargets() targetConfig {
	return targetConfig{
		suspend:      defaultSuspendDuration,
		brkFailures:  timeoutBreakerFailures,
		brkCooldown:  timeoutBreakerCooldown,
		brkProbes:    1,
		brkTimeouts:  true,
		fanoutMax:    defaultFanoutMax,
		throttlePct:  defaultThrottlePct,
		throttleTopN: defaultThrottleTopN,
	}
}

func (c *targetConfig) validate() error {
	if c.throttlePct > 0 && c.throttleTopN <= 0 {
		return optErr("WithFanout", c.throttleTopN, "top-N must be >= 1 while throttling is on")
	}
	return nil
}

// WithSuspend sets how overloaded targets are recognised and for how
// long they are suspended. d is the suspension (default 300s): a job that
// returns an Overloaded error suspends its target for d, and the target's
// jobs wait until it passes. should replaces the overload test that
// ClassifyHTTP applies through Queue.Classify (default: status 429, Too
// Many Requests): when it returns true for a status and transport error,
// Classify returns an Overloaded error. Add other overload signals there,
// such as a 503 with Retry-After or an application's own "slow down"
// error. A zero d and a nil should keep their defaults; d must not be
// negative.
func WithSuspend(d time.Duration, should func(status int, err error) bool) Option {
	return func(c *config) error {
		if d < 0 {
			return optErr("WithSuspend", d, "duration must be > 0 (0 keeps the default)")
		}
		if d != 0 {
			c.targets.suspend = d
		}
		if should != nil {
			c.targets.shouldSuspend = should
		}
		return nil
	}
}

// WithDisableAfter disables a target after n consecutive failed runs; a
// success resets the count (default 0: failures alone never disable).
func WithDisableAfter(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return optErr("WithDisableAfter", n, "must be >= 0 (0 turns it off)")
		}
		c.targets.disableAfter = n
		return nil
	}
}

// WithCircuitBreaker sets the per-target circuit breaker: it opens after
// failures consecutive failures, stays open for cooldown (jobs for the
// target wait, Fanout skips it), then lets probes jobs run; a success
// closes it, a failure opens it again. It may be combined with
// WithDisableAfter.
//
// Without this option every target still has a breaker that counts only
// timeouts: a handler error that reports Timeout() true, such as
// context.DeadlineExceeded when WithJobTimeout or the handler's own
// deadline ends a run, or a net/http client timeout as ClassifyHTTP
// returns it. Five in a row open it for 30 s, with one probe; any other
// outcome resets the count. A target that never answers thus stops
// taking workers after its first few timeouts. With this option every
// failure counts, timeouts included; a breaker that never opens is
// WithCircuitBreaker(math.MaxInt, time.Second, 1). A zero failures,
// cooldown or probes keeps its default (5, 30s and 1), so
// WithCircuitBreaker(0, 0, 0) counts every failure with the timeout
// breaker's numbers.
func WithCircuitBreaker(failures int, cooldown time.Duration, probes int) Option {
	return func(c *config) error {
		if failures < 0 {
			return optErr("WithCircuitBreaker", failures, "failures must be >= 1 (0 keeps the default)")
		}
		if cooldown < 0 {
			return optErr("WithCircuitBreaker", cooldown, "cool-down must be > 0 (0 keeps the default)")
		}
		if probes < 0 {
			return optErr("WithCircuitBreaker", probes, "probes must be >= 1 (0 keeps the default)")
		}
		if failures != 0 {
			c.targets.brkFailures = failures
		}
		if cooldown != 0 {
			c.targets.brkCooldown = cooldown
		}
		if probes != 0 {
			c.targets.brkProbes = probes
		}
		c.targets.brkTimeouts = false
		return nil
	}
}

// WithTargetConcurrency runs at most k jobs of one target at once. The
// default, 0, is the fair share: while n targets have work, each runs at
// most ⌈workers/n⌉ jobs at once, and a target alone may use every worker
// (see "Fair dispatch" in the package documentation). A k > 0 is a fixed
// limit instead; math.MaxInt turns limiting off.
//
// Jobs beyond the limit wait in the queue; none is dropped. A worker that
// takes such a job parks it in process, in FIFO order per target, and
// takes the next job: parked jobs count in Stats.Depth and against the
// capacity as ready jobs do, and Cancel, CancelMatch and Purge reach
// them. A parked job holds its key as a running job does: an Enqueue of
// the key is coalesced into one more run (see WithCoalesce).
//
// On a store that implements SlotStore (pgstore, redisstore), a fixed k
// holds across every process of the queue: a job runs only while its
// process holds one of the target's k slots in the store, which costs a
// round trip to take it and one to free it. A job that gets no slot is
// parked as above, and its process waits in the target's line in the
// store, until a slot frees anywhere in the fleet: a freed slot goes to
// the process first in the line, and while a process waits the others
// give each slot back as its job ends, rather than to their own next
// parked job, so that the slots go round the waiting processes in the
// order they began to wait. A process in the line thus gets a slot once
// the processes ahead of it (at most all the others) have had one each,
// whatever the others' backlogs. The fair share stays each process's
// own.
func WithTargetConcurrency(k int) Option {
	return func(c *config) error {
		if k < 0 {
			return optErr("WithTargetConcurrency", k, "must be >= 0 (0 is the fair share)")
		}
		c.targets.concurrency = k
		return nil
	}
}

type target[T any] struct {
	mu        sync.Mutex
	name      string
	suspended time.Time // zero or past: not suspended
	disabled  bool
	reason    string
	disableAt time.Time
	fails     int // consecutive failures
	timeouts  int // consecutive timeouts
	total     int // failures ever
	brk       breakerState
	brkUntil  time.Time // end of the open state
	probes    int       // probes running in half-open
	running   int
	acquiring int       // jobs getting a slot of the SlotStore (slots.go), their local slot reserved
	full      bool      // the SlotStore refused a slot: parked jobs wait for the target's waiter (slots.go)
	yield     bool      // another process waits in the SlotStore's line: ended jobs give their slot back (slots.go)
	yieldGen  uint64    // counts the times yield was set, so that a stale answer does not clear it (slots.go)
	lineSince time.Time // when this process began to wait in the SlotStore's line; zero when it does not (slots.go)
	waiting   fifo[T]   // claimed jobs waiting for a concurrency slot or a probe's outcome
	busy      bool      // counted in targets.busy (fair.go)
	seen      int64     // the last instant a job of the target was admitted or ended
}

// TargetStatus describes one target's health.
type TargetStatus struct {
	Name           string    `json:"name"`                     // the target, as in Job.Target
	SuspendedUntil time.Time `json:"suspended_until,omitzero"` // end of the current suspension; zero if not suspended
	Disabled       bool      `json:"disabled"`                 // disabled until Resume: Fanout skips it, its jobs are cancelled
	Reason         string    `json:"reason,omitempty"`         // why it was disabled: the text of the error given to Disable
	DisabledAt     time.Time `json:"disabled_at,omitzero"`     // when it was disabled
	Failures       int       `json:"failures"`                 // consecutive failures
	Breaker        string    `json:"breaker"`                  // closed, open, half-open
	Running        int       `json:"running"`                  // jobs of the target running now
	// Parked counts claimed jobs waiting in process for a concurrency
	// slot or for a half-open breaker's probe to end; the queue's Stats
	// count them in Depth, not Running, and they count against the
	// capacity.
	Parked int `json:"parked"`
}

// targets is the health of every target a queue of jobs with payload T
// has seen, and the jobs parked for their slots.
type targets[T any] struct {
	cfg   targetConfig
	clock Clock
	event func(kind EventKind, name string, err error, d time.Duration)
	m     sync.Map // name -> *target[T]
	due   dueTable
	fleet *fleetSync  // nil unless the store is a TargetStore (fleet.go)
	slots *fleetSlots // nil unless the store is a SlotStore and the limit is fixed (slots.go)

	// onFreed is called, without locks held, with a target that may run
	// its jobs again after a Resume, here or in another process (freed).
	onFreed func(name string)

	// epoch is what instants count from (see instant).
	epoch time.Time

	// blocked maps each target that is, or was lately, disabled,
	// suspended or open to the instant it may be picked again,
	// math.MaxInt64 while disabled. Fan-out reads it without a lock, so
	// that checking a hundred candidates costs a hundred map reads, or
	// nothing when no target is blocked; it is rebuilt, copy on write,
	// when a target's state changes, which is rare.
	blocked atomic.Pointer[blockSet]
	blockMu sync.Mutex // serialises rebuilds of blocked

	// parked counts the jobs in every target's waiting list. Every
	// Enqueue reads it (parked jobs count against the capacity), so it
	// has a cache line of its own; it is written only as jobs park and
	// leave.
	_      [64]byte
	parked atomic.Int64
	_      [56]byte

	// The fair share (fair.go): the pool's size, the number of targets
	// with work, and the instant of the next sweep. Every targeted claim
	// reads them; they change when the pool is resized, when a target
	// starts or stops having work, and once per sweep. sweepMu is held
	// by a sweep, at most once per fairSweep.
	workers atomic.Int64
	busy    atomic.Int64
	sweepAt atomic.Int64
	sweepMu sync.Mutex
	_       [32]byte
}

func newTargets[T any](cfg targetConfig, clk Clock, event func(EventKind, string, error, time.Duration)) *targets[T] {
	ts := &targets[T]{cfg: cfg, clock: clk, event: event, epoch: clk.Now(), due: dueTable{m: map[string]map[string]int64{}}}
	ts.blocked.Store(&blockSet{})
	return ts
}

func (ts *targets[T]) get(name string) *target[T] {
	if t, ok := ts.m.Load(name); ok {
		return t.(*target[T])
	}
	t, _ := ts.m.LoadOrStore(name, &target[T]{name: name})
	return t.(*target[T])
}

func (ts *targets[T]) lookup(name string) (*target[T], bool) {
	t, ok := ts.m.Load(name)
	if !ok {
		return nil, false
	}
	return t.(*target[T]), true
}

// park appends a copy of job to t's waiting list; t.mu is held.
func (ts *targets[T]) park(t *target[T], job *Job[T]) {
	t.waiting.push(job)
	ts.parked.Add(1)
}

// unpark removes the first n jobs of t's waiting list and returns them;
// t.mu is held.
func (ts *targets[T]) unpark(t *target[T], n int) []Job[T] {
	out := make([]Job[T], n)
	copy(out, t.waiting.jobs())
	t.waiting.drop(n)
	ts.parked.Add(-int64(n))
	return out
}

// unparkInto removes the first job of t's waiting list and stores it in
// *job, which saves the copy a one-job slice would cost; t.mu is held.
func (ts *targets[T]) unparkInto(t *target[T], job *Job[T]) {
	*job = t.waiting.jobs()[0]
	t.waiting.drop(1)
	ts.parked.Add(-1)
}

// takeWaiting removes and returns the parked jobs, of every target, for
// which match returns true.
func (ts *targets[T]) takeWaiting(match func(job *Job[T]) bool) []Job[T] {
	var out []Job[T]
	ts.m.Range(func(_, v any) bool {
		t := v.(*target[T])
		t.mu.Lock()
		defer t.mu.Unlock()
		n := len(out)
		out = t.waiting.removeIf(match, out)
		ts.parked.Add(-int64(len(out) - n))
		return true
	})
	return out
}

// eachWaiting calls fn with every job parked for a concurrency slot.
func (ts *targets[T]) eachWaiting(fn func(job *Job[T])) {
	ts.m.Range(func(_, v any) bool {
		t := v.(*target[T])
		t.mu.Lock()
		jobs := t.waiting.jobs()
		for i := range jobs {
			fn(&jobs[i])
		}
		t.mu.Unlock()
		return true
	})
}

// fifo is a target's list of parked jobs, oldest first. It keeps the jobs
// by value, and a small buffer across the times it runs empty, so that a
// target that parks one job at a time does not allocate for each.
type fifo[T any] struct {
	buf  []Job[T] // buf[head:] are the jobs; buf[:head] are cleared
	head int
}

// fifoKeep is the largest buffer, in jobs, that an empty fifo keeps.
const fifoKeep = 4

func (f *fifo[T]) len() int { return len(f.buf) - f.head }

// jobs returns the parked jobs, oldest first, in the fifo's own buffer.
func (f *fifo[T]) jobs() []Job[T] { return f.buf[f.head:] }

// push appends a copy of job. A full buffer whose front half is spent is
// compacted rather than grown, so a long-lived backlog that moves through
// it does not grow it without bound.
func (f *fifo[T]) push(job *Job[T]) {
	if f.head > 0 && len(f.buf) == cap(f.buf) && f.head >= len(f.buf)/2 {
		n := copy(f.buf, f.buf[f.head:])
		clear(f.buf[n:])
		f.buf, f.head = f.buf[:n], 0
	}
	f.buf = append(f.buf, *job)
}

// pushFront puts a copy of job before the others.
func (f *fifo[T]) pushFront(job *Job[T]) {
	if f.head > 0 {
		f.head--
		f.buf[f.head] = *job
		return
	}
	f.buf = append(f.buf, Job[T]{})
	copy(f.buf[1:], f.buf)
	f.buf[0] = *job
}

// drop removes the first n jobs.
func (f *fifo[T]) drop(n int) {
	clear(f.buf[f.head : f.head+n])
	f.head += n
	f.tidy()
}

// removeIf removes the jobs for which match returns true, keeping the
// others in order, and returns out with the removed ones appended.
func (f *fifo[T]) removeIf(match func(job *Job[T]) bool, out []Job[T]) []Job[T] {
	live := f.buf[f.head:]
	kept := live[:0]
	for i := range live {
		if match(&live[i]) {
			out = append(out, live[i])
		} else {
			kept = append(kept, live[i])
		}
	}
	clear(live[len(kept):])
	f.buf = f.buf[:f.head+len(kept)]
	f.tidy()
	return out
}

// tidy resets an empty fifo, keeping a small buffer for the next jobs.
func (f *fifo[T]) tidy() {
	if f.head < len(f.buf) {
		return
	}
	f.head = 0
	if cap(f.buf) <= fifoKeep {
		f.buf = f.buf[:0]
	} else {
		f.buf = nil
	}
}

// statuses lists targets with something to report, sorted by name.
func (ts *targets[T]) statuses(now time.Time) []TargetStatus {
	var out []TargetStatus
	ts.m.Range(func(_, v any) bool {
		t := v.(*target[T])
		t.mu.Lock()
		st := TargetStatus{Name: t.name, Disabled: t.disabled, Reason: t.reason, DisabledAt: t.disableAt,
			Failures: t.fails, Breaker: t.brk.String(), Running: t.running, Parked: t.waiting.len()}
		if now.Before(t.suspended) {
			st.SuspendedUntil = t.suspended
		}
		t.mu.Unlock()
		if st.Disabled || !st.SuspendedUntil.IsZero() || st.Breaker != "closed" || st.Failures > 0 {
			out = append(out, st)
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Suspend suspends target for d (WithSuspend when d is 0): Fanout
// skips it and its queued jobs wait until the suspension ends.
func (q *Queue[T]) Suspend(target string, d time.Duration) error {
	if target == "" {
		return fmt.Errorf("%w: empty name", ErrUnknownTarget)
	}
	if d < 0 {
		return fmt.Errorf("queue: Suspend(%q): negative duration %s", target, d)
	}
	q.targets.suspend(target, q.clock.Now(), d)
	return nil
}

// Disable disables target with reason until Resume: Fanout skips it and
// its queued jobs are cancelled when they come up.
func (q *Queue[T]) Disable(target string, reason error) error {
	if target == "" {
		return fmt.Errorf("%w: empty name", ErrUnknownTarget)
	}
	q.targets.disable(target, reason)
	return nil
}

// Resume clears target's suspension, disabled state, failure count and
// breaker. The jobs that wait for the suspension or the open breaker are
// due at once, in every process of the queue, on a store that implements
// HoldStore (every store of this module); jobs scheduled for later keep
// their time. It returns an error wrapping ErrUnknownTarget for a target
// the queue has never seen.
func (q *Queue[T]) Resume(target string) error {
	if !q.targets.resume(target) {
		return fmt.Errorf("%w %q", ErrUnknownTarget, target)
	}
	return nil
}

// TargetNames returns the names of the targets the queue has seen (those
// of jobs it has run or parked, and those named by Suspend or Disable),
// sorted: Stats lists only the targets that are not healthy,
// and a dashboard lists the healthy ones from this. It reads the queue's
// own table of targets, which every targeted run keeps anyway.
func (q *Queue[T]) TargetNames() []string {
	var out []string
	q.targets.m.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	sort.Strings(out)
	return out
}

// Target returns the health of target, and false if the queue has never
// seen it.
func (q *Queue[T]) Target(name string) (TargetStatus, bool) {
	t, ok := q.targets.lookup(name)
	if !ok {
		return TargetStatus{}, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	st := TargetStatus{Name: t.name, Disabled: t.disabled, Reason: t.reason, DisabledAt: t.disableAt,
		Failures: t.fails, Breaker: t.brk.String(), Running: t.running, Parked: t.waiting.len()}
	if q.clock.Now().Before(t.suspended) {
		st.SuspendedUntil = t.suspended
	}
	return st, true
}

// targetEvent counts and reports a target's state change.
func (q *Queue[T]) targetEvent(kind EventKind, name string, err error, d time.Duration) {
	msg := "target suspended"
	switch kind {
	case EventDisabled:
		msg = "target disabled"
	case EventResumed:
		msg = "target resumed"
	}
	attrs := []any{"target", name}
	if err != nil {
		attrs = append(attrs, "reason", err.Error())
	}
	if d > 0 {
		attrs = append(attrs, "for", d)
	}
	if kind == EventResumed {
		q.log.Info(msg, attrs...)
	} else {
		q.log.Warn(msg, attrs...)
	}
	if q.obs != nil && q.obs.active {
		q.obs.send(Event{Kind: kind, Time: q.clock.Now(), Target: name, Err: err, Delay: d})
	}
}
