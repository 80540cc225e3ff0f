package queue

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/queuekit/queue/storekit"
)

// run runs one claimed job and records its outcome. When the job's target
// has a job waiting for a concurrency slot, run stores that job in *job
// and reports true, to be run next by the same worker; held says *job
// already owns its slot.
func (q *Queue[T]) run(w *worker[T], job *Job[T], held bool) (handed bool) {
	ctx := q.runCtx
	if ctx.Err() != nil {
		// Shutdown: back to the store, with any job parked behind it.
		q.deferJob(w, job, q.clock.Now())
		target := job.Target
		for held {
			h := q.targets.release(target, q.clock.Now(), w.probe, job, false)
			q.flushParked(w, h.flush, waitJob, q.clock.Now())
			if held = h.ok; held {
				w.probe = h.probe
				q.deferJob(w, job, q.clock.Now())
			}
		}
		q.releaseSlot(w, target)
		return false
	}
	if job.Target != "" && !held {
		now := q.clock.Now()
		d, at, probe := q.targets.admitJob(job.Target, now, job, false)
		w.probe = probe
		switch d {
		case slotJob:
			return q.takeSlot(w, job)
		case cancelJob:
			q.cancelJob(w, job)
			return false
		case waitJob:
			if !at.IsZero() {
				q.holdJob(w, job, at)
			}
			return false // zero time: parked until a slot frees
		}
	}
	if target := job.Target; target != "" {
		defer func() {
			// The job has ended: a parked job that takes its slot
			// is stored over it, to run next. Or the slot goes back
			// to the store for another process, and w may wait in
			// the line for the parked jobs, as the target's waiter.
			h := q.targets.release(target, q.clock.Now(), w.probe, job, q.runCtx.Err() == nil)
			q.flushParked(w, h.flush, h.d, h.at)
			if h.ok {
				handed, w.probe = true, h.probe
			} else {
				q.releaseSlot(w, target)
				if h.wait {
					handed = q.awaitSlot(w, target, job)
				}
			}
		}()
	}
	// The checks before each call below are the callees' own first ones:
	// a generic method is not inlined, and the run of a queue without
	// hooks, metrics, admin API or timeout makes none of these calls.
	var (
		start          time.Time
		timed, sampled bool
	)
	if q.obs.timed || q.obs.prom != nil {
		start, timed = q.startRun(job)
	}
	if q.adm.used.Load() {
		ctx, sampled = q.beginRun(w, job, start)
	} else {
		ctx = w.run.base
	}
	if sampled && !timed {
		start = q.clock.Now()
	}
	if w.run.mw != nil {
		w.cur.Store(job.ID)
		periodic := q.per.on.Load() && q.per.starting(job)
		if timed {
			q.emitAt(EventStarted, job, nil, 0, start)
		}
		q.runWrapped(w, ctx, job, start, timed, sampled, periodic)
		return false
	}
	if q.cfg.jobTimeout > 0 || q.leaser != nil {
		var cancel context.CancelFunc
		ctx, cancel = q.jobCtx(w, ctx)
		defer cancel()
	}
	w.cur.Store(job.ID)                                // publishes the run to the admin API (beginRun)
	periodic := q.per.on.Load() && q.per.starting(job) // one load when there are none
	if timed {
		q.emitAt(EventStarted, job, nil, 0, start)
	}
	err := q.call(ctx, job)
	var took time.Duration
	if timed || sampled {
		w.ended = q.clock.Now() // EventDone's or EventDead's time, for a timed run
		took = max(w.ended.Sub(start), 1)
		if sampled {
			w.run.timed(took)
		}
		if !timed {
			took = 0 // timed for the admin API only: not a metrics sample
		}
	}
	cut := q.endRun(w, job.ID)
	if q.leaser != nil {
		w.lost.Store(nil)
	}
	if cut {
		q.endCut(w, job)
		return false
	}
	switch {
	case periodic:
		v := q.decide(w, job, err)
		q.per.finishRun(w, job, &v, took)
	case err == nil && job.Target == "" && took == 0:
		// Done, with no target's health to tell and no run time to
		// observe: what decide and finishRun would come to, without
		// their calls (a generic method is not inlined).
		q.complete(w, q.bgCtx, job, 0)
	default:
		v := q.decide(w, job, err)
		q.finishRun(w, job, &v, took)
	}
	return false
}

// flushParked ends or puts back jobs that were parked for a concurrency
// slot of a target that has since been disabled (d == cancelJob) or
// suspended or opened (held until at), or that go back to be claimed
// again (at is now).
func (q *Queue[T]) flushParked(w *worker[T], parked []Job[T], d jobDecision, at time.Time) {
	for i := range parked {
		if d == cancelJob {
			q.cancelJob(w, &parked[i])
		} else {
			q.holdJob(w, &parked[i], at)
		}
	}
}

// cancelJob ends a claimed job of a disabled target as cancelled.
func (q *Queue[T]) cancelJob(w *worker[T], job *Job[T]) {
	if !q.endClaimed(job, errTargetDisabled) {
		return
	}
	w.ctr.cancelled.Add(1)
	q.emit(EventCancelled, job, errTargetDisabled, 0)
}

// endClaimed tells the store that a claimed job that will not run is
// cancelled; the caller counts it, unless endClaimed returns false: the
// claim was lost to a rescue, which ends the job.
func (q *Queue[T]) endClaimed(job *Job[T], cause error) bool {
	var err error
	if c, ok := q.store.(storekit.ClaimCanceller[T]); ok {
		err = c.CancelClaimed(q.bgCtx, *job, cause)
	} else {
		err = q.store.Complete(q.bgCtx, *job)
	}
	if err != nil {
		if q.leaseLost(job, "cancel", err) {
			return false
		}
		q.log.Error("store: cancel failed", "job", job.ID, "key", job.Key, "err", err)
	}
	return true
}

// call runs the handler, turning a panic into a *PanicError.
func (q *Queue[T]) call(ctx context.Context, job *Job[T]) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return q.handler(ctx, *job)
}

// verdict is a run's outcome as classified from what its handler
// returned (decide), before the store hears of it (finish).
type verdict struct {
	kind EventKind     // EventDone, EventRetried, EventDead or EventDeferred
	err  error         // what the handler returned
	at   time.Time     // EventRetried, EventDeferred: when the job runs again
	in   time.Duration // EventRetried: at less the time of the decision
	free bool          // EventRetried: the rerun uses no attempt (Store.Defer)
}

// decide classifies the result err of job's run: it counts the failure,
// records the error and tells the target's health, but writes nothing to
// the store (finish does).
func (q *Queue[T]) decide(w *worker[T], job *Job[T], err error) verdict {
	if err == nil {
		q.targets.success(job.Target)
		return verdict{kind: EventDone}
	}
	w.ctr.failed.Add(1)
	var pe *PanicError
	if errors.As(err, &pe) {
		w.ctr.panics.Add(1)
		q.log.Error("handler panicked", "job", job.ID, "key", job.Key, "target", job.Target, "attempt", job.Attempt, "panic", pe.Value)
	}
	q.obs.recordError(job.ID, job.Key, job.Target, job.Attempt, err, q.clock.Now())
	now := q.clock.Now()
	if q.runCtx.Err() != nil {
		// Shutdown interrupted it: put it back as it was.
		return verdict{kind: EventDeferred, err: err, at: now}
	}
	dead := verdict{kind: EventDead, err: err}
	retry := func(at time.Time, free bool) verdict {
		return verdict{kind: EventRetried, err: err, at: at, in: at.Sub(now), free: free}
	}
	var (
		ra  *retryAfterError
		pm  *permanentError
		ov  *overloadError
		dis *disableError
	)
	switch {
	case errors.As(err, &dis):
		q.targets.disable(job.Target, err)
		return dead
	case errors.As(err, &pm):
		q.targets.failure(job.Target, err)
		return dead
	case errors.As(err, &ov):
		until := q.targets.suspend(job.Target, now, 0)
		if job.Attempt >= maxAttempts(job, q.cfg.maxAttempts) {
			// A target that stays overloaded does not hold a job forever.
			return dead
		}
		return retry(until, false)
	case errors.As(err, &ra):
		if ra.delay >= q.cfg.retryCeiling {
			return verdict{kind: EventDone, err: err} // BEP 31: too far out, treat as done
		}
		// The downstream asked us to come back later: not a failure of
		// the job's, so the rerun does not use up an attempt. Never
		// sooner than the floor: a handler that keeps answering
		// RetryAfter(0) must not turn a worker into a busy loop.
		return retry(now.Add(max(ra.delay, q.cfg.retryFloor)), true)
	default:
		if q.targets.failure(job.Target, err) {
			return dead // the target was disabled by this failure
		}
		if job.Attempt >= maxAttempts(job, q.cfg.maxAttempts) {
			return dead
		}
		return retry(now.Add(q.backoff(job.Attempt)), false)
	}
}

// finish records the outcome v of one run in the store, counts it and
// reports it.
func (q *Queue[T]) finish(w *worker[T], job *Job[T], v *verdict, took time.Duration) {
	bg := q.bgCtx
	switch v.kind {
	case EventDone:
		q.complete(w, bg, job, took)
	case EventDead:
		q.kill(w, bg, job, v.err, took)
	case EventRetried:
		q.retry(w, bg, job, v.at, v.err, v.free)
	case EventDeferred:
		q.deferJob(w, job, v.at)
	}
}

func (q *Queue[T]) complete(w *worker[T], ctx context.Context, job *Job[T], took time.Duration) {
	if q.mem != nil {
		q.mem.FinishJob(job, &w.mc)
	} else if err := q.store.Complete(ctx, *job); err != nil {
		if q.leaseLost(job, "complete", err) {
			return
		}
		q.log.Error("store: complete failed", "job", job.ID, "key", job.Key, "err", err)
	}
	w.ctr.done.Add(1)
	if q.obs.active {
		q.emitAt(EventDone, job, nil, took, w.endedAt(took))
	}
}

// leaseLost reports whether err says the store no longer holds this run's
// claim (ErrLeaseLost), and logs it: the outcome (named by op) was not
// recorded, and the job's rescue will end it, so the caller counts
// nothing.
func (q *Queue[T]) leaseLost(job *Job[T], op string, err error) bool {
	if !errors.Is(err, storekit.ErrLeaseLost) {
		return false
	}
	q.log.Warn("lease lost before the outcome was recorded; the job was rescued and ends there",
		"op", op, "job", job.ID, "key", job.Key, "attempt", job.Attempt, "err", err)
	return true
}

// retry schedules job to run again at at; free says the run just ended
// does not count against the job's attempts.
func (q *Queue[T]) retry(w *worker[T], ctx context.Context, job *Job[T], at time.Time, cause error, free bool) {
	var err error
	if free {
		err = q.store.Defer(ctx, *job, at, cause)
	} else {
		err = q.store.Retry(ctx, *job, at, cause)
	}
	switch {
	case err == nil:
		w.ctr.retried.Add(1)
		q.emit(EventRetried, job, cause, at.Sub(q.clock.Now()))
	case errors.Is(err, storekit.ErrSuperseded):
		w.ctr.cancelled.Add(1)
		q.emit(EventCancelled, job, err, 0)
	case q.leaseLost(job, "retry", err):
	default:
		q.log.Error("store: retry failed", "job", job.ID, "key", job.Key, "err", err)
		w.ctr.retried.Add(1)
	}
}

func (q *Queue[T]) kill(w *worker[T], ctx context.Context, job *Job[T], cause error, took time.Duration) {
	if err := q.store.Dead(ctx, *job, cause); err != nil {
		if q.leaseLost(job, "dead-letter", err) {
			return
		}
		q.log.Error("store: dead-letter failed", "job", job.ID, "key", job.Key, "err", err)
	}
	w.ctr.dead.Add(1)
	q.keepDead(job, cause)
	q.log.Warn("job dead-lettered", "outcome", "dead", "job", job.ID, "key", job.Key, "target", job.Target, "attempt", job.Attempt, "err", cause)
	q.emitAt(EventDead, job, cause, took, w.endedAt(took))
	q.callOnDead(ctx, job, cause)
}

// deferJob puts a claimed job back to run at at without using an attempt.
func (q *Queue[T]) deferJob(w *worker[T], job *Job[T], at time.Time) {
	q.putBack(w, job, at, nil)
}

// holdJob puts back, until at, a claimed job whose target is suspended or
// whose breaker is open: held, on a HoldStore, so that a Resume of the
// target makes it due at once (see HoldStore). A Resume that came while
// the job was on its way back may have released the target's held jobs
// before this one was among them: the target is then released again.
func (q *Queue[T]) holdJob(w *worker[T], job *Job[T], at time.Time) {
	hs, ok := q.store.(storekit.HoldStore[T])
	if !ok || !at.After(q.clock.Now()) {
		q.deferJob(w, job, at)
		return
	}
	if q.putBack(w, job, at, hs) && q.targets.runnable(job.Target, q.clock.Now()) {
		q.releaseHeld(job.Target)
	}
}

// putBack puts a claimed job back to run at at without using an attempt,
// with hs.Hold when hs is not nil, else with Defer, and counts it; it
// reports whether the store took it back.
func (q *Queue[T]) putBack(w *worker[T], job *Job[T], at time.Time, hs storekit.HoldStore[T]) bool {
	bg := q.bgCtx
	var err error
	if hs != nil {
		err = hs.Hold(bg, *job, at)
	} else {
		err = q.store.Defer(bg, *job, at, nil)
	}
	switch {
	case err == nil:
		w.ctr.deferred.Add(1)
		q.emit(EventDeferred, job, nil, at.Sub(q.clock.Now()))
	case errors.Is(err, storekit.ErrSuperseded):
		w.ctr.cancelled.Add(1)
		q.emit(EventCancelled, job, err, 0)
	case q.leaseLost(job, "defer", err):
	default:
		q.log.Error("store: defer failed", "job", job.ID, "key", job.Key, "err", err)
	}
	return err == nil
}

// backoff returns the wait before attempt n+1: a random time in [d/2, d]
// with d = min(max, base·2^(n-1)).
func (q *Queue[T]) backoff(n int) time.Duration {
	d := q.cfg.backoffBase
	for i := 1; i < n && d < q.cfg.backoffMax; i++ {
		if d > q.cfg.backoffMax/2 {
			d = q.cfg.backoffMax // doubling would pass max, or overflow
			break
		}
		d *= 2
	}
	d = min(d, q.cfg.backoffMax)
	return d/2 + rand.N(d/2+1)
}
