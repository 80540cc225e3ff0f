package queue

import (
	"fmt"
	"math"
	"time"

	"github.com/queuekit/queue/storekit"
)

type breakerState uint8

const (
	breakerClosed breakerState = iota
	breakerOpen
	breakerHalfOpen
)

var breakerNames = [...]string{"closed", "open", "half-open"}

// String returns "closed", "open" or "half-open".
func (b breakerState) String() string { return breakerNames[b] }

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

// blockedUntil returns the instant fan-out may pick t again (math.MinInt64:
// now); t.mu is held. A half-open target whose probes are all running is
// blocked until one ends: a job sent to it now would only park.
func (ts *targets[T]) blockedUntil(t *target[T]) int64 {
	if t.disabled || t.brk == breakerHalfOpen && t.probes >= ts.cfg.brkProbes {
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
// does): a suspension set far enough ahead (a huge WithSuspend)
// does not wrap into the past.
func (ts *targets[T]) instant(t time.Time) int64 { return int64(t.Sub(ts.epoch)) }

// now returns the current instant.
func (ts *targets[T]) now() int64 { return ts.instant(ts.clock.Now()) }

// publish records t's state in ts.blocked; t.mu is held, so that two
// changes of one target are published in order.
func (ts *targets[T]) publish(t *target[T]) {
	until := ts.blockedUntil(t)
	now := ts.now()
	if until > now || t.brk != breakerClosed {
		ts.markIdle(t) // no share for a target that cannot take one
	}
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

// jobDecision says what to do with a claimed job of a target.
type jobDecision uint8

const (
	runJob jobDecision = iota
	waitJob
	cancelJob
	slotJob // get a slot of the SlotStore first (slots.go)
)

// admitJob decides whether job, of target, may run now. waitJob comes
// with the time to try again, or the zero time when job was parked to wait
// for a concurrency slot or for a half-open breaker's probes to end
// (release hands it out); the waiting list keeps a copy of *job.
// probe says a job that may run runs as a half-open breaker's probe; its
// release must say so.
//
// With a SlotStore (slots.go), a job that may run needs a slot of the
// store first: admitJob answers slotJob and reserves the local slot,
// and the caller, once it holds a store slot, asks again with slotted
// set, which gives back the reservation.
func (ts *targets[T]) admitJob(name string, now time.Time, job *Job[T], slotted bool) (d jobDecision, at time.Time, probe bool) {
	inst := ts.instant(now)
	ts.sweep(inst)
	t := ts.get(name)
	t.mu.Lock()
	defer t.mu.Unlock()
	if slotted {
		t.acquiring--
	}
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
		ts.markIdle(t)
	}
	if t.brk == breakerHalfOpen {
		if t.probes >= ts.cfg.brkProbes {
			// Parked until a probe ends (release): it runs as soon as
			// a probe closes the breaker, not a cool-down later.
			ts.park(t, job)
			return waitJob, time.Time{}, false
		}
		probe = true
	} else {
		ts.markBusy(t, inst)
	}
	// With a SlotStore, a job also parks while the store refused one
	// (t.full), and behind the jobs parked while another process waits
	// (t.yield): they are first in line.
	if t.running+t.acquiring >= ts.limit() || !slotted && (t.full || t.yield && t.waiting.len() > 0) {
		ts.park(t, job)
		return waitJob, time.Time{}, false
	}
	if ts.slots != nil && !slotted {
		t.acquiring++
		return slotJob, time.Time{}, false
	}
	if probe {
		t.probes++
		ts.publish(t)
	}
	t.running++
	return runJob, time.Time{}, probe
}

// handoff is what release decides for a freed slot of a target.
type handoff[T any] struct {
	ok    bool // a parked job took the slot: release stored it in next, to run at once
	probe bool // that job runs as a half-open breaker's probe
	flush []Job[T]
	d     jobDecision // for flush: cancel them, or wait until at
	at    time.Time
	wait  bool // the slot went back to the SlotStore's line: the caller is to be the target's waiter (slots.go)
}

// release frees a running slot of target; probe says the job that held it
// ran as a half-open breaker's probe (admitJob said so, or release did
// when it handed the job out). If a job is parked waiting for a slot and
// the target may still run jobs, the slot passes straight to it: release
// stores it in *next and reports ok, and the caller runs it; parked jobs for which the
// target has further free slots (all of them, without a concurrency limit)
// come back in flush, to wait until now, that is to be claimed again. If
// the target has meanwhile been disabled, suspended or opened, the parked
// jobs do not run: release returns them all in flush, with what to do with
// them (cancel, or wait until at). While the breaker is half-open, the
// slot goes to the next parked job as a probe.
//
// With a SlotStore, when yield is set (a job ended and the queue is not
// stopping) and another process waits for a slot of the target
// (t.yield), the slot is not handed on: its store slot goes back to the
// store's line, and the parked jobs wait in it, behind the processes
// already there; h.wait then asks the caller to be the target's waiter,
// when it has none.
func (ts *targets[T]) release(name string, now time.Time, probe bool, next *Job[T], yield bool) (h handoff[T]) {
	t := ts.get(name)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seen = ts.instant(now)
	// Only a probe's end frees a probe: a job that started before the
	// breaker opened does not, or more probes than configured would run.
	if probe && t.brk == breakerHalfOpen && t.probes > 0 {
		t.probes--
		ts.publish(t)
	}
	if t.waiting.len() == 0 {
		t.running--
		return handoff[T]{}
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
		return handoff[T]{}
	}
	if h.d != runJob {
		h.flush = ts.unpark(t, t.waiting.len())
		t.running--
		return h
	}
	if t.brk == breakerOpen {
		t.brk, t.probes = breakerHalfOpen, 0 // the cool-down has passed, as in admitJob
		ts.markIdle(t)
	}
	if t.brk == breakerClosed && t.running > ts.limit() {
		// Over its limit (the fair share shrank as other targets came
		// to have work): the slot goes back to the pool, and the parked
		// jobs wait for a later release.
		t.running--
		return handoff[T]{}
	}
	if yield && t.yield && t.brk == breakerClosed {
		t.running--
		if !t.full {
			t.full = true
			h.wait = true
		}
		return h
	}
	ts.unparkInto(t, next)
	h.ok = true
	if t.brk == breakerHalfOpen {
		t.probes++ // next is a probe; the rest wait for its outcome
		ts.publish(t)
		h.probe = true
		return h
	}
	// Closed: next takes the slot, and every parked job the target has
	// room for goes back to be claimed again.
	// With a SlotStore, only when the store is not full: else the
	// target's waiter takes the slots as they free.
	n := min(t.waiting.len(), max(ts.limit()-t.running-t.acquiring, 0))
	if t.full || t.yield {
		n = 0
	}
	if n > 0 {
		h.flush = ts.unpark(t, n)
	}
	h.d, h.at = waitJob, now // the slot stays taken, by next
	return h
}

func (ts *targets[T]) success(name string) {
	if name == "" {
		return
	}
	t := ts.get(name)
	t.mu.Lock()
	t.fails, t.timeouts = 0, 0
	if t.brk != breakerClosed {
		t.brk = breakerClosed
		ts.publish(t)
		ts.share(t)
	}
	t.mu.Unlock()
}

// failure records a failed run; it reports whether the target is now
// disabled.
func (ts *targets[T]) failure(name string, err error) bool {
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
	count, what := t.fails, "failures"
	if ts.cfg.brkTimeouts {
		// The default breaker: only timeouts count, consecutive ones.
		if isTimeout(err) {
			t.timeouts++
		} else {
			t.timeouts = 0
		}
		count, what = t.timeouts, "timeouts"
	}
	opened := false
	if ts.cfg.brkFailures > 0 && (t.brk == breakerHalfOpen || count >= ts.cfg.brkFailures) && t.brk != breakerOpen {
		t.brk, t.brkUntil, opened = breakerOpen, now.Add(ts.cfg.brkCooldown), true
		ts.publish(t)
		ts.share(t)
	}
	disable := ts.cfg.disableAfter > 0 && t.fails >= ts.cfg.disableAfter
	fails := t.fails
	t.mu.Unlock()
	if opened {
		ts.event(EventSuspended, name, fmt.Errorf("circuit breaker open after %d %s: %w", count, what, err), ts.cfg.brkCooldown)
	}
	if disable {
		ts.disable(name, fmt.Errorf("%d consecutive failures, last: %w", fails, err))
		return true
	}
	return false
}

// suspend suspends target for d (the configured duration when d is 0)
// from now and returns the end of the suspension.
func (ts *targets[T]) suspend(name string, now time.Time, d time.Duration) time.Time {
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
		ts.share(t)
	}
	until = t.suspended
	t.mu.Unlock()
	ts.event(EventSuspended, name, nil, d)
	return until
}

func (ts *targets[T]) disable(name string, reason error) {
	if name == "" {
		return
	}
	msg := "disabled"
	if reason != nil {
		msg = reason.Error()
	}
	msg = storekit.ShortReason(msg)
	t := ts.get(name)
	t.mu.Lock()
	was := t.disabled
	t.disabled, t.reason, t.disableAt = true, msg, ts.clock.Now()
	ts.publish(t)
	ts.share(t)
	t.mu.Unlock()
	if !was {
		ts.event(EventDisabled, name, reason, 0)
	}
}

func (ts *targets[T]) resume(name string) bool {
	t, ok := ts.lookup(name)
	if !ok {
		return false
	}
	t.mu.Lock()
	t.suspended, t.disabled, t.reason, t.disableAt = time.Time{}, false, "", time.Time{}
	t.fails, t.timeouts, t.brk, t.probes = 0, 0, breakerClosed, 0
	ts.publish(t)
	ts.share(t)
	t.mu.Unlock()
	ts.event(EventResumed, name, nil, 0)
	ts.freed(name)
	return true
}

// freed tells the queue that target name may run its jobs again (a
// Resume, here or in another process): the jobs held back for it are due
// now (see HoldStore).
func (ts *targets[T]) freed(name string) {
	if ts.onFreed != nil {
		ts.onFreed(name)
	}
}

// holding reports whether t holds its jobs back until a time: it is
// suspended, or its breaker is open, at now; t.mu is held.
func (t *target[T]) holding(now time.Time) bool {
	return now.Before(t.suspended) || t.brk == breakerOpen && now.Before(t.brkUntil)
}

// runnable reports whether target name's jobs may run at now: it is
// neither disabled, suspended nor open.
func (ts *targets[T]) runnable(name string, now time.Time) bool {
	t, ok := ts.lookup(name)
	if !ok {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.disabled && !t.holding(now)
}
