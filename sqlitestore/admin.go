package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit/durable"
)

var (
	_ admin.Store         = (*adminStore[int])(nil)
	_ admin.Targets       = (*adminStore[int])(nil)
	_ admin.BoundedLister = (*adminStore[int])(nil)
)

// Admin returns the store's admin API backend: pass it to admin.New to
// inspect and act on the queue's jobs (queue.Queue's Admin does). It
// works once the store was passed to queue.NewWithStore, whether the
// queue runs or not, as queuectl uses it; before that, every method
// returns ErrNotBound. Its target actions work on the fleet's target
// health in the queuekit_targets table, which every running process of
// the queue applies on the announcement.
func (s *Store[T]) Admin() admin.Store {
	return &adminStore[T]{s: s, Targets: durable.Targets{Load: s.LoadTargets, Save: s.SaveTargets,
		Now: func() time.Time { return s.cfg.Clock.Now() }, Release: s.ReleaseHeld}}
}

type adminStore[T any] struct {
	s *Store[T]
	durable.Targets
}

var (
	errCancelledByAdmin = errors.New("cancelled by an operator (admin Cancel)")
	errDeletedByAdmin   = errors.New("deleted by an operator (admin Delete)")
)

func (s *Store[T]) adminReady() error {
	if !s.bound.Load() {
		return ErrNotBound
	}
	return nil
}

// listPlans: the stored states of each admin state and the column its
// order (and cursor) is on.
var listPlans = map[admin.State]struct{ where, col string }{
	admin.Ready:     {where: `state = 'available'`, col: "created_at"},
	admin.Scheduled: {where: `state IN ('scheduled', 'retryable', 'pending')`, col: "run_at"},
	admin.Running:   {where: `state = 'running' AND lease_expires_at IS NOT NULL`, col: "attempted_at"},
	admin.Dead:      {where: `state = 'dead'`, col: "finalized_at"},
	admin.Done:      {where: `state = 'completed'`, col: "finalized_at"},
	admin.Cancelled: {where: `state = 'cancelled'`, col: "finalized_at"},
}

// adminCols are the columns a JobInfo is read from (scanInfo).
const adminCols = `id, key, group_key, target, priority, state, attempt, max_attempts, run_at, created_at,
    CASE state WHEN 'available' THEN created_at WHEN 'running' THEN attempted_at
        WHEN 'completed' THEN finalized_at WHEN 'dead' THEN finalized_at WHEN 'cancelled' THEN finalized_at
        ELSE coalesce(attempted_at, created_at) END,
    coalesce(last_error, ''), cancel_requested, meta`

// List implements admin.Store through ListBounded (admin.ListAll).
func (a *adminStore[T]) List(ctx context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) ([]admin.JobInfo, error) {
	return admin.ListAll(ctx, a, f, oldest, after, limit, payload)
}

// ListBounded implements admin.BoundedLister: keyset paging over the
// state's index (ready: created_at; scheduled, reruns included: run_at;
// running: attempted_at; ended: finalized_at; then id). A filtered page
// reads at most admin.MaxExamined jobs of the state. Waiting is always
// empty: a durable store shows deferred jobs as scheduled.
func (a *adminStore[T]) ListBounded(ctx context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) (admin.Listed, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.Listed{}, err
	}
	plan, ok := listPlans[f.State]
	if !ok {
		return admin.Listed{}, nil
	}
	filtered := f.Priority != "" || f.Target != "" || f.KeyPrefix != ""
	weight := 0
	if f.Priority != "" {
		if weight, ok = s.weight(f.Priority); !ok {
			return admin.Listed{}, nil
		}
	}
	cmp, dir := "<", "DESC"
	if oldest {
		cmp, dir = ">", "ASC"
	}
	payloadCol := "NULL"
	if payload {
		payloadCol = "payload"
	}
	q := "SELECT " + adminCols + ", " + payloadCol + " FROM queuekit_jobs WHERE queue = ? AND " + plan.where
	args := []any{s.cfg.Name}
	if after != nil {
		q += fmt.Sprintf(" AND (coalesce(%s, 0), id) %s (?, ?)", plan.col, cmp)
		args = append(args, toNS(after.At), after.ID)
	}
	n := limit
	if filtered {
		n = admin.MaxExamined
	}
	q += fmt.Sprintf(" ORDER BY coalesce(%s, 0) %s, id %s LIMIT ?", plan.col, dir, dir)
	args = append(args, n)
	rows, err := s.db.r.QueryContext(ctx, q, args...)
	if err != nil {
		return admin.Listed{}, s.adminErr("list", err)
	}
	var l admin.Listed
	var last admin.JobInfo
	err = s.scanInfos(rows, func(j admin.JobInfo, weightOf int) bool {
		l.Examined++
		last = j
		if filtered && (f.Priority != "" && weightOf != weight || f.Target != "" && j.Target != f.Target ||
			f.KeyPrefix != "" && !strings.HasPrefix(j.Key, f.KeyPrefix)) {
			j.Payload = nil
			return true
		}
		l.Jobs = append(l.Jobs, j)
		return len(l.Jobs) < limit
	})
	if err != nil {
		return admin.Listed{}, s.adminErr("list", err)
	}
	if filtered && len(l.Jobs) < limit && l.Examined == admin.MaxExamined {
		c := admin.Position(last)
		l.Stop = &c
	}
	return l, nil
}

func (s *Store[T]) weight(label string) (int, bool) {
	for _, p := range s.cfg.Priorities {
		if p.Name == label {
			return p.Weight, true
		}
	}
	return 0, false
}

// scanInfos reads rows of adminCols plus the payload, calling each with
// every job until it returns false.
func (s *Store[T]) scanInfos(rows *sql.Rows, each func(j admin.JobInfo, weight int) bool) error {
	defer rows.Close()
	for rows.Next() {
		var (
			j                       admin.JobInfo
			key, group, payload     []byte
			weight, cancelReq       int
			state                   string
			runAt, created, updated sql.NullInt64
			meta                    sql.NullString
		)
		if err := rows.Scan(&j.ID, &key, &group, &j.Target, &weight, &state, &j.Attempt, &j.MaxAttempts,
			&runAt, &created, &updated, &j.LastError, &cancelReq, &meta, &payload); err != nil {
			return err
		}
		j.Key, j.Group, j.Priority = string(key), string(group), s.label(weight)
		j.State = adminState(state)
		j.RunAt, j.Created, j.Updated = fromNull(runAt), fromNull(created), fromNull(updated)
		if j.State == admin.Running && cancelReq != 0 && j.LastError == "" {
			j.LastError = "cancel requested"
		}
		_ = metaFrom(&j.Meta, meta)
		j.Payload = payload
		if !each(j, weight) {
			return nil
		}
	}
	return rows.Err()
}

// adminState maps a stored state to the admin API's.
func adminState(st string) admin.State {
	switch st {
	case stAvailable:
		return admin.Ready
	case stRunning:
		return admin.Running
	case stCompleted:
		return admin.Done
	case stDead:
		return admin.Dead
	case stCancelled:
		return admin.Cancelled
	}
	return admin.Scheduled // scheduled, retryable, pending
}

func (s *Store[T]) adminErr(what string, err error) error {
	s.noteErr(err)
	return fmt.Errorf("sqlitestore: admin %s: %w", what, err)
}

func (s *Store[T]) getOne(ctx context.Context, name, q string, payload bool, args ...any) (admin.JobInfo, error) {
	payloadCol := "NULL"
	if payload {
		payloadCol = "payload"
	}
	rows, err := s.db.r.QueryContext(ctx, strings.ReplaceAll(q, "{cols}", adminCols+", "+payloadCol), args...)
	if err != nil {
		return admin.JobInfo{}, s.adminErr("get", err)
	}
	var out []admin.JobInfo
	if err := s.scanInfos(rows, func(j admin.JobInfo, _ int) bool { out = append(out, j); return false }); err != nil {
		return admin.JobInfo{}, s.adminErr("get", err)
	}
	if len(out) == 0 {
		return admin.JobInfo{}, fmt.Errorf("sqlitestore: %s: %w", name, admin.ErrNotFound)
	}
	return out[0], nil
}

// Get implements admin.Store.
func (a *adminStore[T]) Get(ctx context.Context, id int64, payload bool) (admin.JobInfo, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.JobInfo{}, err
	}
	return s.getOne(ctx, fmt.Sprintf("job %d", id), "SELECT {cols} FROM queuekit_jobs WHERE id = ? AND queue = ?", payload, id, s.cfg.Name)
}

// GetKey implements admin.Store: the live job with key, else its rerun,
// else the newest ended job with it.
func (a *adminStore[T]) GetKey(ctx context.Context, key string, payload bool) (admin.JobInfo, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.JobInfo{}, err
	}
	return s.getOne(ctx, fmt.Sprintf("key %q", key), `SELECT {cols} FROM queuekit_jobs WHERE queue = ? AND key = ? AND key <> x''
		ORDER BY CASE WHEN state IN `+liveStates+` THEN 0 WHEN state = 'pending' THEN 1 ELSE 2 END, finalized_at DESC LIMIT 1`,
		payload, s.cfg.Name, kb(key))
}

// Counts implements admin.Store: every job of the queue the file holds,
// by state (ended ones within their retention). Waiting is always 0.
func (a *adminStore[T]) Counts(ctx context.Context) (map[admin.State]int, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return nil, err
	}
	rows, err := s.db.r.QueryContext(ctx, "SELECT state, count(*) FROM queuekit_jobs WHERE queue = ? GROUP BY state", s.cfg.Name)
	if err != nil {
		return nil, s.adminErr("counts", err)
	}
	defer rows.Close()
	out := make(map[admin.State]int, len(admin.States))
	for rows.Next() {
		var st string
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, s.adminErr("counts", err)
		}
		out[adminState(st)] += n
	}
	if err := rows.Err(); err != nil {
		return nil, s.adminErr("counts", err)
	}
	return out, nil
}

// why returns the error for an action on job id that changed nothing.
func (s *Store[T]) why(ctx context.Context, tx dbtx, what string, id int64) error {
	var st string
	err := tx.QueryRowContext(ctx, "SELECT state FROM queuekit_jobs WHERE id = ? AND queue = ?", id, s.cfg.Name).Scan(&st)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("sqlitestore: %s job %d: %w", what, id, admin.ErrNotFound)
	case err != nil:
		return err
	}
	return fmt.Errorf("sqlitestore: %s job %d (%s): %w", what, id, adminState(st), admin.ErrState)
}

// adminFailed reports whether err is the admin API's answer rather than
// a failure of the file.
func adminFailed(err error) bool {
	return err != nil && !errors.Is(err, admin.ErrNotFound) && !errors.Is(err, admin.ErrState) && !errors.Is(err, queuetype.ErrDuplicate)
}

// Retry implements admin.Store: a dead or cancelled job becomes ready
// now, with its attempts reset. Capacity is not checked. If another live
// job holds its key, it returns a *queue.DuplicateError (matching
// queue.ErrDuplicate) and the job stays as it was.
func (a *adminStore[T]) Retry(ctx context.Context, id int64) error {
	s := a.s
	if err := s.adminReady(); err != nil {
		return err
	}
	now := s.now()
	err := s.db.write(ctx, func(tx *wtx) error {
		var key []byte
		err := tx.QueryRowContext(ctx, `SELECT key FROM queuekit_jobs WHERE id = ? AND queue = ? AND state IN ('dead', 'cancelled')`,
			id, s.cfg.Name).Scan(&key)
		if errors.Is(err, sql.ErrNoRows) {
			return s.why(ctx, tx, "retry", id)
		}
		if err != nil {
			return err
		}
		if len(key) > 0 {
			var one int
			err := tx.QueryRowContext(ctx, `SELECT 1 FROM queuekit_jobs WHERE queue = ? AND key = ? AND state IN `+liveStates,
				s.cfg.Name, key).Scan(&one)
			if err == nil {
				return fmt.Errorf("sqlitestore: retry job %d: %w", id, &queuetype.DuplicateError{Key: string(key)})
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'available', attempt = 0, run_at = ?, scheduled_at = NULL,
			finalized_at = NULL, cancel_requested = 0, lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL
			WHERE id = ?`, now, id)
		return err
	})
	if adminFailed(err) {
		return s.adminErr("retry", err)
	}
	if err != nil {
		return err
	}
	s.madeReady(1)
	return nil
}

type adminRow struct {
	state, target string
	key           []byte
	weight, att   int
}

// Delete implements admin.Store: the row is deleted unless the job is
// running (ErrState: cancel it instead). A job that had not run to its
// end is reported as cancelled, and a coalesced rerun waiting for its
// key becomes ready.
func (a *adminStore[T]) Delete(ctx context.Context, id int64) error {
	s := a.s
	if err := s.adminReady(); err != nil {
		return err
	}
	now := s.now()
	var r adminRow
	var made bool
	err := s.db.write(ctx, func(tx *wtx) error {
		err := tx.QueryRowContext(ctx, `DELETE FROM queuekit_jobs WHERE id = ? AND queue = ? AND state <> 'running'
			RETURNING state, key, target, priority, attempt`, id, s.cfg.Name).Scan(&r.state, &r.key, &r.target, &r.weight, &r.att)
		if errors.Is(err, sql.ErrNoRows) {
			return s.why(ctx, tx, "delete", id)
		}
		if err != nil {
			return err
		}
		made, err = s.releaseRerun(ctx, tx, r.key, now)
		return err
	})
	if adminFailed(err) {
		return s.adminErr("delete", err)
	}
	if err != nil {
		return err
	}
	if made {
		s.madeReady(1)
	}
	switch r.state {
	case stAvailable:
		s.ready.Add(-1)
		fallthrough
	case stScheduled, stRetryable, stPending:
		s.report(queuetype.EventCancelled, id, r.key, r.target, r.weight, r.att, errDeletedByAdmin)
	}
	return nil
}

// Cancel implements admin.Store. A ready or scheduled job (a rerun too)
// ends cancelled at once, and a rerun waiting for its key becomes ready.
// A running job is marked: the process running it learns at its next
// heartbeat (within a third of the lease TTL), cancels the job's context
// and ends it as cancelled; if that process is gone, the lease rescue
// ends it as cancelled. Cancelling a running job twice is not an error.
func (a *adminStore[T]) Cancel(ctx context.Context, id int64) error {
	s := a.s
	if err := s.adminReady(); err != nil {
		return err
	}
	now := s.now()
	var r adminRow
	var made bool
	err := s.db.write(ctx, func(tx *wtx) error {
		err := tx.QueryRowContext(ctx, `UPDATE queuekit_jobs SET
			state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
			finalized_at = CASE WHEN state = 'running' THEN finalized_at ELSE ? END,
			last_error = CASE WHEN state = 'running' THEN last_error ELSE ? END,
			cancel_requested = CASE WHEN state = 'running' THEN 1 ELSE 0 END
			WHERE id = ? AND queue = ? AND state IN ('scheduled', 'available', 'running', 'retryable', 'pending')
			RETURNING state, key, target, priority, attempt`, now, errCancelledByAdmin.Error(), id, s.cfg.Name).
			Scan(&r.state, &r.key, &r.target, &r.weight, &r.att)
		if errors.Is(err, sql.ErrNoRows) {
			return s.why(ctx, tx, "cancel", id)
		}
		if err != nil || r.state == stRunning {
			return err
		}
		made, err = s.releaseRerun(ctx, tx, r.key, now)
		return err
	})
	if adminFailed(err) {
		return s.adminErr("cancel", err)
	}
	if err != nil {
		return err
	}
	if made {
		s.madeReady(1)
	}
	if r.state != stRunning {
		s.report(queuetype.EventCancelled, id, r.key, r.target, r.weight, r.att, errCancelledByAdmin)
		s.refreshLen(ctx)
	}
	return nil
}

// Pause implements admin.Store: the queue's control row says paused, and
// every process's claim then takes nothing. Enqueues, promotion,
// outcomes and lease rescue go on; running jobs run to their end.
func (a *adminStore[T]) Pause(ctx context.Context) error { return a.s.setPaused(ctx, true) }

// Resume implements admin.Store: claims start again.
func (a *adminStore[T]) Resume(ctx context.Context) error { return a.s.setPaused(ctx, false) }

func (s *Store[T]) setPaused(ctx context.Context, paused bool) error {
	if err := s.adminReady(); err != nil {
		return err
	}
	err := s.db.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO queuekit_queues (queue, paused, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at`,
			s.cfg.Name, paused, time.Now().UnixNano())
		return err
	})
	if err != nil {
		return s.adminErr("pause", err)
	}
	if !paused {
		s.empty.Store(false)
		kick(s.wake)
	}
	return nil
}

// Paused implements admin.Store.
func (a *adminStore[T]) Paused(ctx context.Context) (bool, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return false, err
	}
	var p bool
	if err := s.db.r.QueryRowContext(ctx, "SELECT coalesce((SELECT paused FROM queuekit_queues WHERE queue = ?), 0)", s.cfg.Name).Scan(&p); err != nil {
		return false, s.adminErr("paused", err)
	}
	return p, nil
}
