package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/queuekit/queue/internal/core"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
		q.adm.used.Store(true)
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
func cancelsRuns[T any](store Store[T]) bool {
	_, ok := store.(core.RunCanceller)
	return ok
}

// adminer is a store whose admin backend is a value of its own: the
// durable stores (pgstore, redisstore), whose Retry and Cancel are the
// queue.Store methods, so that the store itself cannot be an
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

// keepDead records a dead job for the in-memory admin backend.
func (q *Queue[T]) keepDead(job *Job[T], cause error) {
	if q.mem == nil {
		return
	}
	d := deadJob[T]{job: *job, updated: q.clock.Now()}
	if cause != nil {
		d.err = cause.Error()
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
// and how the API cancels it. Only the worker's goroutine and the admin
// API take mu, once each at the start and end of a run.
type workerRun[T any] struct {
	mu     sync.Mutex
	job    *Job[T] // nil when idle
	start  time.Time
	ctx    context.Context // the runs' parent context, remade after a cancel
	cancel context.CancelFunc
	cut    bool // the admin API cancelled the run
	on     bool // begin tracked the run; only the worker's goroutine reads and writes it
}

// begin marks job running on w and returns the context its run derives
// from.
func (r *workerRun[T]) begin(q *Queue[T], job *Job[T]) context.Context {
	if !q.adm.used.Load() {
		return q.runCtx
	}
	now := q.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || r.cut {
		if r.cancel != nil {
			r.cancel()
		}
		r.ctx, r.cancel = context.WithCancel(q.runCtx)
	}
	r.job, r.start, r.cut, r.on = job, now, false, true
	return r.ctx
}

// end marks w idle and reports whether the admin API cancelled the run.
func (r *workerRun[T]) end() bool {
	if !r.on {
		return false // begin did not track the run
	}
	r.on = false
	r.mu.Lock()
	defer r.mu.Unlock()
	r.job = nil
	return r.cut
}

// stop releases the context when the worker exits.
func (r *workerRun[T]) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cancel != nil {
		r.cancel()
	}
}

// cancelRunning cancels the running job id if a worker of this process
// runs it; it reports whether one did.
func (q *Queue[T]) cancelRunning(id int64) bool {
	found := false
	q.eachWorker(func(w *worker[T]) {
		r := w.run
		r.mu.Lock()
		if r.job != nil && r.job.ID == id && !found {
			r.cut, found = true, true
			r.cancel()
		}
		r.mu.Unlock()
	})
	return found
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

// pauseWait waits while the queue is paused; false when ctx ends first.
func (q *Queue[T]) pauseWait(ctx context.Context) bool {
	for {
		p, ch := q.pausedNow()
		if !p {
			return true
		}
		select {
		case <-ch:
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
		} else {
			q.log.Info("queue resumed by the admin API")
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
		State: st, Attempt: job.Attempt, MaxAttempts: job.MaxAttempts, RunAt: job.RunAt, Updated: updated}
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
// and the target actions are the queue's.
type durableAdmin[T any] struct {
	admin.Store
	q *Queue[T]
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

var (
	_ admin.Targets = durableAdmin[int]{}
	_ admin.Targets = memAdmin[int]{}
	_ admin.Store   = memAdmin[int]{}
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
