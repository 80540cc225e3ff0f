package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/internal/memstore"
)

// memAdmin is the admin backend of a queue whose store is not an
// admin.Store: the in-memory store's ready and scheduled jobs, the
// engine's running and parked jobs, and the queue's retention of dead
// jobs.
type memAdmin[T any] struct{ q *Queue[T] }

// errAdminCancelled is the cause recorded for a job the admin API
// cancelled.
var errAdminCancelled = errors.New("queue: cancelled by the admin API")

// found is a job an admin listing found, with its state's time.
type found[T any] struct {
	job     Job[T]
	st      admin.State
	updated time.Time
	err     string
}

func (f *found[T]) pos() admin.Cursor {
	switch f.st {
	case admin.Ready:
		return admin.Cursor{ID: f.job.ID}
	case admin.Scheduled, admin.Waiting:
		return admin.Cursor{At: f.job.RunAt, ID: f.job.ID}
	}
	return admin.Cursor{At: f.updated, ID: f.job.ID}
}

func (m memAdmin[T]) info(f *found[T], payload bool) (admin.JobInfo, error) {
	ji, err := m.q.jobInfo(&f.job, f.st, f.updated, payload)
	ji.LastError = f.err
	return ji, err
}

// List implements admin.Store through ListBounded (admin.ListAll).
func (m memAdmin[T]) List(ctx context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) ([]admin.JobInfo, error) {
	return admin.ListAll(ctx, m, f, oldest, after, limit, payload)
}

// ListBounded implements admin.BoundedLister. A filtered List examines at most
// admin.MaxExamined jobs of the state in its order (admin.Store.List).
func (m memAdmin[T]) ListBounded(_ context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) (admin.Listed, error) {
	q := m.q
	var all []found[T]
	switch f.State {
	case admin.Ready, admin.Scheduled:
		if q.mem == nil {
			return admin.Listed{}, fmt.Errorf("%w: listing %s jobs of a %T", admin.ErrUnsupported, f.State, q.store)
		}
		return m.listPending(f, oldest, after, limit, payload)
	case admin.Running:
		all = m.running()
	case admin.Waiting:
		all = m.waiting()
	case admin.Dead:
		all = m.dead()
	default:
		return admin.Listed{}, nil // the in-memory store keeps no done or cancelled jobs
	}
	all = slices.DeleteFunc(all, func(x found[T]) bool {
		if after == nil {
			return false
		}
		p := x.pos()
		if oldest {
			return !after.Before(p)
		}
		return !p.Before(*after)
	})
	slices.SortFunc(all, func(a, b found[T]) int {
		pa, pb := a.pos(), b.pos()
		c := 0
		if pa.Before(pb) {
			c = -1
		} else if pb.Before(pa) {
			c = 1
		}
		if !oldest {
			c = -c
		}
		return c
	})
	var l admin.Listed
	if f.Filtered() && len(all) > admin.MaxExamined {
		all = all[:admin.MaxExamined]
		p := all[len(all)-1].pos()
		l.Stop = &p
	}
	l.Examined = len(all)
	for i := range all {
		if len(l.Jobs) == limit {
			l.Stop, l.Examined = nil, i
			break
		}
		if !q.matches(f, &all[i].job) {
			continue
		}
		ji, err := m.info(&all[i], payload)
		if err != nil {
			return admin.Listed{}, err
		}
		l.Jobs = append(l.Jobs, ji)
	}
	return l, nil
}

// listPending lists ready or scheduled jobs from the in-memory store:
// the store filters an unfiltered listing's walk itself; a filtered one
// walks at most admin.MaxExamined jobs and filters them here.
func (m memAdmin[T]) listPending(f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) (admin.Listed, error) {
	q := m.q
	ready := f.State == admin.Ready
	lq := memstore.ListQuery{Ready: ready, Oldest: oldest, After: q.memPos(after, ready), Limit: limit}
	var (
		jobs []Job[T]
		l    admin.Listed
	)
	if !f.Filtered() {
		jobs, _ = q.mem.List(lq)
		l.Examined = len(jobs)
	} else {
		var last *memstore.Position
		jobs, last = q.mem.Walk(lq, admin.MaxExamined)
		l.Examined = len(jobs)
		if last != nil {
			l.Examined = admin.MaxExamined
			l.Stop = &admin.Cursor{At: q.mem.Time(last.At), ID: last.ID}
		}
		kept := jobs[:0]
		for i := range jobs {
			if len(kept) == limit {
				// Full: the page ends at its last job, not at the walk's.
				l.Stop, l.Examined = nil, i
				break
			}
			if q.matches(f, &jobs[i]) {
				kept = append(kept, jobs[i])
			}
		}
		jobs = kept
	}
	l.Jobs = make([]admin.JobInfo, 0, len(jobs))
	for i := range jobs {
		ji, err := m.info(&found[T]{job: jobs[i], st: f.State}, payload)
		if err != nil {
			return admin.Listed{}, err
		}
		l.Jobs = append(l.Jobs, ji)
	}
	return l, nil
}

func (m memAdmin[T]) running() []found[T] {
	var out []found[T]
	m.q.stampNow()
	m.q.eachWorker(func(w *worker[T]) {
		if id, ok := w.pin(); ok {
			r := w.run
			out = append(out, found[T]{job: *r.job, st: admin.Running, updated: *r.start})
			w.unpin(id)
		}
	})
	return out
}

func (m memAdmin[T]) waiting() []found[T] {
	var out []found[T]
	m.q.targets.eachWaiting(func(job *Job[T]) {
		out = append(out, found[T]{job: *job, st: admin.Waiting})
	})
	return out
}

func (m memAdmin[T]) dead() []found[T] {
	q := m.q
	q.adm.mu.Lock()
	defer q.adm.mu.Unlock()
	out := make([]found[T], len(q.adm.dead))
	for i, d := range q.adm.dead {
		out[i] = found[T]{job: d.job, st: admin.Dead, updated: d.updated, err: d.err}
	}
	return out
}

// find looks for job id in every state.
func (m memAdmin[T]) find(id int64) (found[T], bool) {
	for _, list := range [][]found[T]{m.running(), m.waiting(), m.dead()} {
		for _, f := range list {
			if f.job.ID == id {
				return f, true
			}
		}
	}
	if m.q.mem != nil {
		if job, ready, ok := m.q.mem.Find(id); ok {
			st := admin.Scheduled
			if ready {
				st = admin.Ready
			}
			return found[T]{job: job, st: st}, true
		}
	}
	return found[T]{}, false
}

// Get implements admin.Store.
func (m memAdmin[T]) Get(_ context.Context, id int64, payload bool) (admin.JobInfo, error) {
	f, ok := m.find(id)
	if !ok {
		return admin.JobInfo{}, fmt.Errorf("%w: job %d", admin.ErrNotFound, id)
	}
	return m.info(&f, payload)
}

// GetKey implements admin.Store.
func (m memAdmin[T]) GetKey(ctx context.Context, key string, payload bool) (admin.JobInfo, error) {
	for _, list := range [][]found[T]{m.running(), m.waiting()} {
		for i := range list {
			if list[i].job.Key == key {
				return m.info(&list[i], payload)
			}
		}
	}
	if m.q.mem != nil {
		for _, st := range []admin.State{admin.Ready, admin.Scheduled} {
			// The store's own key filter, unbounded: a key names one job.
			jobs, _ := m.q.mem.List(memstore.ListQuery{Ready: st == admin.Ready, Oldest: true, Limit: admin.MaxLimit, KeyPrefix: key})
			for i := range jobs {
				if jobs[i].Key == key {
					return m.info(&found[T]{job: jobs[i], st: st}, payload)
				}
			}
		}
	}
	dead := m.dead()
	for i := len(dead) - 1; i >= 0; i-- {
		if dead[i].job.Key == key {
			return m.info(&dead[i], payload)
		}
	}
	return admin.JobInfo{}, fmt.Errorf("%w: key %q", admin.ErrNotFound, key)
}

// Counts implements admin.Store.
func (m memAdmin[T]) Counts(ctx context.Context) (map[admin.State]int, error) {
	q := m.q
	c := map[admin.State]int{admin.Running: len(m.running()), admin.Waiting: int(q.targets.parked.Load())}
	q.adm.mu.Lock()
	c[admin.Dead] = len(q.adm.dead)
	q.adm.mu.Unlock()
	if q.mem != nil {
		st, err := q.mem.Stats(ctx)
		if err != nil {
			return nil, err
		}
		c[admin.Ready], c[admin.Scheduled] = st.Ready, st.Scheduled
	}
	return c, nil
}

// Retry implements admin.Store: the dead job is enqueued again, as a new
// job (a new ID) with the dead one's key, group, target, priority and
// payload; it leaves the dead jobs only when the enqueue succeeds.
func (m memAdmin[T]) Retry(ctx context.Context, id int64) error {
	q := m.q
	q.adm.mu.Lock()
	i := slices.IndexFunc(q.adm.dead, func(d deadJob[T]) bool { return d.job.ID == id })
	if i < 0 {
		q.adm.mu.Unlock()
		return m.notHere(id, "retry")
	}
	d := q.adm.dead[i]
	q.adm.dead = slices.Delete(q.adm.dead, i, i+1)
	q.adm.mu.Unlock()
	job := d.job
	job.ID, job.Attempt, job.RunAt = 0, 0, time.Time{}
	if err := q.Enqueue(ctx, job); err != nil {
		q.adm.mu.Lock()
		at, _ := slices.BinarySearchFunc(q.adm.dead, d, func(a, b deadJob[T]) int { return a.updated.Compare(b.updated) })
		q.adm.dead = slices.Insert(q.adm.dead, at, d)
		if len(q.adm.dead) > deadKeep {
			q.adm.dead = q.adm.dead[1:]
		}
		q.adm.mu.Unlock()
		return fmt.Errorf("queue: admin: retrying dead job %d: %w", id, err)
	}
	q.log.Info("dead job retried by the admin API", "job", id, "key", job.Key)
	return nil
}

// notHere is the error for an action on job id that is not where the
// action applies: ErrState if the queue holds it elsewhere, else
// ErrNotFound.
func (m memAdmin[T]) notHere(id int64, action string) error {
	if f, ok := m.find(id); ok {
		return fmt.Errorf("%w: %s job %d: it is %s", admin.ErrState, action, id, f.st)
	}
	return fmt.Errorf("%w: job %d", admin.ErrNotFound, id)
}

// Delete implements admin.Store.
func (m memAdmin[T]) Delete(ctx context.Context, id int64) error {
	q := m.q
	q.adm.mu.Lock()
	i := slices.IndexFunc(q.adm.dead, func(d deadJob[T]) bool { return d.job.ID == id })
	if i >= 0 {
		d := q.adm.dead[i]
		q.adm.dead = slices.Delete(q.adm.dead, i, i+1)
		q.adm.mu.Unlock()
		q.log.Info("dead job deleted by the admin API", "job", id)
		q.emit(EventDeleted, &d.job, nil, 0)
		return nil
	}
	q.adm.mu.Unlock()
	if m.cancelPending(id) {
		return nil
	}
	return m.notHere(id, "delete")
}

// cancelPending cancels the ready, scheduled or parked job id, counted
// and observed; false if it is none of these (now).
func (m memAdmin[T]) cancelPending(id int64) bool {
	q := m.q
	if q.mem != nil {
		if job, ok := q.mem.Remove(id); ok {
			q.ctr.cancelled.Add(1)
			q.emit(EventCancelled, &job, errAdminCancelled, 0)
			return true
		}
	}
	jobs := q.targets.takeWaiting(func(j *Job[T]) bool { return j.ID == id })
	for i := range jobs {
		if q.endClaimed(&jobs[i], errAdminCancelled) {
			q.ctr.cancelled.Add(1)
			q.emit(EventCancelled, &jobs[i], errAdminCancelled, 0)
		}
	}
	return len(jobs) > 0
}

// Cancel implements admin.Store.
func (m memAdmin[T]) Cancel(_ context.Context, id int64) error {
	if m.cancelPending(id) || m.q.cancelRunning(id) {
		return nil
	}
	return m.notHere(id, "cancel")
}

// RunTimes implements admin.RunTimer.
func (m memAdmin[T]) RunTimes() admin.RunTimes { return m.q.runTimes() }

// Pause implements admin.Store.
func (m memAdmin[T]) Pause(context.Context) error { m.q.setPaused(true); return nil }

// Resume implements admin.Store.
func (m memAdmin[T]) Resume(context.Context) error { m.q.setPaused(false); return nil }

// Paused implements admin.Store.
func (m memAdmin[T]) Paused(context.Context) (bool, error) {
	p, _ := m.q.pausedNow()
	return p, nil
}

// TargetList implements admin.Targets.
func (m memAdmin[T]) TargetList(context.Context) ([]admin.TargetInfo, error) {
	sts := m.q.targets.statuses(m.q.clock.Now())
	out := make([]admin.TargetInfo, len(sts))
	for i, s := range sts {
		out[i] = admin.TargetInfo(s)
	}
	return out, nil
}

// Suspend implements admin.Targets.
func (m memAdmin[T]) Suspend(_ context.Context, name string, d time.Duration) error {
	return m.q.Suspend(name, d)
}

// ResumeTarget implements admin.Targets.
func (m memAdmin[T]) ResumeTarget(_ context.Context, name string) error { return m.q.Resume(name) }

// Disable implements admin.Targets.
func (m memAdmin[T]) Disable(_ context.Context, name, reason string) error {
	return m.q.Disable(name, errors.New(reason))
}

// Enable implements admin.Targets.
func (m memAdmin[T]) Enable(_ context.Context, name string) error { return m.q.Resume(name) }
