package queue

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Target health: every job may name a Target (a forwarder, an upstream
// API). The queue tracks each target's health from job outcomes:
//
//   - suspension: an overload (Overloaded, HTTP 429) suspends the target
//     for WithSuspendDuration; queued jobs for it wait, fan-out skips it.
//   - disabling: a non-retryable error, a rejection, "retry in: never" or
//     WithDisableAfter consecutive failures disables it until Resume;
//     queued jobs for it are cancelled.
//   - circuit breaking (WithCircuitBreaker): closed → open after N
//     consecutive failures → half-open after the cool-down, letting a few
//     probe jobs through; a probe's success closes it, a failure re-opens.
//     Jobs for the target that a worker takes while the probes run wait in
//     process for their outcome (TargetStatus.Parked).
//   - concurrency (WithTargetConcurrency): at most K jobs of one target run
//     at once; the rest wait their turn in the queue.

// maxReasonLen bounds the stored disable reason.
const maxReasonLen = 256

type targetConfig struct {
	suspend       time.Duration
	disableAfter  int // consecutive failures; 0 = never
	brkFailures   int // 0 = no breaker
	brkCooldown   time.Duration
	brkProbes     int
	concurrency   int // 0 = unlimited
	fanoutMax     int
	throttlePct   int // 0 = never throttle
	throttleTopN  int
	shouldSuspend func(status int, err error) bool
	shuffle       func(n int, swap func(i, j int))
}

func defaultTargets() targetConfig {
	return targetConfig{
		suspend:      DefaultSuspendDuration,
		fanoutMax:    DefaultFanoutMax,
		throttlePct:  DefaultThrottlePct,
		throttleTopN: DefaultThrottleTopN,
	}
}

func (c *targetConfig) validate() error {
	if c.throttlePct > 0 && c.throttleTopN <= 0 {
		return optErr("WithThrottle", c.throttleTopN, "top-N must be >= 1 while throttling is on")
	}
	return nil
}

// WithSuspendDuration sets how long an overloaded target is suspended
// (default 300s).
func WithSuspendDuration(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return optErr("WithSuspendDuration", d, "must be > 0")
		}
		c.targets.suspend = d
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

// WithCircuitBreaker adds a per-target circuit breaker (default: none): it
// opens after failures consecutive failures, stays open for cooldown
// (jobs for the target wait), then lets probes jobs run; a success closes
// it, a failure opens it again. It may be combined with WithDisableAfter.
func WithCircuitBreaker(failures int, cooldown time.Duration, probes int) Option {
	return func(c *config) error {
		if failures < 1 {
			return optErr("WithCircuitBreaker", failures, "failures must be >= 1")
		}
		if cooldown <= 0 {
			return optErr("WithCircuitBreaker", cooldown, "cool-down must be > 0")
		}
		if probes < 1 {
			return optErr("WithCircuitBreaker", probes, "probes must be >= 1")
		}
		c.targets.brkFailures, c.targets.brkCooldown, c.targets.brkProbes = failures, cooldown, probes
		return nil
	}
}

// WithTargetConcurrency runs at most k jobs of one target at once (default
// 0: unlimited). Jobs beyond it wait in the queue; none is dropped. A
// worker that takes such a job parks it in process, in FIFO order per
// target, and takes the next job: parked jobs count in Stats.Depth and
// against the capacity as ready jobs do, and Cancel, CancelMatch and
// Purge reach them. A parked job holds its key as a running job does: an
// Enqueue of the key is coalesced into one more run (see WithCoalesce).
func WithTargetConcurrency(k int) Option {
	return func(c *config) error {
		if k < 0 {
			return optErr("WithTargetConcurrency", k, "must be >= 0 (0 is unlimited)")
		}
		c.targets.concurrency = k
		return nil
	}
}

// WithShouldSuspend replaces the overload test ClassifyHTTP uses through
// Queue.Classify (default: status 429, Too Many Requests). Add other
// overload signals here, such as a 503 with Retry-After or an
// application's own "slow down" error.
func WithShouldSuspend(fn func(status int, err error) bool) Option {
	return func(c *config) error {
		if fn == nil {
			return optErr("WithShouldSuspend", nil, "must not be nil")
		}
		c.targets.shouldSuspend = fn
		return nil
	}
}

type breakerState uint8

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

var breakerNames = [...]string{"closed", "open", "half-open"}

// String returns "closed", "open" or "half-open".
func (b breakerState) String() string { return breakerNames[b] }

type target struct {
	mu        sync.Mutex
	name      string
	suspended time.Time // zero or past: not suspended
	disabled  bool
	reason    string
	disableAt time.Time
	fails     int // consecutive failures
	total     int // failures ever
	brk       breakerState
	brkUntil  time.Time // end of the open state
	probes    int       // probes running in half-open
	running   int
	waiting   []any // claimed jobs (Job[T]) waiting for a concurrency slot or a probe's outcome
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

type targets struct {
	cfg   targetConfig
	clock Clock
	event func(kind EventKind, name string, err error, d time.Duration)
	m     sync.Map // name -> *target
	due   dueTable

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
}

// blockSet is an immutable snapshot of the blocked targets.
type blockSet struct {
	until map[string]int64 // target -> may be picked again at (an instant)
	last  int64            // the latest instant in until
}

// eligible reports whether fan-out may pick target name at instant now:
// it is not disabled, suspended or open.
func (b *blockSet) eligible(name string, now int64) bool {
	if now >= b.last {
		return true // nothing is blocked any more: no lookup
	}
	until, ok := b.until[name]
	return !ok || until <= now
}

func newTargets(cfg targetConfig, clk Clock, event func(EventKind, string, error, time.Duration)) *targets {
	ts := &targets{cfg: cfg, clock: clk, event: event, epoch: clk.Now(), due: dueTable{m: map[string]map[string]int64{}}}
	ts.blocked.Store(&blockSet{})
	return ts
}

// blockedUntil returns the instant fan-out may pick t again (math.MinInt64:
// now); t.mu is held.
func (ts *targets) blockedUntil(t *target) int64 {
	if t.disabled {
		return math.MaxInt64
	}
	until := int64(math.MinInt64)
	if !t.suspended.IsZero() {
		until = ts.instant(t.suspended)
	}
	if t.brk == breakerOpen {
		until = max(until, ts.instant(t.brkUntil))
	}
	return until
}

// instant returns t as nanoseconds since ts.epoch. Instants compare as
// the times do where admission compares them (time.Time's Before and
// After): by the monotonic clock when both carry a reading, as every
// time this package takes from the system clock does, so a step of the
// wall clock (an NTP correction) neither lengthens nor cuts a
// suspension, a cool-down or a next-due time; by the wall clock for a
// time without one (one a caller built or parsed). It saturates (Sub
// does): a suspension set far enough ahead (a huge WithSuspendDuration)
// does not wrap into the past.
func (ts *targets) instant(t time.Time) int64 { return int64(t.Sub(ts.epoch)) }

// now returns the current instant.
func (ts *targets) now() int64 { return ts.instant(ts.clock.Now()) }

// publish records t's state in ts.blocked; t.mu is held, so that two
// changes of one target are published in order.
func (ts *targets) publish(t *target) {
	until := ts.blockedUntil(t)
	now := ts.now()
	ts.blockMu.Lock()
	defer ts.blockMu.Unlock()
	old := ts.blocked.Load().until
	if cur, ok := old[t.name]; (!ok && until <= now) || (ok && cur == until) {
		return // nothing changes
	}
	b := &blockSet{until: make(map[string]int64, len(old)+1)}
	for name, u := range old {
		if u > now && name != t.name { // drop what has expired
			b.until[name], b.last = u, max(b.last, u)
		}
	}
	if until > now {
		b.until[t.name], b.last = until, max(b.last, until)
	}
	ts.blocked.Store(b)
}

func (ts *targets) get(name string) *target {
	if t, ok := ts.m.Load(name); ok {
		return t.(*target)
	}
	t, _ := ts.m.LoadOrStore(name, &target{name: name})
	return t.(*target)
}

func (ts *targets) lookup(name string) (*target, bool) {
	t, ok := ts.m.Load(name)
	if !ok {
		return nil, false
	}
	return t.(*target), true
}

// jobDecision says what to do with a claimed job of a target.
type jobDecision uint8

const (
	runJob jobDecision = iota
	waitJob
	cancelJob
)

// admitJob decides whether job, of target, may run now. waitJob comes
// with the time to try again, or the zero time when job was parked to wait
// for a concurrency slot or for a half-open breaker's probes to end
// (release hands it out). job is nil only when neither can happen: no
// breaker and no concurrency limit. probe says a job that may run runs as
// a half-open breaker's probe; its release must say so.
func (ts *targets) admitJob(name string, now time.Time, job any) (d jobDecision, at time.Time, probe bool) {
	t := ts.get(name)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.disabled:
		return cancelJob, time.Time{}, false
	case now.Before(t.suspended):
		return waitJob, t.suspended, false
	}
	if t.brk == breakerOpen {
		if now.Before(t.brkUntil) {
			return waitJob, t.brkUntil, false
		}
		t.brk, t.probes = breakerHalfOpen, 0
	}
	if t.brk == breakerHalfOpen {
		if t.probes >= ts.cfg.brkProbes {
			// Parked until a probe ends (release): it runs as soon as
			// a probe closes the breaker, not a cool-down later.
			ts.park(t, job)
			return waitJob, time.Time{}, false
		}
		probe = true
	}
	if ts.cfg.concurrency > 0 && t.running >= ts.cfg.concurrency {
		ts.park(t, job)
		return waitJob, time.Time{}, false
	}
	if probe {
		t.probes++
	}
	t.running++
	return runJob, time.Time{}, probe
}

// park appends job to t's waiting list; t.mu is held.
func (ts *targets) park(t *target, job any) {
	t.waiting = append(t.waiting, job)
	ts.parked.Add(1)
}

// unpark removes the first n jobs of t's waiting list and returns them;
// t.mu is held.
func (ts *targets) unpark(t *target, n int) []any {
	out := make([]any, n)
	copy(out, t.waiting)
	clear(t.waiting[:n])
	t.waiting = t.waiting[n:]
	if len(t.waiting) == 0 {
		t.waiting = nil
	}
	ts.parked.Add(-int64(n))
	return out
}

// takeWaiting removes and returns the parked jobs, of every target, for
// which match returns true.
func (ts *targets) takeWaiting(match func(job any) bool) []any {
	var out []any
	ts.m.Range(func(_, v any) bool {
		t := v.(*target)
		t.mu.Lock()
		defer t.mu.Unlock()
		kept := t.waiting[:0]
		for _, j := range t.waiting {
			if match(j) {
				out = append(out, j)
			} else {
				kept = append(kept, j)
			}
		}
		clear(t.waiting[len(kept):])
		if n := len(t.waiting) - len(kept); n > 0 {
			t.waiting = kept
			ts.parked.Add(-int64(n))
		}
		return true
	})
	return out
}

// eachWaiting calls fn with every job parked for a concurrency slot.
func (ts *targets) eachWaiting(fn func(job any)) {
	ts.m.Range(func(_, v any) bool {
		t := v.(*target)
		t.mu.Lock()
		for _, j := range t.waiting {
			fn(j)
		}
		t.mu.Unlock()
		return true
	})
}

// handoff is what release decides for a freed slot of a target.
type handoff struct {
	next  any  // a parked job (Job[T]) that takes the slot, to run at once
	ok    bool // next is set
	probe bool // next runs as a half-open breaker's probe
	flush []any
	d     jobDecision // for flush: cancel them, or wait until at
	at    time.Time
}

// release frees a running slot of target; probe says the job that held it
// ran as a half-open breaker's probe (admitJob said so, or release did
// when it handed the job out). If a job is parked waiting for a slot and
// the target may still run jobs, the slot passes straight to it: release
// returns it in next, to be run by the caller; parked jobs for which the
// target has further free slots (all of them, without a concurrency limit)
// come back in flush, to wait until now, that is to be claimed again. If
// the target has meanwhile been disabled, suspended or opened, the parked
// jobs do not run: release returns them all in flush, with what to do with
// them (cancel, or wait until at). While the breaker is half-open, the
// slot goes to the next parked job as a probe.
func (ts *targets) release(name string, now time.Time, probe bool) (h handoff) {
	t := ts.get(name)
	t.mu.Lock()
	defer t.mu.Unlock()
	// Only a probe's end frees a probe: a job that started before the
	// breaker opened does not, or more probes than configured would run.
	if probe && t.brk == breakerHalfOpen && t.probes > 0 {
		t.probes--
	}
	if len(t.waiting) == 0 {
		t.running--
		return handoff{}
	}
	switch {
	case t.disabled:
		h.d = cancelJob
	case now.Before(t.suspended):
		h.d, h.at = waitJob, t.suspended
	case t.brk == breakerOpen && now.Before(t.brkUntil):
		h.d, h.at = waitJob, t.brkUntil
	case t.brk == breakerHalfOpen && t.probes >= ts.cfg.brkProbes:
		// Probes are still out: the slot is not needed for one.
		t.running--
		return handoff{}
	}
	if h.d != runJob {
		h.flush = ts.unpark(t, len(t.waiting))
		t.running--
		return h
	}
	if t.brk == breakerOpen {
		t.brk, t.probes = breakerHalfOpen, 0 // the cool-down has passed, as in admitJob
	}
	h.next, h.ok = ts.unpark(t, 1)[0], true
	if t.brk == breakerHalfOpen {
		t.probes++ // next is a probe; the rest wait for its outcome
		h.probe = true
		return h
	}
	// Closed: next takes the slot, and every parked job the target has
	// room for goes back to be claimed again.
	n := len(t.waiting)
	if ts.cfg.concurrency > 0 {
		n = min(n, max(ts.cfg.concurrency-t.running, 0))
	}
	if n > 0 {
		h.flush = ts.unpark(t, n)
	}
	h.d, h.at = waitJob, now // the slot stays taken, by next
	return h
}

func (ts *targets) success(name string) {
	if name == "" {
		return
	}
	t := ts.get(name)
	t.mu.Lock()
	t.fails = 0
	if t.brk != breakerClosed {
		t.brk = breakerClosed
		ts.publish(t)
	}
	t.mu.Unlock()
}

// failure records a failed run; it reports whether the target is now
// disabled.
func (ts *targets) failure(name string, err error) bool {
	if name == "" {
		return false
	}
	if isNonRetryable(err) {
		ts.disable(name, err)
		return true
	}
	now := ts.clock.Now()
	t := ts.get(name)
	t.mu.Lock()
	t.fails++
	t.total++
	opened := false
	if ts.cfg.brkFailures > 0 && (t.brk == breakerHalfOpen || t.fails >= ts.cfg.brkFailures) && t.brk != breakerOpen {
		t.brk, t.brkUntil, opened = breakerOpen, now.Add(ts.cfg.brkCooldown), true
		ts.publish(t)
	}
	disable := ts.cfg.disableAfter > 0 && t.fails >= ts.cfg.disableAfter
	fails := t.fails
	t.mu.Unlock()
	if opened {
		ts.event(EventSuspended, name, fmt.Errorf("circuit breaker open after %d failures: %w", fails, err), ts.cfg.brkCooldown)
	}
	if disable {
		ts.disable(name, fmt.Errorf("%d consecutive failures, last: %w", fails, err))
		return true
	}
	return false
}

// suspend suspends target for d (the configured duration when d is 0)
// from now and returns the end of the suspension.
func (ts *targets) suspend(name string, now time.Time, d time.Duration) time.Time {
	if d <= 0 {
		d = ts.cfg.suspend
	}
	until := now.Add(d)
	if name == "" {
		return until
	}
	t := ts.get(name)
	t.mu.Lock()
	if until.After(t.suspended) {
		t.suspended = until
		ts.publish(t)
	}
	until = t.suspended
	t.mu.Unlock()
	ts.event(EventSuspended, name, nil, d)
	return until
}

func (ts *targets) disable(name string, reason error) {
	if name == "" {
		return
	}
	msg := "disabled"
	if reason != nil {
		msg = reason.Error()
	}
	if len(msg) > maxReasonLen {
		msg = msg[:maxReasonLen-3] + "..."
	}
	t := ts.get(name)
	t.mu.Lock()
	was := t.disabled
	t.disabled, t.reason, t.disableAt = true, msg, ts.clock.Now()
	ts.publish(t)
	t.mu.Unlock()
	if !was {
		ts.event(EventDisabled, name, reason, 0)
	}
}

func (ts *targets) resume(name string) bool {
	t, ok := ts.lookup(name)
	if !ok {
		return false
	}
	t.mu.Lock()
	t.suspended, t.disabled, t.reason, t.disableAt = time.Time{}, false, "", time.Time{}
	t.fails, t.brk, t.probes = 0, breakerClosed, 0
	ts.publish(t)
	t.mu.Unlock()
	ts.event(EventResumed, name, nil, 0)
	return true
}

// statuses lists targets with something to report, sorted by name.
func (ts *targets) statuses(now time.Time) []TargetStatus {
	var out []TargetStatus
	ts.m.Range(func(_, v any) bool {
		t := v.(*target)
		t.mu.Lock()
		st := TargetStatus{Name: t.name, Disabled: t.disabled, Reason: t.reason, DisabledAt: t.disableAt,
			Failures: t.fails, Breaker: t.brk.String(), Running: t.running, Parked: len(t.waiting)}
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

// Suspend suspends target for d (WithSuspendDuration when d is 0): Fanout
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
// breaker. It returns an error wrapping ErrUnknownTarget for a target the
// queue has never seen.
func (q *Queue[T]) Resume(target string) error {
	if !q.targets.resume(target) {
		return fmt.Errorf("%w %q", ErrUnknownTarget, target)
	}
	return nil
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
		Failures: t.fails, Breaker: t.brk.String(), Running: t.running, Parked: len(t.waiting)}
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

// ClassifyHTTP maps the result of an HTTP call to a handler outcome:
//
//	2xx                      → nil (done)
//	429                      → Overloaded (suspend the target)
//	400, 403, 404            → Disable (the target rejects us)
//	other 4xx but 408        → Permanent
//	5xx, 408, timeouts,
//	other err                → the error itself (retried with backoff)
//	DNS "no such host", connection refused, no route to host,
//	network unreachable      → Disable (non-retryable)
//
// err, if non-nil, is the transport error and status is ignored.
func ClassifyHTTP(status int, err error) error {
	if err != nil {
		if isNonRetryable(err) {
			return Disable(err)
		}
		return err
	}
	switch {
	case status >= 200 && status < 300:
		return nil
	case status == http.StatusTooManyRequests:
		return errOverloaded429
	case status == http.StatusBadRequest:
		return errDisable400
	case status == http.StatusForbidden:
		return errDisable403
	case status == http.StatusNotFound:
		return errDisable404
	case status == http.StatusRequestTimeout:
		return &HTTPError{Status: status} // a timeout: retried
	case status >= 400 && status < 500:
		return Permanent(&HTTPError{Status: status})
	default:
		return &HTTPError{Status: status}
	}
}

// The outcomes of the statuses that decide a target's health, built once:
// ClassifyHTTP returns them without allocating. They are shared; do not
// modify them.
var (
	errOverloaded429 = Overloaded(&HTTPError{Status: http.StatusTooManyRequests})
	errDisable400    = Disable(&HTTPError{Status: http.StatusBadRequest})
	errDisable403    = Disable(&HTTPError{Status: http.StatusForbidden})
	errDisable404    = Disable(&HTTPError{Status: http.StatusNotFound})
)

// Classify is ClassifyHTTP with the queue's WithShouldSuspend test.
func (q *Queue[T]) Classify(status int, err error) error {
	if fn := q.cfg.targets.shouldSuspend; fn != nil && fn(status, err) {
		if err == nil {
			err = &HTTPError{Status: status}
		}
		return Overloaded(err)
	}
	return ClassifyHTTP(status, err)
}

// HTTPError is an HTTP status treated as a failure by ClassifyHTTP.
type HTTPError struct {
	Status int // the HTTP status code, e.g. 503
}

// Error returns the status code and its text, e.g. "HTTP 503 Service
// Unavailable".
func (e *HTTPError) Error() string {
	return fmt.Sprintf("HTTP %d %s", e.Status, http.StatusText(e.Status))
}

// isNonRetryable reports DNS failures and refused or unreachable
// connections: errors that retrying soon will not fix.
func isNonRetryable(err error) bool {
	switch e := err.(type) { // unwrapped: no errors.As, no allocation
	case nil:
		return false
	case *disableError:
		return true
	case *net.DNSError:
		return e.IsNotFound || (!e.IsTimeout && !e.IsTemporary)
	}
	var dis *disableError
	if errors.As(err, &dis) {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return dns.IsNotFound || (!dns.IsTimeout && !dns.IsTemporary)
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH)
}
