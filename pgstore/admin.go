package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/storekit/durable"
)

var (
	_ admin.Store   = (*adminStore[int])(nil)
	_ admin.Targets = (*adminStore[int])(nil)

	_ admin.BoundedLister = (*adminStore[int])(nil)
)

// Admin returns the store's admin API backend: pass it to admin.New to
// inspect and act on the queue's jobs (queue.Queue's Admin does). It
// works once the store was passed to queue.New, whether the queue runs
// or not, as queuectl uses it; before that, every method returns
// ErrNotBound.
//
// Its target actions (admin.Targets, what queuectl targets uses) work on
// the fleet's target health in the queuekit_targets table
// (storekit.TargetStore), which every running queue applies on the NOTIFY
// announcement or within its 1 s reload; the last write wins.
// docs/OPERATIONS.md ("Target health and cadence") says what each action
// keeps and what a listing cannot show. (queue.Queue's Admin acts on
// targets through the queue instead.)
func (s *Store[T]) Admin() admin.Store {
	return &adminStore[T]{s: s, Targets: durable.Targets{Load: s.LoadTargets, Save: s.SaveTargets,
		Now: func() time.Time { return s.cfg.Clock.Now() }, Release: s.ReleaseHeld}}
}

// adminStore implements admin.Store for a Store (whose Retry and Cancel
// are storekit.Store's), and admin.Targets with durable.Targets.
type adminStore[T any] struct {
	s *Store[T]
	durable.Targets
}

// errCancelledByAdmin is the reason recorded on a job an operator
// cancelled (admin Cancel).
var errCancelledByAdmin = errors.New("cancelled by an operator (admin Cancel)")

// errDeletedByAdmin is the reason reported for a job an operator deleted
// before it ran to its end (admin Delete).
var errDeletedByAdmin = errors.New("deleted by an operator (admin Delete)")

// The admin API (package admin) works on a Store that was passed to
// queue.New (Init), started or not: queuectl uses it with no queue
// running. Every method is one statement, or one short transaction, on
// the jobs table, so it is atomic against the claims, outcomes, rescues
// and pruning of every process.

// noteCancels records which of this process's running jobs ids an
// operator asked to cancel, as the last heartbeat found them.
func (s *Store[T]) noteCancels(ids []int64, cancel map[int64]bool) {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	for _, id := range ids {
		if cancel[id] {
			s.cancelReq[id] = true
		} else {
			delete(s.cancelReq, id)
		}
	}
}

// CancelRequested reports whether the last Heartbeat found that an
// operator asked to cancel running job id (admin Cancel), rather than its
// lease lost: the queue then ends the job as cancelled.
func (s *Store[T]) CancelRequested(id int64) bool {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	return s.cancelReq[id]
}

// adminReady reports ErrNotBound before Init.
func (s *Store[T]) adminReady() error {
	if !s.bound.Load() {
		return ErrNotBound
	}
	return nil
}

// listPlan is how List reads one admin state: the stored states and the
// ordering column, and whether it lists through two branches (the due
// index for scheduled and retryable jobs, then coalesced reruns).
var listPlans = map[admin.State]struct {
	where, col string
	reruns     bool
	byPriority bool
}{
	admin.Ready:     {where: `state = 'available'`, col: "run_at", byPriority: true},
	admin.Scheduled: {where: `state IN ('scheduled', 'retryable')`, col: "run_at", reruns: true},
	admin.Running:   {where: `state = 'running' AND lease_expires_at IS NOT NULL`, col: "attempted_at"},
	admin.Dead:      {where: `state = 'dead'`, col: "finalized_at"},
	admin.Done:      {where: `state = 'completed'`, col: "finalized_at"},
	admin.Cancelled: {where: `state = 'cancelled'`, col: "finalized_at"},
}

// List implements admin.Store through ListBounded (admin.ListAll).
func (a *adminStore[T]) List(ctx context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) ([]admin.JobInfo, error) {
	return admin.ListAll(ctx, a, f, oldest, after, limit, payload)
}

// ListBounded implements admin.BoundedLister: keyset paging over the state's index
// (ready: run_at, the time each became ready, through the claim index,
// see listReady; scheduled: run_at, coalesced reruns included; running:
// attempted_at; ended: finalized_at; then id). Waiting is always empty: a
// durable store shows deferred jobs as scheduled.
//
// A filtered List reads at most admin.MaxExamined rows of the state
// through that index, in page order, in an inner select whose LIMIT is the
// bound, and tests the filters on those rows only (listWalkSQL): whatever
// the planner's statistics, it cannot scan or sort the whole state.
func (a *adminStore[T]) ListBounded(ctx context.Context, f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) (admin.Listed, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.Listed{}, err
	}
	sql, args, walk := s.listSQL(f, oldest, after, limit, payload)
	if sql == "" {
		return admin.Listed{}, nil // Waiting, or a priority no job has
	}
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return admin.Listed{}, s.adminErr("list", err)
	}
	if !walk {
		jobs, err := s.scanInfos(rows)
		if err != nil {
			return admin.Listed{}, s.adminErr("list", err)
		}
		return admin.Listed{Jobs: jobs, Examined: len(jobs)}, nil
	}
	var (
		l    admin.Listed
		hit  bool
		edge *admin.JobInfo
	)
	err = s.scanInfosWith(rows, []any{&hit, &l.Examined}, func(j admin.JobInfo) {
		if hit {
			l.Jobs = append(l.Jobs, j)
		} else {
			edge = &j
		}
	})
	if err != nil {
		return admin.Listed{}, s.adminErr("list", err)
	}
	if len(l.Jobs) < limit && l.Examined == admin.MaxExamined && edge != nil {
		c := admin.Position(*edge)
		l.Stop = &c
	}
	return l, nil
}

// listSQL returns ListBounded's statement and arguments, and whether it
// is a filtered walk (listWalkSQL) rather than a page (listPageSQL); ""
// when nothing can match.
func (s *Store[T]) listSQL(f admin.Filter, oldest bool, after *admin.Cursor, limit int, payload bool) (sql string, args []any, walk bool) {
	plan, ok := listPlans[f.State]
	if !ok {
		return "", nil, false // Waiting
	}
	args = []any{s.cfg.Name, limit, payload}
	var filters []string
	if f.Priority != "" {
		w, ok := s.weight(f.Priority)
		if !ok {
			return "", nil, false // no job has it
		}
		args = append(args, w)
		filters = append(filters, "priority = $"+strconv.Itoa(len(args))+"::integer")
	}
	if f.Target != "" {
		args = append(args, f.Target)
		filters = append(filters, "target = $"+strconv.Itoa(len(args))+"::text")
	}
	if f.KeyPrefix != "" {
		// A key stored as its digest (keys.go) is matched on its bytes.
		args = append(args, []byte(f.KeyPrefix), len(f.KeyPrefix))
		n := len(args)
		bytesCond := "key_bytes IS NOT NULL AND substr(key_bytes, 1, $" + strconv.Itoa(n) + "::integer) = $" + strconv.Itoa(n-1) + "::bytea"
		if utf8.ValidString(f.KeyPrefix) && strings.IndexByte(f.KeyPrefix, 0) < 0 { // text can hold it
			args = append(args, likePrefix(f.KeyPrefix))
			bytesCond = "key_bytes IS NULL AND key LIKE $" + strconv.Itoa(len(args)) + "::text OR " + bytesCond
		}
		filters = append(filters, "("+bytesCond+")")
	}
	cmp, dir := "<", "DESC"
	if oldest {
		cmp, dir = ">", "ASC"
	}
	cursor := ""
	if after != nil {
		args = append(args, after.At, after.ID)
		n := len(args)
		at := fmt.Sprintf("$%d::timestamptz", n-1)
		if plan.byPriority {
			at = readyAt(s.q.jobs, at, n)
		}
		cursor = fmt.Sprintf(" AND (%s, id) %s (%s, $%d::bigint)", plan.col, cmp, at, n)
	}
	var weights []int
	if plan.byPriority {
		weights = s.weights()
	}
	if len(filters) == 0 {
		return listPageSQL(s.q.jobs, plan.where, plan.col, plan.reruns, weights, cursor, dir), args, false
	}
	args = append(args, admin.MaxExamined)
	return listWalkSQL(s.q.jobs, plan.where, plan.col, plan.reruns, weights, cursor, strings.Join(filters, " AND "), dir, len(args)), args, true
}

// Ready jobs are listed in run_at, id order (run_at is when a job became
// ready: its enqueue for a job added ready, its due time for one
// promoted), read through the claim index (queue, priority, run_at, id):
// one branch per configured priority, each in that index's order, merged
// (a Merge Append, which reads each branch only as far as the page
// needs). No index of its own: migration 011 dropped the created_at one
// that migration 003 added, which every insert paid for.
//
// The admin cursor of a ready job holds its created_at (admin.Position),
// not its run_at: readyAt looks the cursor's job up by ID ($n) and pages
// from its run_at, which claims and outcomes leave as it was. A job gone
// since (deleted, or ended and pruned) pages from its created_at ($at),
// which is never after its run_at: oldest first may then list again a
// few jobs, never skip one.
func readyAt(jobs, at string, n int) string {
	return fmt.Sprintf("coalesce((SELECT run_at FROM %s WHERE id = $%d::bigint AND queue = $1::text), %s)", jobs, n, at)
}

// weights returns the configured priorities' weight column values, the
// branches of a ready listing (listReady): ready jobs of a weight no
// priority of this store's configuration has are not listed.
func (s *Store[T]) weights() []int {
	w := make([]int, 0, len(s.cfg.Priorities))
	for _, p := range s.cfg.Priorities {
		w = append(w, p.Weight)
	}
	return w
}

// listReady is a ready listing's rows in run_at, id order (dir), from the
// cursor, at most limit: one branch per weight through the claim index,
// each with the select list sel, merged.
func listReady(jobs, sel string, weights []int, cursor, dir, limit string) string {
	conds := make([]string, 0, len(weights))
	for _, w := range weights {
		conds = append(conds, "priority = "+strconv.Itoa(w))
	}
	if len(conds) == 0 {
		conds = append(conds, "false") // no priorities configured (not bound): nothing to list
	}
	branches := make([]string, len(conds))
	for i, c := range conds {
		branches[i] = "(SELECT " + sel + " FROM " + jobs + " WHERE queue = $1::text AND state = 'available' AND " +
			c + cursor + " ORDER BY run_at " + dir + ", id " + dir + " LIMIT " + limit + ")"
	}
	return strings.Join(branches, " UNION ALL ")
}

// listPageSQL is an unfiltered List's statement: limit ($2) rows of the
// state from the cursor, through the state's index.
func listPageSQL(jobs, where, col string, reruns bool, weights []int, cursor, dir string) string {
	if weights != nil {
		return "SELECT * FROM (" + listReady(jobs, adminCols+", CASE WHEN $3::boolean THEN payload END", weights, cursor, dir, "$2::bigint") +
			") u ORDER BY run_at " + dir + ", id " + dir + " LIMIT $2::bigint"
	}
	branch := func(where string) string {
		return "(SELECT " + adminCols + ", CASE WHEN $3::boolean THEN payload END FROM " + jobs +
			" WHERE queue = $1::text AND " + where + cursor +
			" ORDER BY " + col + " " + dir + ", id " + dir + " LIMIT $2::bigint)"
	}
	sql := branch(where)
	if reruns {
		sql = "SELECT * FROM (" + sql + " UNION ALL " + branch(`state = 'pending'`) + ") u ORDER BY " +
			"run_at " + dir + ", id " + dir + " LIMIT $2::bigint"
	}
	return sql
}

// listWalkSQL is a filtered List's statement. The walk (w) reads at most
// $bound rows of the state from the cursor in page order, each branch
// through the state's index with LIMIT $bound, and computes the filter
// on each as a column, so that the filter cannot change the plan. The
// answer is the first $2 rows of the walk that pass the filter (hit),
// then the walk's last row (not hit: where the next call resumes), each
// with the number of rows the walk read.
func listWalkSQL(jobs, where, col string, reruns bool, weights []int, cursor, filter, dir string, bound int) string {
	rdir := "DESC"
	if dir == "DESC" {
		rdir = "ASC"
	}
	b := "$" + strconv.Itoa(bound) + "::bigint"
	branch := func(where string) string {
		return "(SELECT id AS wid, " + col + " AS wat, (" + filter + ") AS whit FROM " + jobs +
			" WHERE queue = $1::text AND " + where + cursor +
			" ORDER BY " + col + " " + dir + ", id " + dir + " LIMIT " + b + ")"
	}
	walk := branch(where)
	if weights != nil {
		walk = "SELECT * FROM (" + listReady(jobs, "id AS wid, run_at AS wat, ("+filter+") AS whit", weights, cursor, dir, b) +
			") u ORDER BY wat " + dir + ", wid " + dir + " LIMIT " + b
	}
	if reruns {
		walk = "SELECT * FROM (" + walk + " UNION ALL " + branch(`state = 'pending'`) + ") u ORDER BY wat " + dir + ", wid " + dir + " LIMIT " + b
	}
	return "WITH w AS MATERIALIZED (" + walk + "),\n" +
		"pick AS ((SELECT wid AS pid, wat AS pat, true AS phit FROM w WHERE whit ORDER BY wat " + dir + ", wid " + dir + " LIMIT $2::bigint)\n" +
		"    UNION ALL (SELECT wid, wat, false FROM w ORDER BY wat " + rdir + ", wid " + rdir + " LIMIT 1))\n" +
		"SELECT " + adminCols + ", CASE WHEN $3::boolean AND phit THEN payload END, phit, (SELECT count(*) FROM w)\n" +
		"FROM pick JOIN " + jobs + " ON id = pid AND queue = $1::text ORDER BY phit DESC, pat " + dir + ", pid " + dir
}

// likePrefix returns the LIKE pattern of the strings that start with p.
func likePrefix(p string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(p) + "%"
}

// weight returns the weight column value of priority label.
func (s *Store[T]) weight(label string) (int, bool) {
	for _, p := range s.cfg.Priorities {
		if p.Name == label {
			return p.Weight, true
		}
	}
	return 0, false
}

// scanInfos reads rows of adminCols plus the payload.
func (s *Store[T]) scanInfos(rows pgx.Rows) ([]admin.JobInfo, error) {
	var out []admin.JobInfo
	err := s.scanInfosWith(rows, nil, func(j admin.JobInfo) { out = append(out, j) })
	return out, err
}

// scanInfosWith reads rows of adminCols plus the payload and then the
// columns extra points to, and calls each with every row's job (extra
// filled for it).
func (s *Store[T]) scanInfosWith(rows pgx.Rows, extra []any, each func(admin.JobInfo)) error {
	var (
		j         admin.JobInfo
		weight    int
		state     string
		cancelReq bool
		payload   []byte
		keyRaw    []byte
		groupRaw  []byte
		meta      []byte
	)
	dest := append([]any{&j.ID, &j.Key, &j.Group, &j.Target, &weight, &state, &j.Attempt, &j.MaxAttempts,
		&j.RunAt, &j.Created, &j.Updated, &j.LastError, &cancelReq, &keyRaw, &groupRaw, &meta, &payload}, extra...)
	_, err := pgx.ForEachRow(rows, dest, func() error {
		j.Priority = s.label(weight)
		j.Key, j.Group = loadKey(j.Key, keyRaw), loadKey(j.Group, groupRaw)
		j.Meta = s.loadMeta(j.ID, meta)
		j.State = adminState(state)
		if j.State == admin.Running && cancelReq && j.LastError == "" {
			j.LastError = "cancel requested"
		}
		j.Payload = payload
		each(j)
		j, payload = admin.JobInfo{}, nil
		return nil
	})
	return err
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

// adminErr wraps a statement's error for the admin API.
func (s *Store[T]) adminErr(what string, err error) error {
	s.noteErr(err)
	if nm := s.notMigrated(err); nm != nil {
		return nm
	}
	return fmt.Errorf("pgstore: admin %s: %w", what, err)
}

// Get implements admin.Store.
func (a *adminStore[T]) Get(ctx context.Context, id int64, payload bool) (admin.JobInfo, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.JobInfo{}, err
	}
	return s.getOne(ctx, "get", fmt.Sprintf("job %d", id), s.q.adminGet, id, s.cfg.Name, payload)
}

// GetKey implements admin.Store.
func (a *adminStore[T]) GetKey(ctx context.Context, key string, payload bool) (admin.JobInfo, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return admin.JobInfo{}, err
	}
	return s.getOne(ctx, "get", fmt.Sprintf("key %q", key), s.q.adminGetKey, s.cfg.Name, storedKey(key), payload)
}

func (s *Store[T]) getOne(ctx context.Context, what, name, sql string, args ...any) (admin.JobInfo, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return admin.JobInfo{}, s.adminErr(what, err)
	}
	out, err := s.scanInfos(rows)
	if err != nil {
		return admin.JobInfo{}, s.adminErr(what, err)
	}
	if len(out) == 0 {
		return admin.JobInfo{}, fmt.Errorf("pgstore: %s: %w", name, admin.ErrNotFound)
	}
	return out[0], nil
}

// Counts implements admin.Store: every job of the queue the table holds,
// by state (completed and cancelled ones within their retention).
// Waiting is always 0 (deferred jobs count as scheduled). It reads
// every row of the queue: its cost grows with the table.
func (a *adminStore[T]) Counts(ctx context.Context) (map[admin.State]int, error) {
	s := a.s
	if err := s.adminReady(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.q.adminCounts, s.cfg.Name)
	if err != nil {
		return nil, s.adminErr("counts", err)
	}
	out := make(map[admin.State]int, len(admin.States))
	var (
		st string
		n  int
	)
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		out[adminState(st)] += n
		return nil
	})
	if err != nil {
		return nil, s.adminErr("counts", err)
	}
	return out, nil
}

// why returns the error for an action on job id that changed nothing:
// ErrNotFound when the queue has no such job, else ErrState naming its
// state.
func (s *Store[T]) why(ctx context.Context, what string, id int64) error {
	var st string
	err := s.pool.QueryRow(ctx, s.q.adminState, id, s.cfg.Name).Scan(&st)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("pgstore: %s job %d: %w", what, id, admin.ErrNotFound)
	case err != nil:
		return s.adminErr(what, err)
	}
	return fmt.Errorf("pgstore: %s job %d (%s): %w", what, id, adminState(st), admin.ErrState)
}

// Retry implements admin.Store: a dead or cancelled job becomes ready
// now, with its attempts reset, and the queue's processes are notified.
// Capacity is not checked. If another live job holds its key, it returns
// a *queue.DuplicateError (matching queue.ErrDuplicate) and the job
// stays as it was. Against the janitor, whichever statement takes the
// row first wins: a job pruned first is not found; a job retried first
// is no longer ended, and pruning leaves it alone.
func (a *adminStore[T]) Retry(ctx context.Context, id int64) error {
	s := a.s
	if err := s.adminReady(); err != nil {
		return err
	}
	var (
		key, target     string
		weight, attempt int
		notes           int64
	)
	err := s.pool.QueryRow(ctx, s.q.adminRetry, id, s.cfg.Name, s.cfg.Clock.Now(), s.channel).
		Scan(&id, &key, &target, &weight, &attempt, &notes)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s.why(ctx, "retry", id)
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation: the key is taken
		s.noteErr(nil)
		return fmt.Errorf("pgstore: retry job %d: %w", id, &queue.DuplicateError{Key: s.keyOf(ctx, id)})
	case err != nil:
		return s.adminErr("retry", err)
	}
	s.ready.Add(1)
	kick(s.wakeFetch)
	return nil
}

// keyOf returns job id's key, for an error message ("" if unknown).
func (s *Store[T]) keyOf(ctx context.Context, id int64) string {
	var key string
	_ = s.pool.QueryRow(ctx, "SELECT key FROM "+s.q.jobs+" WHERE id = $1", id).Scan(&key)
	return key
}

// Delete implements admin.Store: the row is deleted unless the job is
// running (ErrState: cancel it instead). A job that had not run to its
// end (ready, scheduled, a rerun) is reported as cancelled
// (queue.EventCancelled), and a coalesced rerun waiting for its key
// becomes ready.
func (a *adminStore[T]) Delete(ctx context.Context, id int64) error {
	s := a.s
	if err := s.adminReady(); err != nil {
		return err
	}
	var (
		st, key, target string
		weight, attempt int
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, s.q.adminDelete, id, s.cfg.Name).Scan(&st, &key, &target, &weight, &attempt); err != nil {
			return err
		}
		return s.releaseKey(ctx, tx, key)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s.why(ctx, "delete", id)
	case err != nil:
		return s.adminErr("delete", err)
	}
	switch st {
	case stAvailable:
		s.ready.Add(-1)
		fallthrough
	case stScheduled, stRetryable, stPending:
		s.report(queue.EventCancelled, id, key, target, weight, attempt, 0, errDeletedByAdmin)
	}
	return nil
}

// releaseKey makes the coalesced rerun of key ready once no live job
// holds it (within tx, after job id left the live states).
func (s *Store[T]) releaseKey(ctx context.Context, tx pgx.Tx, key string) error {
	if key == "" {
		return nil
	}
	now := s.cfg.Clock.Now()
	capacity := 0
	if s.o.checkCapacity {
		capacity = s.cfg.Capacity
	}
	var ready, all, notes int64
	return tx.QueryRow(ctx, s.q.adminRelease, s.cfg.Name, key, now, capacity,
		now.Add(s.cfg.RequeueDelay), s.channel).Scan(&ready, &all, &notes)
}

// Cancel implements admin.Store. A ready or scheduled job (a coalesced
// rerun too) ends cancelled at once, and a rerun waiting for its key
// becomes ready. A running job is marked: the process running it learns
// at its next heartbeat (within a third of the lease TTL, see
// WithLeaseTTL), cancels the job's context, and ends it as cancelled
// when the handler returns; a handler that returns nil regardless ends it
// completed. If that process is gone, the lease rescue ends the job as
// cancelled instead of running it again. Cancelling a running job twice
// is not an error.
func (a *adminStore[T]) Cancel(ctx context.Context, id int64) error {
	s := a.s
	if err := s.adminReady(); err != nil {
		return err
	}
	var (
		st, key, target string
		weight, attempt int
	)
	now := s.cfg.Clock.Now()
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, s.q.adminCancel, id, s.cfg.Name, now, errCancelledByAdmin.Error()).
			Scan(&st, &key, &target, &weight, &attempt)
		if err != nil || st == stRunning {
			return err
		}
		return s.releaseKey(ctx, tx, key)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s.why(ctx, "cancel", id)
	case err != nil:
		return s.adminErr("cancel", err)
	}
	if st != stRunning {
		s.report(queue.EventCancelled, id, key, target, weight, attempt, 0, errCancelledByAdmin)
	}
	return nil
}

// Pause implements admin.Store: the queue's control row says paused, and
// every process's claim statement then returns nothing (the test is in
// the statement, so no process claims after Pause returns). Enqueues,
// promotion of scheduled jobs, outcomes and lease rescue go on; running
// jobs run to their end.
func (a *adminStore[T]) Pause(ctx context.Context) error { return a.s.setPaused(ctx, true) }

// Resume implements admin.Store: claims start again, and the queue's
// processes are notified so that their waiting workers claim at once.
func (a *adminStore[T]) Resume(ctx context.Context) error { return a.s.setPaused(ctx, false) }

func (s *Store[T]) setPaused(ctx context.Context, paused bool) error {
	if err := s.adminReady(); err != nil {
		return err
	}
	var notes int64
	if err := s.pool.QueryRow(ctx, s.q.adminPause, s.cfg.Name, paused, s.channel).Scan(&notes); err != nil {
		return s.adminErr("pause", err)
	}
	if !paused {
		kick(s.wakeFetch)
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
	if err := s.pool.QueryRow(ctx, s.q.adminPaused, s.cfg.Name).Scan(&p); err != nil {
		return false, s.adminErr("paused", err)
	}
	return p, nil
}
