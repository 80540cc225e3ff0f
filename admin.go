package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/storekit"

	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/internal/memstore"
)

// Admin returns the queue's admin API: list, inspect, retry, delete and
// cancel jobs, pause and resume the queue, act on its targets. With a
// durable store that implements admin.Store (pgstore, redisstore) it
// works on the store, which every process sharing the queue sees, and
// cancels a job this process runs at once; with the in-memory store it
// works on the queue's own jobs, and keeps the last 1000 dead jobs for
// it. docs/OPERATIONS.md ("Admin API guarantees") says what each action
// races with and what wins.
//
// Workers track their running jobs for the admin API from the first call
// of Admin on (until then a run costs nothing more): call it before Start
// (as mounting the dashboard does) to see and cancel every running job.
// On a store through which another process can cancel a run (pgstore,
// redisstore), workers track their runs from the start.
func (q *Queue[T]) Admin() *admin.Admin {
	q.adm.once.Do(func() {
		q.trackRuns()
		if s, ok := q.store.(admin.Store); ok {
			q.adm.api = admin.New(durableAdmin[T]{Store: s, q: q})
		} else if s, ok := q.store.(adminer); ok {
			q.adm.api = admin.New(durableAdmin[T]{Store: s.Admin(), q: q})
		} else {
			q.adm.api = admin.New(memAdmin[T]{q: q})
		}
	})
	return q.adm.api
}

// cancelsRuns reports whether an operator can cancel a running job through
// store from another process (another process's Admin, queuectl): then
// workers track their runs from the start, so that the heartbeat that
// learns of the cancel can cancel the run, whether or not this process
// ever calls Admin.
func cancelsRuns[T any](store storekit.Store[T]) bool {
	_, ok := store.(storekit.RunCanceller)
	return ok
}

// adminer is a store whose admin backend is a value of its own: the
// durable stores (pgstore, redisstore), whose Retry and Cancel are the
// storekit.Store methods, so that the store itself cannot be an
// admin.Store.
type adminer interface {
	Admin() admin.Store
}

// deadKeep is how many dead jobs the in-memory admin backend keeps.
const deadKeep = 1000

// adminState is the queue's admin state: the API, the pause, and the
// in-memory store's retention of dead jobs.
type adminState[T any] struct {
	once   sync.Once
	api    *admin.Admin
	mu     sync.Mutex
	paused bool
	// pausing mirrors paused for the workers' check, which must not
	// take mu: every worker reads it before every claim.
	pausing atomic.Bool
	// used is set by the first Admin call: until then workers do not
	// track their running jobs for it (a run that started before it is
	// not listed as running, and cannot be cancelled).
	used   atomic.Bool
	resume chan struct{} // closed by Resume; made by Pause
	dead   []deadJob[T]  // oldest first, at most deadKeep
	// now is the coarse clock (stampNow): the start of a running job
	// in the in-memory admin listing is the stamp before it.
	now  atomic.Pointer[time.Time]
	gone admin.RunTimes // the run times of exited workers; Queue.mu
}

type deadJob[T any] struct {
	job     Job[T]
	err     string
	updated time.Time
}

// pausedNow reports whether the queue is paused, and a channel closed when
// it is resumed.
func (q *Queue[T]) pausedNow() (bool, <-chan struct{}) {
	if !q.adm.pausing.Load() {
		return false, nil
	}
	q.adm.mu.Lock()
	defer q.adm.mu.Unlock()
	return q.adm.paused, q.adm.resume
}

// paused reports whether the queue is paused.
func (q *Queue[T]) paused() bool {
	p, _ := q.pausedNow()
	return p
}

// keepDead records a dead job for the in-memory admin backend.
func (q *Queue[T]) keepDead(job *Job[T], cause error) {
	if q.mem == nil {
		return
	}
	d := deadJob[T]{job: *job, updated: q.clock.Now()}
	if cause != nil {
		d.err = storekit.ErrorText(cause) // as the durable stores keep it
	}
	q.adm.mu.Lock()
	if len(q.adm.dead) >= deadKeep {
		// Prune the oldest: a Retry or Delete racing it finds it gone.
		q.adm.dead = slices.Delete(q.adm.dead, 0, len(q.adm.dead)-deadKeep+1)
	}
	q.adm.dead = append(q.adm.dead, d)
	q.adm.mu.Unlock()
}

// workerRun is what a worker shows of its running job to the admin API,
// and how the API cancels it. It costs a run no lock and, but for one
// run in runSampleEvery, no clock read: the worker publishes the run
// through worker.cur, which it stores anyway, and an admin call that
// reads or cancels the run first pins it (pin), which holds the worker
// at the end of that run (endRun) until the call unpins it. Every field
// but the atomics is written by the worker before it publishes a run,
// and read by the admin API only while it holds the run pinned.
type workerRun[T any] struct {
	job    *Job[T]    // the worker's job; valid while on
	start  *time.Time // when the run started: the coarse clock's stamp, or exact
	exact  time.Time  // start points here when the worker read the clock anyway
	ctx    context.Context
	cancel context.CancelFunc // the runs' parent context, remade after a cut
	cut    bool               // the admin API cancelled the run (pinned)
	on     bool               // the run is tracked; once set, set for every run

	stamp *time.Time // worker only: the coarse clock's stamp at the last timed run

	// base is the worker's long-lived run context (newRunBase), carrying
	// the runSlot through which Logger finds job: every run's context
	// derives from it. mw is the worker's middleware chain, nil without
	// middleware.
	base context.Context
	mw   *mwRun[T]

	// The runs this worker timed (admin.RunTimes).
	runs, nanos, longest atomic.Int64
	// 128 bytes in all: one size class, no line shared with another worker's
}

// runSampleEvery: a tracking worker times the runs of one job ID in
// runSampleEvery for admin.RunTimes, besides its first run after each
// stamp of the coarse clock. A power of two.
const runSampleEvery = 256

// stampNow refreshes the coarse clock that dates running jobs and paces
// the sampling of run times: a clock read, on the scaler's tick and on
// the admin calls a dashboard polls, never on a run.
func (q *Queue[T]) stampNow() {
	t := q.clock.Now()
	q.adm.now.Store(&t)
}

// beginRun readies w's slot for job, before run publishes it (storing
// worker.cur), and returns the context the run derives from, and whether
// to time the run for admin.RunTimes. start is the run's start if the
// caller read the clock anyway, else zero. A tracked run costs a few
// loads from the worker's own cache lines: no lock, no clock, and no
// store but when the coarse clock moves.
func (q *Queue[T]) beginRun(w *worker[T], job *Job[T], start time.Time) (context.Context, bool) {
	r := w.run
	if !q.adm.used.Load() {
		return r.base, false
	}
	if r.ctx == nil || r.cut {
		if r.cancel != nil {
			r.cancel()
		}
		r.ctx, r.cancel = context.WithCancel(r.base)
		r.cut, r.on = false, true
	}
	stamp := q.adm.now.Load()
	sample := job.ID&(runSampleEvery-1) == 0 || stamp != r.stamp
	if sample {
		r.stamp = stamp
	}
	// Stored only when they change: between two stamps, a worker's
	// runs write nothing here.
	switch {
	case !start.IsZero():
		r.exact = start
		r.start = &r.exact
	case stamp == nil:
		r.exact = q.clock.Now() // no stamp yet
		r.start = &r.exact
	case r.start != stamp:
		r.start = stamp
	}
	if r.job != job {
		r.job = job // the worker's loop variable: set once
	}
	return r.ctx, sample
}

// endRun unpublishes w's run of job id and reports whether the admin API
// cancelled it. It waits while an admin call holds the run pinned.
func (q *Queue[T]) endRun(w *worker[T], id int64) bool {
	for !w.cur.CompareAndSwap(id, 0) {
		runtime.Gosched() // pinned: an admin call copies or cancels the run
	}
	r := w.run
	return r.on && r.cut
}

// timed adds a run that took d to w's sample for admin.RunTimes.
func (r *workerRun[T]) timed(d time.Duration) {
	r.runs.Add(1)
	r.nanos.Add(int64(d))
	if int64(d) > r.longest.Load() {
		r.longest.Store(int64(d)) // one racing a RunTimes swap counts in the next interval
	}
}

// pin holds w's running job, if any, until unpin: the worker cannot end
// the run meanwhile, so the run's fields can be read. It returns the
// job's ID and false when w runs no tracked job. Hold it for a copy or a
// cancel only.
func (w *worker[T]) pin() (int64, bool) {
	for {
		id := w.cur.Load()
		switch {
		case id == 0:
			return 0, false
		case id < 0:
			runtime.Gosched() // another admin call holds it
		case w.cur.CompareAndSwap(id, -id):
			if !w.run.on {
				w.unpin(id)
				return 0, false
			}
			return id, true
		}
	}
}

func (w *worker[T]) unpin(id int64) { w.cur.Store(id) }

// running returns the ID of the job w runs, 0 when idle.
func (w *worker[T]) running() int64 {
	id := w.cur.Load()
	if id < 0 {
		return -id // pinned by the admin API
	}
	return id
}

// stop releases the context when the worker exits.
func (r *workerRun[T]) stop() {
	if r.cancel != nil {
		r.cancel()
	}
}

// cancelRunning cancels the running job id if a worker of this process
// runs it; it reports whether one did.
func (q *Queue[T]) cancelRunning(id int64) bool {
	found := false
	q.eachWorker(func(w *worker[T]) {
		if found || w.running() != id {
			return
		}
		got, ok := w.pin()
		if !ok {
			return
		}
		if got == id {
			r := w.run
			r.cut, found = true, true
			r.cancel()
		}
		w.unpin(got)
	})
	return found
}

// RunTimes returns a sample of how long the queue's handlers ran, summed
// over the workers on read (see admin.RunTimes for how runs are picked:
// one job ID in 256, and each worker's first run after each refresh of
// the queue's coarse clock, which this call refreshes). It is what a
// dashboard charts as run time, read from the workers' own counters: no
// observer, and no clock read on a run that is not sampled. Workers
// sample runs from the first call of RunTimes or Admin on; until then
// Runs is 0. Longest is the longest run sampled since the previous call
// of RunTimes or of the admin API's RunTimes.
func (q *Queue[T]) RunTimes() admin.RunTimes {
	q.trackRuns()
	return q.runTimes()
}

// trackRuns turns on the workers' tracking of their runs, for the admin
// API and RunTimes; the coarse clock is stamped first, so that a
// tracked run finds a stamp.
func (q *Queue[T]) trackRuns() {
	if !q.adm.used.Load() {
		q.stampNow()
		q.adm.used.Store(true)
	}
}

// runTimes sums the workers' samples of run times (admin.RunTimer).
func (q *Queue[T]) runTimes() admin.RunTimes {
	q.stampNow()
	q.mu.Lock()
	ws := q.pool.all()
	rt := q.adm.gone
	q.adm.gone.Longest = 0
	q.mu.Unlock()
	for _, w := range ws {
		r := w.run
		rt.Runs += uint64(r.runs.Load())
		rt.Total += time.Duration(r.nanos.Load())
		rt.Longest = max(rt.Longest, time.Duration(r.longest.Swap(0)))
	}
	return rt
}

// leaveRuns keeps the sample of an exiting worker; Queue.mu is held.
func (q *Queue[T]) leaveRuns(w *worker[T]) {
	r := w.run
	g := &q.adm.gone
	g.Runs += uint64(r.runs.Load())
	g.Total += time.Duration(r.nanos.Load())
	g.Longest = max(g.Longest, time.Duration(r.longest.Load()))
}

// eachWorker calls fn for every live or retiring worker.
func (q *Queue[T]) eachWorker(fn func(w *worker[T])) {
	q.mu.Lock()
	ws := q.pool.all()
	q.mu.Unlock()
	for _, w := range ws {
		fn(w)
	}
}

// endCut ends a run the admin API cancelled: cancelled, counted and
// observed, whatever the handler returned.
func (q *Queue[T]) endCut(w *worker[T], job *Job[T]) {
	if !q.endClaimed(job, errAdminCancelled) {
		return
	}
	w.ctr.cancelled.Add(1)
	q.log.Info("running job cancelled by the admin API", "job", job.ID, "key", job.Key)
	q.emit(EventCancelled, job, errAdminCancelled, 0)
}

// pauseWait waits while the queue is paused; false when ctx ends first,
// or when Stop or Shutdown begins on a durable store. Stop lifts the
// pause: the in-memory store's worker goes on to drain the ready jobs,
// which would otherwise be lost with the process (true); a durable
// store's worker has nothing to drain and exits, as its Claim would once
// the store is drained (false).
func (q *Queue[T]) pauseWait(ctx context.Context) bool {
	for {
		p, ch := q.pausedNow()
		if !p || q.lifted() {
			return !p || q.mem != nil
		}
		select {
		case <-ch:
		case <-q.stopping:
		case <-ctx.Done():
			return false
		}
	}
}

func (q *Queue[T]) setPaused(p bool) {
	q.adm.mu.Lock()
	changed := q.adm.paused != p
	q.adm.paused = p
	q.adm.pausing.Store(p)
	if changed && p {
		q.adm.resume = make(chan struct{})
	} else if changed {
		close(q.adm.resume)
	}
	q.adm.mu.Unlock()
	if changed {
		if p {
			q.log.Info("queue paused by the admin API: workers stop claiming; enqueues continue")
			q.emitQueue(EventPaused)
		} else {
			q.log.Info("queue resumed by the admin API")
			q.emitQueue(EventUnpaused)
		}
	}
}

// jobInfo describes job in state st.
func (q *Queue[T]) jobInfo(job *Job[T], st admin.State, updated time.Time, payload bool) (admin.JobInfo, error) {
	prio := job.Priority
	if prio == "" {
		prio = q.cfg.defaultPriority
	}
	ji := admin.JobInfo{ID: job.ID, Key: job.Key, Group: job.Group, Target: job.Target, Priority: prio,
		State: st, Attempt: job.Attempt, MaxAttempts: job.MaxAttempts, RunAt: job.RunAt, Updated: updated, Meta: job.Meta}
	if payload {
		b, err := json.Marshal(job.Payload)
		if err != nil {
			return ji, fmt.Errorf("queue: admin: encoding the payload of job %d: %w", job.ID, err)
		}
		ji.Payload = b
	}
	return ji, nil
}

// matches reports whether job passes f's priority, target and key filters.
func (q *Queue[T]) matches(f admin.Filter, job *Job[T]) bool {
	prio := job.Priority
	if prio == "" {
		prio = q.cfg.defaultPriority
	}
	return (f.Priority == "" || f.Priority == prio) && (f.Target == "" || f.Target == job.Target) &&
		strings.HasPrefix(job.Key, f.KeyPrefix)
}

// durableAdmin is a durable store's admin.Store with the queue's
// in-process parts: a running job of this process is cancelled at once,
// and the target actions are the queue's. They act on the engine, which
// changes its view at once (so TargetList reports the change, with this
// process's failure counts, running and parked jobs) and writes it
// through to a TargetStore, whose announcement reaches every process.
// The store's own admin.Targets (what queuectl uses, with no queue
// running) is not promoted: only admin.Store's methods are embedded.
type durableAdmin[T any] struct {
	admin.Store
	q *Queue[T]
}

// ListBounded implements admin.BoundedLister with the store's, when it
// has one (the embedded admin.Store does not promote it); otherwise it is
// the store's List, never partial.
func (d durableAdmin[T]) ListBounded(ctx context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) (admin.Listed, error) {
	if b, ok := d.Store.(admin.BoundedLister); ok {
		return b.ListBounded(ctx, f, oldest, after, limit, payload)
	}
	jobs, err := d.Store.List(ctx, f, oldest, after, limit, payload)
	return admin.Listed{Jobs: jobs}, err
}

// Delete asks the store, and reports the job deleted (EventDeleted):
// the store does not say whether the job had ended, so the event names
// only its ID.
func (d durableAdmin[T]) Delete(ctx context.Context, id int64) error {
	if err := d.Store.Delete(ctx, id); err != nil {
		return err
	}
	d.q.emit(EventDeleted, &Job[T]{ID: id}, nil, 0)
	return nil
}

// Cancel asks the store, and cancels the job at once if this process
// runs it.
func (d durableAdmin[T]) Cancel(ctx context.Context, id int64) error {
	err := d.Store.Cancel(ctx, id)
	d.q.cancelRunning(id)
	return err
}

// Pause pauses the store's queue, and this process's workers at once.
func (d durableAdmin[T]) Pause(ctx context.Context) error {
	if err := d.Store.Pause(ctx); err != nil {
		return err
	}
	d.q.setPaused(true)
	return nil
}

// Resume resumes the store's queue and this process's workers.
func (d durableAdmin[T]) Resume(ctx context.Context) error {
	if err := d.Store.Resume(ctx); err != nil {
		return err
	}
	d.q.setPaused(false)
	return nil
}

func (d durableAdmin[T]) TargetList(ctx context.Context) ([]admin.TargetInfo, error) {
	return memAdmin[T]{q: d.q}.TargetList(ctx)
}
func (d durableAdmin[T]) Suspend(ctx context.Context, name string, t time.Duration) error {
	return memAdmin[T]{q: d.q}.Suspend(ctx, name, t)
}
func (d durableAdmin[T]) ResumeTarget(ctx context.Context, name string) error {
	return memAdmin[T]{q: d.q}.ResumeTarget(ctx, name)
}
func (d durableAdmin[T]) Disable(ctx context.Context, name, reason string) error {
	return memAdmin[T]{q: d.q}.Disable(ctx, name, reason)
}
func (d durableAdmin[T]) Enable(ctx context.Context, name string) error {
	return memAdmin[T]{q: d.q}.Enable(ctx, name)
}

// RunTimes implements admin.RunTimer: this process's workers time runs
// whatever the store.
func (d durableAdmin[T]) RunTimes() admin.RunTimes { return d.q.runTimes() }

var (
	_ admin.RunTimer = durableAdmin[int]{}
	_ admin.RunTimer = memAdmin[int]{}
	_ admin.Targets  = durableAdmin[int]{}
	_ admin.Targets  = memAdmin[int]{}
	_ admin.Store    = memAdmin[int]{}

	_ admin.BoundedLister = memAdmin[int]{}
	_ admin.BoundedLister = durableAdmin[int]{}
)

// memPos converts an admin cursor to the in-memory store's position.
func (q *Queue[T]) memPos(c *admin.Cursor, ready bool) *memstore.Position {
	if c == nil {
		return nil
	}
	p := memstore.Position{ID: c.ID}
	if !ready {
		p.At = q.mem.Instant(c.At)
	}
	return &p
}

// emitQueue reports an event about the queue itself (EventPaused,
// EventUnpaused) to the hooks.
func (q *Queue[T]) emitQueue(kind EventKind) {
	if q.obs != nil && len(q.obs.hooks) > 0 {
		q.obs.send(Event{Kind: kind, Time: q.clock.Now()})
	}
}
