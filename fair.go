package queue

import (
	"errors"
	"math"
	"time"
)

// Fair dispatch: a slow or dead target must not hold every worker while
// other targets have work. With no WithTargetConcurrency, each target's
// limit is its fair share of the pool, ⌈workers/n⌉, where n counts the
// targets that have work: a job of theirs running, parked, or admitted in
// the last fairWindow, and a closed breaker (a target that is suspended,
// disabled, or whose breaker is open or half-open has its own, smaller
// limit: none or its probes). A target alone (n ≤ 1) may use every worker.
//
// Jobs cannot be preempted, so a target is never let past its share while
// another target counts as having work: a worker lent to a hung target
// would come back only at the job's timeout. The window keeps a target
// with short jobs and gaps between them counted, so the hung target
// cannot take the workers one gap at a time. The price is that a target
// over its share waits, with workers idle, while the others' work is
// light; the limit grows back to the whole pool fairWindow after the
// other targets' last job.
//
// The state is the engine's, per process: it works the same on every
// store, and on a durable store shared by several processes each process
// shares its own pool.

const (
	// fairWindow is how long a target counts as having work after its
	// last job was admitted or ended.
	fairWindow = 10 * time.Second
	// fairSweep is how often, at most, targets that have had no work for
	// fairWindow stop being counted.
	fairSweep = time.Second

	// The breaker every target has without WithCircuitBreaker: it counts
	// timeouts only.
	timeoutBreakerFailures = 5
	timeoutBreakerCooldown = 30 * time.Second
)

// limit returns how many jobs of one target may run at once.
func (ts *targets[T]) limit() int {
	if k := ts.cfg.concurrency; k > 0 {
		return k
	}
	n := ts.busy.Load()
	if n <= 1 {
		return math.MaxInt
	}
	w := ts.workers.Load()
	return int(max((w+n-1)/n, 1))
}

// markBusy counts t as having work at instant now; t.mu is held.
func (ts *targets[T]) markBusy(t *target[T], now int64) {
	t.seen = now
	if !t.busy {
		t.busy = true
		ts.busy.Add(1)
	}
}

// markIdle stops counting t, which cannot take a share (it is
// suspended, disabled, open or half-open); t.mu is held.
func (ts *targets[T]) markIdle(t *target[T]) {
	if t.busy {
		t.busy = false
		ts.busy.Add(-1)
	}
}

// sweep stops counting the targets that have had no job running, parked
// or admitted for fairWindow. It runs at most once per fairSweep, and
// only while the count limits anyone; no target's lock is held. A claim
// that comes while another sweeps waits for that sweep to end, so that
// it reads the count the sweep leaves: otherwise it could read a target
// past its window as still having work and park a job under a share the
// sweep is about to lift (the job would wait, with workers idle, for the
// next release of its target).
func (ts *targets[T]) sweep(now int64) {
	if now < ts.sweepAt.Load() || ts.busy.Load() <= 1 {
		return
	}
	ts.sweepMu.Lock()
	defer ts.sweepMu.Unlock()
	if now < ts.sweepAt.Load() {
		return // swept meanwhile
	}
	defer ts.sweepAt.Store(now + int64(fairSweep))
	ts.m.Range(func(_, v any) bool {
		t := v.(*target[T])
		t.mu.Lock()
		if t.busy && t.running == 0 && t.waiting.len() == 0 && now-t.seen >= int64(fairWindow) {
			ts.markIdle(t)
		}
		t.mu.Unlock()
		return true
	})
}

// isTimeout reports whether err says a run timed out: its context's
// deadline passed (context.DeadlineExceeded), or an I/O deadline or a
// client's timeout did (net.Error, *url.Error, os.ErrDeadlineExceeded:
// anything with a Timeout method that returns true).
func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}
