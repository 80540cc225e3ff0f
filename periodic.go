package queue

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/queuekit/queue/storekit"
)

// Schedule says when a periodic job runs. A parsed schedule of github.com/robfig/cron/v3
// (cron.ParseStandard("0 3 * * *")) is a Schedule as it is; [Every] is
// the built-in fixed interval. Next must be deterministic: every process
// of a fleet computes the same fire times from it, and the key of each
// period's run is derived from them.
type Schedule interface {
	// Next returns the first time strictly after t at which the schedule
	// fires, or the zero time when it never fires again.
	Next(t time.Time) time.Time
}

// Every returns a Schedule that fires every d, at the multiples of d
// since the Unix epoch (Every(time.Hour) fires on the hour, in UTC), so
// that every process of a fleet computes the same fire times whenever it
// started. A d ≤ 0 is refused when the schedule is registered
// ([Queue.Periodic]).
func Every(d time.Duration) Schedule { return every(d) }

type every time.Duration

// Next returns the first multiple of the interval after t.
func (e every) Next(t time.Time) time.Time {
	if e <= 0 {
		return time.Time{}
	}
	return e.prev(t).Add(time.Duration(e))
}

// prev returns the last fire time at or before t.
func (e every) prev(t time.Time) time.Time {
	d := int64(e)
	n := t.UnixNano()
	k := n / d
	if n%d < 0 {
		k-- // floor, before the epoch
	}
	return time.Unix(0, k*d).In(t.Location())
}

// PeriodicOptions adjust a periodic job (Queue.Periodic). The zero value
// runs each period at its time, never at start, and skips missed periods:
// the first run is of the first fire time strictly after the schedule was
// registered, or after the queue started if that was later, even when
// either falls on a fire time (as the start of a testing/synctest bubble,
// midnight UTC, does for most schedules).
type PeriodicOptions struct {
	// Jitter delays each period's run by up to Jitter (0: none), so that
	// many schedules firing at the same instant spread out. The delay is
	// derived from the name and the period, so every process of a fleet
	// computes the same one. It must be ≥ 0.
	Jitter time.Duration

	// RunAtStart runs the job when the queue starts (or when the
	// schedule is registered on a running queue), as the run of the
	// current period: the latest fire time at or before now. On a
	// durable store a fleet restarting together runs it once, and not at
	// all when that period already ran.
	RunAtStart bool

	// CatchUp runs the most recent missed period once, when the queue
	// finds it missed one or more (the process was down, or its loop was
	// late by more than the tolerance); without it missed periods are
	// skipped and counted. See [Queue.Periodic].
	CatchUp bool
}

// PeriodicStatus is one periodic job as this process sees it
// (Stats.Periodic). Times are the periods' scheduled times; a period's
// run is due at that time plus its jitter.
type PeriodicStatus struct {
	Name string    `json:"name"` // the name given to Queue.Periodic
	Next time.Time `json:"next"` // the next period (zero: the schedule never fires again)
	Last time.Time `json:"last"` // the latest period that came (zero: none yet)
	// LastOutcome is what this process knows of the latest period's run:
	// "enqueued" (this process enqueued it and it waits), "running",
	// "done", "retrying", "dead" or "cancelled"; "skipped" when the
	// period was missed and not caught up; "failed" when its Enqueue
	// failed (LastError says why); "" when another process enqueued it
	// (or an earlier run took its key) and this one has not run it.
	LastOutcome string `json:"last_outcome"`
	// LastError is the error of the latest period's Enqueue or of its
	// run's latest attempt, if it failed ("" otherwise).
	LastError string `json:"last_error,omitempty"`
	// Runs counts the periods this process enqueued since the schedule
	// was first registered. Across a fleet each period is enqueued once,
	// so the processes' Runs add up to the periods run.
	Runs int64 `json:"runs"`
}

const (
	periodicPrefix = "periodic:"
	// periodicSkew is the clock skew between processes, and the delay of
	// a process's loop, that the unique window of a period's key absorbs.
	periodicSkew = time.Minute
	// periodicTolerance is how late a period may be noticed and still run
	// without CatchUp (capped at half the period).
	periodicTolerance = 5 * time.Second
	maxPeriodicName   = 128
)

// Periodic registers job to run on schedule s under name, or replaces the
// schedule, job and options of the periodic job of that name, which then
// take effect from the next fire time after the call; its status is kept.
// It may be called before or after Start, from any goroutine; it returns
// ErrClosed once Stop or Shutdown has begun.
//
// Each period's run is an ordinary job: job with Key
// "periodic:<name>:<unix seconds of the period>", RunAt the period's time
// plus its jitter, and a unique window (Job.UniqueFor) covering the
// period, the jitter and a minute of clock skew. It retries, times out,
// is dead-lettered, counted and routed to its Target as any job. Every
// process of a fleet runs the schedule; the store refuses the second
// Enqueue of a period's key, so each period runs once however many
// processes share the store, across restarts and leader changes. A run
// still waiting or running when its next period comes does not stop the
// next one (its key differs).
//
// The first period is the first fire time after the call (or after Start,
// if later); RunAtStart and CatchUp are the ways to run one at start. A
// period is run when this process notices it within 5 s of its time
// (or half the period, if shorter). One noticed later (the process was
// down, or stalled) is missed: with CatchUp the most recent missed period
// runs once, and the ones before it are skipped; without, all are
// skipped. See docs/OPERATIONS.md, "Periodic jobs".
//
// Periodic returns an error naming what was wrong for: a name that is
// empty, longer than 128 bytes, or holds anything but letters, digits and
// "-_.:/@"; a nil Schedule, one [Every] with d ≤ 0, or one whose Next(now)
// is zero or not after now; a negative Jitter; a job with Key, RunAt,
// UniqueFor, ID or Attempt set (the periodic machinery owns them; an
// error wrapping ErrInvalidJob), a negative MaxAttempts, or an unknown
// Priority.
func (q *Queue[T]) Periodic(name string, s Schedule, job Job[T], opts PeriodicOptions) error {
	if err := q.checkPeriodic(name, s, &job, opts); err != nil {
		return err
	}
	if q.state.Load() >= stateStopping {
		return ErrClosed
	}
	return q.per.add(name, s, job, opts)
}

// RemovePeriodic removes the periodic job name and reports whether there
// was one. A run already enqueued is an ordinary job and still runs; to
// drop it too, cancel its key (CancelMatch on the prefix
// "periodic:<name>:").
func (q *Queue[T]) RemovePeriodic(name string) bool { return q.per.remove(name) }

func (q *Queue[T]) checkPeriodic(name string, s Schedule, job *Job[T], opts PeriodicOptions) error {
	fail := func(format string, args ...any) error {
		return &periodicError{name: name, err: fmt.Errorf(format, args...)}
	}
	if err := checkPeriodicName(name); err != nil {
		return fail("%v", err)
	}
	if s == nil {
		return fail("the schedule is nil")
	}
	if e, ok := s.(every); ok && e <= 0 {
		return fail("Every(%v): the interval must be > 0", time.Duration(e))
	}
	if now := q.clock.Now(); !s.Next(now).After(now) {
		return fail("the schedule never fires after now (%s): Next returned %v", now.UTC().Format(time.RFC3339), s.Next(now))
	}
	if opts.Jitter < 0 {
		return fail("PeriodicOptions.Jitter is %v; it must be >= 0", opts.Jitter)
	}
	owned := func(field string, v any) error {
		return fail("%w: %s is %v; leave it zero, each period's run sets it", ErrInvalidJob, field, v)
	}
	switch {
	case job.Key != "":
		return owned("Key", strconv.Quote(job.Key))
	case !job.RunAt.IsZero():
		return owned("RunAt", job.RunAt)
	case job.UniqueFor != 0:
		return owned("UniqueFor", job.UniqueFor)
	}
	if err := invalidJob(job); err != nil {
		return fail("%w", err)
	}
	if job.Priority != "" && !q.knownPriority(job.Priority) {
		return fail("%w", q.unknownPriority(job.Priority))
	}
	return nil
}

// periodicError is an error of Periodic: it names the periodic job and
// says the package's prefix once, whatever error it wraps.
type periodicError struct {
	name string
	err  error
}

func (e *periodicError) Error() string {
	return fmt.Sprintf("queue: Periodic(%q): %s", e.name, strings.TrimPrefix(e.err.Error(), "queue: "))
}

func (e *periodicError) Unwrap() error { return e.err }

// unknownPriority is the error for a job whose Priority is not one of the
// queue's levels.
func (q *Queue[T]) unknownPriority(label string) error {
	cfg := storekit.Config{Priorities: q.cfg.priorities}
	return cfg.UnknownPriority(label)
}

func (q *Queue[T]) knownPriority(label string) bool {
	for _, p := range q.cfg.priorities {
		if p.Name == label {
			return true
		}
	}
	return false
}

func checkPeriodicName(name string) error {
	if name == "" {
		return errors.New("the name is empty")
	}
	if len(name) > maxPeriodicName {
		return fmt.Errorf("the name is %d bytes long; at most %d", len(name), maxPeriodicName)
	}
	for i, r := range name {
		ok := r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@", r))
		if !ok {
			return fmt.Errorf("the name holds %q at byte %d; use letters, digits and -_.:/@", r, i)
		}
	}
	return nil
}

// periodicKey is the key of the run of name's period at p.
func periodicKey(name string, p time.Time) string {
	stamp := strconv.FormatInt(p.Unix(), 10)
	if ns := p.Nanosecond(); ns != 0 { // a sub-second interval
		stamp += "." + fmt.Sprintf("%09d", ns)
	}
	return periodicPrefix + name + ":" + stamp
}

// periodicName returns the name in a periodic run's key.
func periodicName(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, periodicPrefix)
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", false
	}
	return rest[:i], true
}

// periodicJitter is name's delay for the period at p: in [0, max),
// the same in every process.
func periodicJitter(name string, p time.Time, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	var b [8]byte
	n := uint64(p.UnixNano())
	for i := range b {
		b[i] = byte(n >> (8 * i))
	}
	h.Write(b[:])
	return time.Duration(h.Sum64() % uint64(max))
}

// tolerance is how late the period at p, followed by next, may be
// noticed and still run without CatchUp.
func tolerance(p, next time.Time) time.Duration {
	if next.IsZero() {
		return periodicTolerance
	}
	return min(periodicTolerance, next.Sub(p)/2)
}

// prevFire returns s's latest fire time at or before now, or the zero
// time if it found none in the last 400 days.
func prevFire(s Schedule, now time.Time) time.Time {
	if e, ok := s.(every); ok {
		return e.prev(now)
	}
	for back := time.Second; back <= 400*24*time.Hour; back *= 2 {
		t := s.Next(now.Add(-back))
		if t.IsZero() || t.After(now) {
			continue
		}
		last, _ := lastFire(s, t, now)
		return last
	}
	return time.Time{}
}

// lastFire returns the latest of s's fire times from t (a fire time at
// or before now) up to now, and how many fire times it passed over.
func lastFire(s Schedule, t, now time.Time) (time.Time, uint64) {
	if e, ok := s.(every); ok {
		last := e.prev(now)
		return last, uint64(last.Sub(t) / time.Duration(e))
	}
	var n uint64
	for range 100_000 {
		next := s.Next(t)
		if next.IsZero() || next.After(now) {
			return t, n
		}
		t, n = next, n+1
	}
	// A dense schedule, long missed: search back from now instead (the
	// count is then a lower bound).
	if p := prevFire(s, now); !p.IsZero() {
		return p, n
	}
	return t, n
}

// periodic holds a queue's periodic jobs and runs their loop.
type periodic[T any] struct {
	q  *Queue[T]
	on atomic.Bool // some job is registered: workers look at their jobs' keys

	mu      sync.Mutex
	entries map[string]*periodicEntry[T]
	started bool          // the queue started: the loop runs while there are entries
	looping bool          // the loop goroutine runs
	wake    chan struct{} // a change for the loop (buffered 1)
	exited  chan struct{} // closed when the loop has returned, once it ran
}

type periodicEntry[T any] struct {
	name   string
	sched  Schedule
	job    Job[T]
	opts   PeriodicOptions
	active bool      // next is computed (the queue ran when it was registered or started)
	since  time.Time // registered, or the queue started if later: the first period is after it

	next, last time.Time
	lastKey    string
	outcome    string
	lastErr    string
	runs       int64
	skipped    uint64
	ended      [len(periodicOutcomes)]uint64 // handler runs by outcome
}

// periodicOutcomes are the outcomes of a run counted per name, in the
// order of periodicEntry.ended; also the values of the metric's label.
var periodicOutcomes = [...]string{"done", "retried", "dead", "cancelled"}

func newPeriodic[T any](q *Queue[T]) *periodic[T] {
	return &periodic[T]{q: q, entries: map[string]*periodicEntry[T]{}, wake: make(chan struct{}, 1)}
}

func (p *periodic[T]) add(name string, s Schedule, job Job[T], opts PeriodicOptions) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.q.clock.Now()
	if e := p.entries[name]; e != nil {
		e.sched, e.job, e.opts = s, job, opts
		if e.active {
			e.next = s.Next(now)
		} else {
			e.since = now
		}
	} else {
		p.entries[name] = &periodicEntry[T]{name: name, sched: s, job: job, opts: opts, since: now}
		p.on.Store(true)
	}
	p.kick()
	return nil
}

func (p *periodic[T]) remove(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.entries[name] == nil {
		return false
	}
	delete(p.entries, name)
	p.on.Store(len(p.entries) > 0)
	p.kick()
	return true
}

// start lets the loop run; the queue calls it from Start.
func (p *periodic[T]) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.started = true
	now := p.q.clock.Now()
	for _, e := range p.entries {
		if !e.active && e.since.Before(now) {
			e.since = now
		}
	}
	p.kick()
}

// kick starts the loop if it should run, or wakes it. Called with p.mu.
func (p *periodic[T]) kick() {
	if !p.started || len(p.entries) == 0 {
		return
	}
	if !p.looping {
		p.looping, p.exited = true, make(chan struct{})
		go p.loop()
		return
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// wait returns when the loop has returned (the queue is stopping).
func (p *periodic[T]) wait() {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited != nil {
		<-exited
	}
}
