package queue

import (
	"context"
	"errors"
	"sort"
	"time"
)

// The engine's side of scheduling. A job's RunAt (EnqueueAt, EnqueueIn,
// a retry's backoff) is the store's to keep: the store holds the schedule
// and promotes due jobs itself, sleeping until the next due time. The
// engine keeps the periodic loop below.
//
// The periodic loop: one goroutine per queue with periodic jobs, asleep
// on a timer of the queue's Clock until the earliest next period (or a
// change), which enqueues each period's run as it comes. It does no
// polling, so tests pass fake time through it.

// periodicFire is one period to enqueue.
type periodicFire[T any] struct {
	e      *periodicEntry[T]
	period time.Time
	job    Job[T]
}

func (p *periodic[T]) loop() {
	defer func() {
		p.mu.Lock()
		p.started = false // a late Periodic starts no loop
		close(p.exited)
		p.mu.Unlock()
	}()
	const idle = 24 * time.Hour // nothing to wait for: woken by a change
	timer := p.q.clock.NewTimer(idle)
	defer timer.Stop()
	for {
		fires, wait := p.due(p.q.clock.Now())
		for i := range fires {
			p.fire(&fires[i])
		}
		if len(fires) > 0 {
			continue // the enqueues took time: look again
		}
		if wait < 0 {
			wait = idle
		}
		timer.Reset(wait)
		select {
		case <-timer.C():
		case <-p.wake:
		case <-p.q.stopping:
			return
		}
	}
}

// due activates new entries, collects the periods that have come, and
// returns the time until the earliest next one (-1: none).
func (p *periodic[T]) due(now time.Time) (fires []periodicFire[T], wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wait = -1
	for _, e := range p.entries {
		if !e.active {
			e.active = true
			p.activate(e, now, &fires)
		} else if !e.next.IsZero() && !e.next.After(now) {
			p.came(e, now, &fires)
		}
		if e.next.IsZero() {
			continue
		}
		if d := max(e.next.Sub(now), 0); wait < 0 || d < wait {
			wait = d
		}
	}
	sort.Slice(fires, func(i, j int) bool { return fires[i].period.Before(fires[j].period) })
	return fires, wait
}

// activate computes a new entry's next period when the queue runs, and
// runs the current one for RunAtStart or CatchUp. Without them the first
// period is the first fire time strictly after e.since, even when the
// schedule was registered, or the queue started, at a fire time: the zero
// PeriodicOptions never run at start.
func (p *periodic[T]) activate(e *periodicEntry[T], now time.Time, fires *[]periodicFire[T]) {
	if !e.opts.RunAtStart && !e.opts.CatchUp {
		e.next = e.sched.Next(e.since)
		if !e.next.IsZero() && !e.next.After(now) {
			p.came(e, now, fires) // came while the loop was waking
		}
		return
	}
	e.next = e.sched.Next(now)
	cur := prevFire(e.sched, now)
	if cur.IsZero() {
		if e.opts.RunAtStart { // no period yet: this start is one
			cur = now.Truncate(time.Second)
			p.take(e, cur, e.sched.Next(cur), fires)
		}
		return
	}
	p.take(e, cur, e.next, fires)
}

// came handles e's period e.next, which has come: run it, or the latest
// missed one, as the policy says.
func (p *periodic[T]) came(e *periodicEntry[T], now time.Time, fires *[]periodicFire[T]) {
	cur := e.next
	next := e.sched.Next(cur)
	if !next.IsZero() && !next.After(now) {
		// Late by more than a period: the latest that came is the one.
		var passed uint64
		cur, passed = lastFire(e.sched, next, now)
		next = e.sched.Next(cur)
		e.skipped += 1 + passed // e.next and the ones up to cur, cur excluded
		p.q.log.Warn("periodic job missed periods; skipped", "periodic", e.name, "skipped", 1+passed, "from", e.next)
	}
	if e.opts.CatchUp || now.Sub(cur) <= tolerance(cur, next) {
		p.take(e, cur, next, fires)
	} else {
		e.skipped++
		e.last, e.lastKey, e.outcome, e.lastErr = cur, periodicKey(e.name, cur), "skipped", ""
		p.q.log.Warn("periodic job missed a period; skipped (see PeriodicOptions.CatchUp)",
			"periodic", e.name, "period", cur, "late", now.Sub(cur))
	}
	e.next = next
}

// take adds the run of e's period at cur (followed by next) to fires.
// Called with p.mu.
func (p *periodic[T]) take(e *periodicEntry[T], cur, next time.Time, fires *[]periodicFire[T]) {
	jitter := periodicJitter(e.name, cur, e.opts.Jitter)
	job := e.job
	job.Key = periodicKey(e.name, cur)
	job.RunAt = cur.Add(jitter)
	span := periodicSkew // a schedule's last period
	if !next.IsZero() {
		span += next.Sub(cur)
	}
	job.UniqueFor = span + e.opts.Jitter
	e.last, e.lastKey, e.outcome, e.lastErr = cur, job.Key, "", ""
	*fires = append(*fires, periodicFire[T]{e: e, period: cur, job: job})
}

// fire enqueues one period's run and records what happened.
func (p *periodic[T]) fire(f *periodicFire[T]) {
	err := p.q.Enqueue(p.q.bgCtx, f.job)
	p.mu.Lock()
	defer p.mu.Unlock()
	e := f.e
	if e.lastKey != f.job.Key {
		return // replaced meanwhile
	}
	switch {
	case err == nil:
		e.runs++
		if e.outcome == "" { // not already running: a worker may be quicker
			e.outcome = "enqueued"
		}
	case errors.Is(err, ErrDuplicate):
		// Another process, or an earlier run here, took the period.
	default:
		e.outcome, e.lastErr = "failed", err.Error()
		if !errors.Is(err, ErrClosed) {
			p.q.log.Error("periodic job: enqueue failed", "periodic", e.name, "period", f.period, "err", err)
		}
	}
}

// starting records that a worker starts a periodic job's run; it reports
// whether job is one. The worker calls it only while p.on is set.
func (p *periodic[T]) starting(job *Job[T]) bool {
	name, ok := periodicName(job.Key)
	if !ok {
		return false
	}
	p.mu.Lock()
	if e := p.entries[name]; e != nil && e.lastKey == job.Key {
		e.outcome, e.lastErr = "running", ""
	}
	p.mu.Unlock()
	return true
}

// finishRun is Queue.finishRun for a periodic job's run: it records the
// outcome, read from the worker's own counters as finishRun does.
func (p *periodic[T]) finishRun(w *worker[T], job *Job[T], v *verdict, took time.Duration) {
	c := &w.ctr
	done, retried, dead, cancelled := c.done.Load(), c.retried.Load(), c.dead.Load(), c.cancelled.Load()
	p.q.finishRun(w, job, v, took)
	err := v.err
	i, outcome := -1, "enqueued" // put back without an attempt (shutdown): it waits again
	switch {
	case c.done.Load() != done:
		i, outcome = 0, "done"
	case c.retried.Load() != retried:
		i, outcome = 1, "retrying"
	case c.dead.Load() != dead:
		i, outcome = 2, "dead"
	case c.cancelled.Load() != cancelled:
		i, outcome = 3, "cancelled"
	}
	name, _ := periodicName(job.Key)
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.entries[name]
	if e == nil {
		return
	}
	if i >= 0 {
		e.ended[i]++
	}
	if e.lastKey == job.Key {
		e.outcome, e.lastErr = outcome, ""
		if err != nil && outcome != "done" {
			e.lastErr = err.Error()
		}
	}
}

// periodicSnapshot is one entry's state for Stats and the metrics.
type periodicSnapshot struct {
	PeriodicStatus
	skipped uint64
	ended   [len(periodicOutcomes)]uint64
}

// snapshot returns every entry's state, by name.
func (p *periodic[T]) snapshot() []periodicSnapshot {
	p.mu.Lock()
	out := make([]periodicSnapshot, 0, len(p.entries))
	for _, e := range p.entries {
		out = append(out, periodicSnapshot{
			PeriodicStatus: PeriodicStatus{Name: e.name, Next: e.next, Last: e.last,
				LastOutcome: e.outcome, LastError: e.lastErr, Runs: e.runs},
			skipped: e.skipped, ended: e.ended,
		})
	}
	p.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// statuses returns Stats.Periodic.
func (p *periodic[T]) statuses() []PeriodicStatus {
	snap := p.snapshot()
	if len(snap) == 0 {
		return nil
	}
	out := make([]PeriodicStatus, len(snap))
	for i, s := range snap {
		out[i] = s.PeriodicStatus
	}
	return out
}

// EnqueueAt schedules job to run at t (or now, if t is not in the future).
func (q *Queue[T]) EnqueueAt(ctx context.Context, job Job[T], t time.Time) error {
	job.RunAt = t
	return q.Enqueue(ctx, job)
}

// EnqueueIn schedules job to run after d.
func (q *Queue[T]) EnqueueIn(ctx context.Context, job Job[T], d time.Duration) error {
	job.RunAt = time.Time{} // d <= 0: now, whatever RunAt said
	if d > 0 {
		job.RunAt = q.clock.Now().Add(d)
	}
	return q.enqueue(ctx, &job, d > 0)
}
