package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// row is one job ready to insert.
type row struct {
	state     string
	priority  int
	runAt     int64
	scheduled bool          // runAt is the job's RunAt, in the future
	schedAt   sql.NullInt64 // the job's RunAt (NULL: zero), which Claim hands back
	payload   []byte
	meta      sql.NullString
}

// prepare validates and encodes job for insertion at now.
func (s *Store[T]) prepare(job *queuetype.Job[T], now int64) (row, error) {
	p := s.cfg.PriorityIndex(job.Priority)
	if p < 0 {
		return row{}, s.cfg.UnknownPriority(job.Priority)
	}
	if err := durable.CheckUniqueFor(job.UniqueFor, job.Key); err != nil {
		return row{}, err
	}
	if err := durable.CheckTarget(job.Target); err != nil {
		return row{}, err
	}
	payload, err := s.o.Encode(job.Payload)
	if err != nil {
		return row{}, err
	}
	r := row{state: stAvailable, priority: s.cfg.Priorities[p].Weight, runAt: now, payload: payload}
	if r.meta, err = encodeMeta(job); err != nil {
		return row{}, err
	}
	if !job.RunAt.IsZero() {
		at := toNS(job.RunAt)
		r.schedAt = sql.NullInt64{Int64: at, Valid: true}
		if at > now {
			r.state, r.runAt, r.scheduled = stScheduled, at, true
		}
	}
	return r, nil
}

// add inserts job in tx (the writer's, or a caller's) unless its key is
// in a unique window (a *queue.DuplicateError), its key or group is taken
// (queue.ErrDuplicate) or a ready job finds capacity ready jobs
// (queue.ErrQueueFull; 0: no check). coalesce false refuses a running
// key instead of keeping the job as its rerun. It checks before it
// writes, inside the write transaction, so a refused job writes nothing.
func (s *Store[T]) add(ctx context.Context, tx dbtx, job *queuetype.Job[T], r *row, now int64, capacity int, coalesce bool) (storekit.Added, error) {
	key, group := kb(job.Key), kb(job.Group)
	state := r.state
	if job.Key != "" {
		var until int64
		err := tx.QueryRowContext(ctx, "SELECT until FROM queuekit_unique WHERE queue = ? AND key = ?", s.cfg.Name, key).Scan(&until)
		switch {
		case err == nil && until > now:
			return storekit.Added{}, durable.WindowDuplicate(job.Key)
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return storekit.Added{}, err
		}
		// Two branches, each with its partial index's exact predicate, so
		// that SQLite uses the index (one probe each, not a scan).
		rows, err := tx.QueryContext(ctx, `SELECT state FROM queuekit_jobs WHERE queue = ? AND key = ? AND key <> x''
			AND state IN `+liveStates+`
			UNION ALL SELECT state FROM queuekit_jobs WHERE queue = ? AND key = ? AND key <> x'' AND state = 'pending'`,
			s.cfg.Name, key, s.cfg.Name, key)
		if err != nil {
			return storekit.Added{}, err
		}
		running, taken := false, false
		for rows.Next() {
			var st string
			if err := rows.Scan(&st); err != nil {
				rows.Close()
				return storekit.Added{}, err
			}
			if st == stRunning {
				running = true
			} else {
				taken = true
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return storekit.Added{}, err
		}
		switch {
		case taken, running && !coalesce:
			return storekit.Added{}, queuetype.ErrDuplicate
		case running:
			state = stPending
		}
	}
	if state == stScheduled && job.Group != "" {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM queuekit_jobs WHERE queue = ? AND group_key = ? AND group_key <> x''
			AND state = 'scheduled'`, s.cfg.Name, group).Scan(&one)
		switch {
		case err == nil:
			return storekit.Added{}, queuetype.ErrDuplicate
		case !errors.Is(err, sql.ErrNoRows):
			return storekit.Added{}, err
		}
	}
	if state == stAvailable && capacity > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM queuekit_jobs
			WHERE queue = ? AND state = 'available' LIMIT ?)`, s.cfg.Name, capacity).Scan(&n); err != nil {
			return storekit.Added{}, err
		}
		if n >= capacity {
			return storekit.Added{}, queuetype.ErrQueueFull
		}
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO queuekit_jobs (queue, state, priority, run_at, scheduled_at, max_attempts,
		key, group_key, target, payload, meta, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		s.cfg.Name, state, r.priority, r.runAt, r.schedAt, job.MaxAttempts, key, group, job.Target, r.payload, r.meta, now)
	if err != nil {
		return storekit.Added{}, err
	}
	id, err := res.LastInsertId()
	if err != nil {
		return storekit.Added{}, err
	}
	if job.UniqueFor > 0 {
		if _, err := tx.ExecContext(ctx, `INSERT INTO queuekit_unique (queue, key, until) VALUES (?, ?, ?)
			ON CONFLICT (queue, key) DO UPDATE SET until = excluded.until`, s.cfg.Name, key, now+int64(job.UniqueFor)); err != nil {
			return storekit.Added{}, err
		}
	}
	return storekit.Added{ID: id, Scheduled: state == stScheduled, Coalesced: state == stPending}, nil
}

// refused reports whether err is a job's refusal (not a failure).
func refused(err error) bool {
	var de *queuetype.DuplicateError
	return errors.Is(err, queuetype.ErrDuplicate) || errors.Is(err, queuetype.ErrQueueFull) || errors.As(err, &de)
}

// Add implements storekit.Store. The checks (unique window, key, group,
// capacity) and the insert run in one write transaction, so dedupe holds
// across processes. The job is durable when Add returns (under
// SyncFull, on disk). A ctx already done refuses the job with an error
// matching ctx.Err().
func (s *Store[T]) Add(ctx context.Context, job queuetype.Job[T]) (storekit.Added, error) {
	if err := ctx.Err(); err != nil {
		return storekit.Added{}, fmt.Errorf("sqlitestore: add: %w", err)
	}
	now := s.now()
	r, err := s.prepare(&job, now)
	if err != nil {
		return storekit.Added{}, err
	}
	capacity := 0
	if s.o.checkCapacity {
		capacity = s.cfg.Capacity
	}
	var added storekit.Added
	err = s.db.write(ctx, func(tx *wtx) error {
		var err error
		added, err = s.add(ctx, tx, &job, &r, now, capacity, s.cfg.Coalesce)
		return err
	})
	if err != nil {
		if refused(err) {
			return storekit.Added{}, err
		}
		s.noteErr(err)
		return storekit.Added{}, fmt.Errorf("sqlitestore: add: %w", err)
	}
	s.healthy.Store(true)
	switch {
	case added.Coalesced:
	case added.Scheduled:
		kick(s.wakePromote)
	default:
		s.ready.Add(1)
		s.empty.Store(false)
		kick(s.wake)
	}
	return added, nil
}

// EnqueueMany inserts jobs in one write transaction and returns, for each
// job in order, what became of it: an Added with ID 0 means the job was
// skipped because its key or group was taken, or its key is in a unique
// window (EnqueueMany never coalesces). Capacity is not checked. If any
// job is invalid or its payload cannot be encoded, or the write fails,
// nothing is inserted. Each inserted job is reported to the queue as
// enqueued. The store must have been passed to queue.NewWithStore.
func (s *Store[T]) EnqueueMany(ctx context.Context, jobs []queuetype.Job[T]) ([]storekit.Added, error) {
	if !s.bound.Load() {
		return nil, ErrNotBound
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	jobs, hookErr := storekit.EnqueueHooks(ctx, &s.cfg, jobs)
	if hookErr != nil {
		return nil, fmt.Errorf("sqlitestore: EnqueueMany: %w", hookErr)
	}
	now := s.now()
	rows := make([]row, len(jobs))
	for i := range jobs {
		r, err := s.prepare(&jobs[i], now)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: job %d: %w", i, err)
		}
		rows[i] = r
	}
	out := make([]storekit.Added, len(jobs))
	err := s.db.write(ctx, func(tx *wtx) error {
		clear(out)
		// A run of plain jobs (no key; no group on a scheduled job) has
		// nothing to check: it goes in multi-row INSERTs. A job with a
		// key or a scheduled group takes add's checks, after the plain
		// jobs before it, so IDs follow the jobs' order.
		start := 0
		for i := range jobs {
			if plain(&jobs[i], &rows[i]) {
				continue
			}
			if err := s.insertPlain(tx, jobs[start:i], rows[start:i], out[start:i], now); err != nil {
				return err
			}
			start = i + 1
			a, err := s.add(ctx, tx, &jobs[i], &rows[i], now, 0, false)
			switch {
			case refused(err):
			case err != nil:
				return err
			default:
				out[i] = a
			}
		}
		return s.insertPlain(tx, jobs[start:], rows[start:], out[start:], now)
	})
	if err != nil {
		s.noteErr(err)
		return nil, fmt.Errorf("sqlitestore: enqueue many: %w", err)
	}
	var ready int64
	for i := range out {
		if out[i].ID == 0 {
			continue
		}
		if !out[i].Scheduled {
			ready++
		}
		j := &jobs[i]
		s.cfg.Report(queuetype.Event{Kind: queuetype.EventEnqueued, Time: fromNS(now), JobID: out[i].ID, Key: j.Key,
			Target: j.Target, Priority: j.Priority})
	}
	s.ready.Add(ready)
	s.empty.Store(false)
	kick(s.wake)
	kick(s.wakePromote)
	return out, nil
}

// plain reports whether job needs none of add's checks: no key (so no
// unique window) and no group on a scheduled job. Capacity is not
// checked by EnqueueMany.
func plain[T any](job *queuetype.Job[T], r *row) bool {
	return job.Key == "" && (job.Group == "" || r.state != stScheduled)
}

// plainChunk is how many rows one multi-row INSERT takes: 12 variables a
// row, well below SQLite's variable limit (32 766; 999 before 3.32).
const plainChunk = 80

// insertSQL caches the multi-row INSERT text by row count.
var insertSQL sync.Map // int -> string

func insertText(n int) string {
	if q, ok := insertSQL.Load(n); ok {
		return q.(string)
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO queuekit_jobs (queue, state, priority, run_at, scheduled_at, max_attempts,
		key, group_key, target, payload, meta, created_at) VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?,?,?,?,?,?,?)")
	}
	q := b.String()
	insertSQL.Store(n, q)
	return q
}

// insertPlain inserts plain jobs (see plain) in multi-row INSERTs and
// sets out to their results. The table's AUTOINCREMENT id, under the
// write lock, gives one statement's rows consecutive IDs in VALUES
// order: the last is last_insert_rowid.
func (s *Store[T]) insertPlain(tx *wtx, jobs []queuetype.Job[T], rows []row, out []storekit.Added, now int64) error {
	args := make([]any, 0, 12*min(len(jobs), plainChunk))
	for len(jobs) > 0 {
		n := min(len(jobs), plainChunk)
		args = args[:0]
		for i := range n {
			j, r := &jobs[i], &rows[i]
			args = append(args, s.cfg.Name, r.state, r.priority, r.runAt, r.schedAt, j.MaxAttempts,
				kb(j.Key), kb(j.Group), j.Target, r.payload, r.meta, now)
		}
		res, err := tx.ExecContext(context.Background(), insertText(n), args...)
		if err != nil {
			return err
		}
		last, err := res.LastInsertId()
		if err != nil {
			return err
		}
		if got, err := res.RowsAffected(); err != nil || got != int64(n) {
			return fmt.Errorf("inserted %d rows of %d (%v)", got, n, err)
		}
		for i := range n {
			out[i] = storekit.Added{ID: last - int64(n-1-i), Scheduled: rows[i].state == stScheduled}
		}
		jobs, rows, out = jobs[n:], rows[n:], out[n:]
	}
	return nil
}

// EnqueueTx adds job inside the caller's transaction, for a program that
// keeps its own data in the same file: the job exists only if tx
// commits. tx must come from the DB's SQL pool (DB.SQL), whose
// transactions hold the write lock from their start. It dedupes and
// coalesces like Add but does not check capacity, and a refused job
// writes nothing: tx stays usable. The store must have been passed to
// queue.NewWithStore.
//
// The queue counts and observes the job as enqueued (or coalesced) once
// this process sees it committed (the file's change, within the DB's
// wake interval; or the poll), and not before: a job whose transaction
// rolls back is never counted; one not seen committed within 10 minutes
// is no longer looked for.
func (s *Store[T]) EnqueueTx(ctx context.Context, tx *sql.Tx, job queuetype.Job[T]) (storekit.Added, error) {
	if !s.bound.Load() {
		return storekit.Added{}, ErrNotBound
	}
	if tx == nil {
		return storekit.Added{}, errors.New("sqlitestore: EnqueueTx: nil tx")
	}
	if err := storekit.EnqueueHook(ctx, &s.cfg, &job); err != nil {
		return storekit.Added{}, fmt.Errorf("sqlitestore: EnqueueTx: %w", err)
	}
	now := s.now()
	r, err := s.prepare(&job, now)
	if err != nil {
		return storekit.Added{}, err
	}
	added, err := s.add(ctx, tx, &job, &r, now, 0, s.cfg.Coalesce)
	if err != nil {
		if refused(err) {
			return storekit.Added{}, err
		}
		return storekit.Added{}, fmt.Errorf("sqlitestore: enqueue in transaction: %w", err)
	}
	kind := queuetype.EventEnqueued
	if added.Coalesced {
		kind = queuetype.EventCoalesced
	}
	s.tx.add(added.ID, now, queuetype.Event{Kind: kind, Time: fromNS(now), JobID: added.ID, Key: job.Key,
		Target: job.Target, Priority: job.Priority})
	return added, nil
}

// txWatch holds EnqueueTx's jobs until their commit is seen: each is
// known by its ID and creation time (an ID of a rolled-back insert may be
// taken again by another job, not with the same time).
type txWatch struct {
	mu      sync.Mutex
	pending map[int64]txJob
	wake    chan struct{}
	once    sync.Once
}

type txJob struct {
	created int64
	since   time.Time
	ev      queuetype.Event
}

// txForget is how long an EnqueueTx job is looked for.
const txForget = 10 * time.Minute

func (w *txWatch) init() {
	w.once.Do(func() {
		w.pending = map[int64]txJob{}
		w.wake = make(chan struct{}, 1)
	})
}

func (w *txWatch) add(id, created int64, ev queuetype.Event) {
	w.init()
	w.mu.Lock()
	w.pending[id] = txJob{created: created, since: time.Now(), ev: ev}
	w.mu.Unlock()
}

func (w *txWatch) kick() {
	w.init()
	kick(w.wake)
}

// txLoop reports EnqueueTx's jobs once committed.
func (s *Store[T]) txLoop(ctx context.Context) {
	s.tx.init()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.tx.wake:
		case <-time.After(s.o.PollInterval):
		}
		s.tx.mu.Lock()
		ids := make(map[int64]txJob, len(s.tx.pending))
		for id, j := range s.tx.pending {
			if time.Since(j.since) > txForget {
				delete(s.tx.pending, id)
				continue
			}
			ids[id] = j
		}
		s.tx.mu.Unlock()
		for id, j := range ids {
			var created int64
			err := s.db.r.QueryRowContext(ctx, "SELECT created_at FROM queuekit_jobs WHERE id = ? AND queue = ?", id, s.cfg.Name).Scan(&created)
			if err != nil || created != j.created {
				continue
			}
			s.tx.mu.Lock()
			delete(s.tx.pending, id)
			s.tx.mu.Unlock()
			s.cfg.Report(j.ev)
			s.empty.Store(false)
			kick(s.wake)
			kick(s.wakePromote)
		}
	}
}
