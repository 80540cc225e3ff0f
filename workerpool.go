package queue

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/storekit"
)

// pool is the set of workers. Its slice changes only under Queue.mu; the
// hot path (claim, run, finish) touches no shared lock.
type pool[T any] struct {
	q       *Queue[T]
	workers []*worker[T] // active workers
	leaving []*worker[T] // retired, finishing their current job
	wg      sync.WaitGroup
	exited  counters // outcome counts of workers that have exited
	nextID  int
}

type worker[T any] struct {
	id     int
	ctx    context.Context // cancelled to retire the worker between jobs
	retire context.CancelFunc
	cur    atomic.Int64 // ID of the running job, 0 when idle, negated while the admin API pins it (pin)
	lost   atomic.Pointer[context.CancelFunc]
	ctr    counters // this worker's outcome counts, summed by Stats
	mc     memstore.WorkerClaim
	probe  bool          // the job with a target it runs, or holds, is a half-open breaker's probe
	run    *workerRun[T] // the running job, for the admin API (admin.go)
	ended  time.Time     // when the last timed run ended (endedAt)
	slot   string        // the SlotStore slot the job it runs, or holds, holds (slots.go); "" for none
	seat   *seat         // its part in the concurrency limit and claim gate (gate.go); 256 bytes in all: workers on other cores share no cache line
}

// endedAt returns when the run that took took ended, if it was timed;
// else zero, for emitAt to read the clock.
func (w *worker[T]) endedAt(took time.Duration) time.Time {
	if took <= 0 {
		return time.Time{}
	}
	return w.ended
}

func (p *pool[T]) init(q *Queue[T]) { p.q = q }

// add starts one worker; Queue.mu is held.
func (p *pool[T]) add() {
	p.nextID++
	ctx, cancel := context.WithCancel(p.q.runCtx)
	w := &worker[T]{id: p.nextID, ctx: ctx, retire: cancel, mc: memstore.NewWorkerClaim(p.nextID), run: &workerRun[T]{}, seat: &seat{}}
	if p.q.gate.fn != nil {
		w.seat.ctx, w.seat.stop = context.WithCancel(ctx)
	}
	w.run.base = p.q.newRunBase(w)
	if len(p.q.cfg.middleware) > 0 {
		w.run.mw = p.q.newMW(w)
	}
	p.workers = append(p.workers, w)
	p.q.targets.workers.Store(int64(len(p.workers))) // the fair share's pool
	p.wg.Add(1)
	go p.q.work(w)
}

// retireOne asks the newest worker to exit after its current job; Queue.mu is held.
func (p *pool[T]) retireOne() {
	if n := len(p.workers); n > 0 {
		w := p.workers[n-1]
		p.workers = p.workers[:n-1]
		p.q.targets.workers.Store(int64(n - 1))
		p.leaving = append(p.leaving, w)
		w.retire()
	}
}

func (p *pool[T]) retireAll() {
	for len(p.workers) > 0 {
		p.retireOne()
	}
}

func (p *pool[T]) wait() { p.wg.Wait() }

// runningIDs returns the IDs of jobs whose handlers are running.
func (p *pool[T]) runningIDs() []int64 {
	p.q.mu.Lock()
	defer p.q.mu.Unlock()
	var ids []int64
	for _, w := range p.all() {
		if id := w.running(); id != 0 {
			ids = append(ids, id)
		}
	}
	return ids
}

// all returns live and retiring workers; Queue.mu is held.
func (p *pool[T]) all() []*worker[T] {
	return append(p.workers[:len(p.workers):len(p.workers)], p.leaving...)
}

// work is one worker's loop.
func (q *Queue[T]) work(w *worker[T]) {
	defer q.pool.wg.Done()
	defer q.leave(w)
	var (
		storeErrs int
		job       Job[T] // reused: the engine passes it by pointer, never copying it
		handed    bool
		err       error
	)
	w.run.job = &job // for Logger and the admin API
	for {
		if handed {
			handed = q.run(w, &job, true)
			continue
		}
		if w.ctx.Err() != nil || q.runCtx.Err() != nil {
			// Retired or shut down: Claim would still hand over a ready
			// job, which this worker would only put back. runCtx is
			// checked too: Shutdown marks it cancelled before it reaches
			// the workers' contexts, and in between a worker would claim
			// and put back the same due job over and over.
			return
		}
		if q.adm.pausing.Load() && !q.pauseWait(w.ctx) { // the admin API paused the queue
			return
		}
		if q.gate.on.Load() && !q.enterGate(w) { // SetConcurrency, WithClaimGate
			return
		}
		if q.mem != nil {
			err = q.mem.ClaimJob(w.ctx, &job, &w.mc)
		} else {
			job, err = q.store.Claim(w.ctx)
		}
		if err != nil {
			if w.ctx.Err() != nil || errors.Is(err, storekit.ErrDrained) {
				return
			}
			// A durable store's backend is failing: back off, then retry.
			storeErrs++
			q.log.Warn("claim failed", "err", err, "failures", storeErrs)
			if !q.sleep(w.ctx, q.backoff(min(storeErrs, 6))) {
				return
			}
			continue
		}
		storeErrs = 0
		if q.adm.pausing.Load() && q.paused() && !q.lifted() {
			// Paused while this worker waited for a job: put it back
			// (unless Stop has begun, which lifts the pause).
			q.deferJob(w, &job, q.clock.Now())
			continue
		}
		if q.gate.on.Load() && !q.mayRun(w) {
			// The limit fell while this worker waited for a job.
			q.deferJob(w, &job, q.clock.Now())
			continue
		}
		handed = q.run(w, &job, false)
	}
}

// leave removes an exiting worker from the pool's bookkeeping.
func (q *Queue[T]) leave(w *worker[T]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := &q.pool
	p.workers = remove(p.workers, w)
	p.q.targets.workers.Store(int64(len(p.workers)))
	p.leaving = remove(p.leaving, w)
	p.exited.add(&w.ctr)
	q.leaveRuns(w)
	w.run.stop()
	q.leaveSeat(w)
}

func remove[E comparable](s []E, e E) []E {
	for i, x := range s {
		if x == e {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// sleep waits d on the queue's clock; false if ctx ended first.
func (q *Queue[T]) sleep(ctx context.Context, d time.Duration) bool {
	t := q.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// heartbeats renews the leases of running jobs on a durable store and
// cancels the jobs whose lease was lost.
func (q *Queue[T]) heartbeats(ctx context.Context) {
	every := q.leaser.HeartbeatInterval()
	if every <= 0 {
		every = 5 * time.Second
	}
	for q.sleep(ctx, every) {
		q.mu.Lock()
		var ids []int64
		byID := map[int64]*worker[T]{}
		for _, w := range q.pool.all() {
			if id := w.running(); id != 0 {
				ids = append(ids, id)
				byID[id] = w
			}
		}
		q.mu.Unlock()
		// Jobs parked for a target's concurrency slot are claimed too.
		q.targets.eachWaiting(func(j *Job[T]) { ids = append(ids, j.ID) })
		if len(ids) == 0 {
			continue
		}
		lost, err := q.leaser.Heartbeat(ctx, ids)
		if err != nil {
			q.log.Warn("heartbeat failed", "err", err, "jobs", len(ids))
			continue
		}
		lostSet := make(map[int64]bool, len(lost))
		rc, _ := q.store.(storekit.RunCanceller)
		for _, id := range lost {
			if rc != nil && rc.CancelRequested(id) {
				// An operator cancelled it through the store (another
				// process's admin API, or queuectl): a running job ends
				// cancelled, as with a cancel through this queue's
				// Admin; a parked one stays parked (its lease is kept)
				// and is cancelled once it runs.
				q.cancelRunning(id)
				continue
			}
			lostSet[id] = true
			if w := byID[id]; w != nil && w.running() == id {
				if c := w.lost.Load(); c != nil {
					(*c)()
				}
				q.log.Warn("lease lost; job cancelled", "job", id)
			}
		}
		// A parked job whose lease is lost was rescued: it is not this
		// process's to run any more. It leaves the FIFO without a word to
		// the store, and without an outcome (the rescue's run counts it).
		if len(lostSet) > 0 && q.targets.parked.Load() > 0 {
			for _, j := range q.targets.takeWaiting(func(j *Job[T]) bool { return lostSet[j.ID] }) {
				q.log.Warn("lease lost; parked job dropped", "job", j.ID, "key", j.Key)
			}
		}
	}
}
