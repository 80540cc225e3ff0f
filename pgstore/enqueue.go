package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// querier is what Add needs of a pool or a transaction: a statement, and
// a (sub)transaction for a job with a unique window.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// row is one job ready to insert.
type row struct {
	state     string
	priority  int
	runAt     time.Time
	scheduled bool       // runAt is the job's RunAt, in the future
	schedAt   *time.Time // the job's RunAt (nil: zero), which Claim hands back
	payload   []byte
	meta      *string // the job's Meta as JSON; nil (NULL) when it has none
}

// prepare validates and encodes job for insertion at now.
func (s *Store[T]) prepare(job *queue.Job[T], now time.Time) (row, error) {
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
	if err := durable.CheckMeta(job.Meta); err != nil {
		return row{}, err
	}
	payload, err := s.o.Encode(job.Payload)
	if err != nil {
		return row{}, err
	}
	r := row{state: stAvailable, priority: s.cfg.Priorities[p].Weight, runAt: now, payload: payload}
	if !job.Meta.IsZero() {
		b, err := job.Meta.MarshalJSON()
		if err != nil {
			return row{}, err
		}
		m := string(b)
		r.meta = &m
	}
	if !job.RunAt.IsZero() {
		// A RunAt not in the future is kept too (scheduled_at), for the
		// handler to see; the job is ready, in FIFO order (run_at now).
		at := ceilMicro(job.RunAt)
		r.schedAt = &at
		if job.RunAt.After(now) {
			r.state, r.runAt, r.scheduled = stScheduled, at, true
		}
	}
	return r, nil
}

// ceilMicro rounds t up to PostgreSQL's timestamp precision, the
// microsecond: pgx truncates, which would make a job due up to a
// microsecond before its time.
func ceilMicro(t time.Time) time.Time {
	if r := t.Truncate(time.Microsecond); r.Before(t) {
		return r.Add(time.Microsecond)
	}
	return t
}

// Add implements storekit.Store. The insert, the dedupe check (a partial
// unique index over the live states) and the capacity check are one
// statement, so dedupe holds across processes. A ready job is refused with
// queue.ErrQueueFull when the queue already has Capacity available jobs in
// the database (see WithCapacityCheck); concurrent Adds may overshoot by
// the number of callers.
//
// A ctx already done refuses the job with an error matching ctx.Err() (as
// redisstore does), without a round trip and without marking the store
// unhealthy.
func (s *Store[T]) Add(ctx context.Context, job queue.Job[T]) (storekit.Added, error) {
	if err := ctx.Err(); err != nil {
		return storekit.Added{}, fmt.Errorf("pgstore: add: %w", err)
	}
	capacity := 0
	if s.o.checkCapacity {
		capacity = s.cfg.Capacity
	}
	added, err := s.add(ctx, s.pool, &job, capacity, "")
	if err != nil {
		if !errors.Is(err, queue.ErrDuplicate) && !errors.Is(err, queue.ErrQueueFull) {
			s.noteErr(err)
		}
		return added, err
	}
	s.healthy.Store(true)
	switch {
	case added.Coalesced:
	case added.Scheduled:
		s.noteDue(ceilMicro(job.RunAt))
		s.notifyAdded()
	default:
		s.ready.Add(1)
		kick(s.wakeFetch)
		s.notifyAdded()
	}
	return added, nil
}

// EnqueueTx adds job inside the caller's transaction: the job exists only if
// tx commits, and other processes are notified at commit. It dedupes and
// coalesces like Add but does not check capacity, and it never aborts tx on
// a duplicate: it returns queue.ErrDuplicate and tx stays usable. A job
// with a UniqueFor window takes its mark in a savepoint of tx; the window
// opens only if tx commits. The store
// must have been passed to queue.New.
//
// The queue counts and observes the job as enqueued (or coalesced) once
// its transaction has committed, and not before: this process looks for
// the job's row when the commit's notification arrives (or at its next
// poll interval, if the notification was missed, or when the store is
// started, for a job enqueued before), and reports it to the queue then. A
// job whose transaction rolls back is never counted; one not seen
// committed within 10 minutes is no longer looked for (and not counted).
func (s *Store[T]) EnqueueTx(ctx context.Context, tx pgx.Tx, job queue.Job[T]) (storekit.Added, error) {
	if !s.bound.Load() {
		return storekit.Added{}, ErrNotBound
	}
	if err := storekit.EnqueueHook(ctx, &s.cfg, &job); err != nil {
		return storekit.Added{}, fmt.Errorf("pgstore: EnqueueTx: %w", err)
	}
	added, err := s.add(ctx, tx, &job, 0, s.channel)
	if err == nil {
		kind := queue.EventEnqueued
		if added.Coalesced {
			kind = queue.EventCoalesced
		}
		s.tx.add(added.ID, txJob{at: time.Now(), ev: queue.Event{Kind: kind, Time: s.cfg.Clock.Now(), JobID: added.ID,
			Key: job.Key, Target: job.Target, Priority: job.Priority}})
	}
	return added, err
}

// add inserts job with db; channel, if not empty, is notified at commit.
func (s *Store[T]) add(ctx context.Context, db querier, job *queue.Job[T], capacity int, channel string) (storekit.Added, error) {
	now := s.cfg.Clock.Now()
	r, err := s.prepare(job, now)
	if err != nil {
		return storekit.Added{}, err
	}
	sched := r.schedAt
	var (
		ok, dup, held bool
		id            *int64
		state         string
		notes         int
	)
	key, keyRaw := storeKey(job.Key)
	group, groupRaw := storeKey(job.Group)
	insert := func(db querier) error {
		return db.QueryRow(ctx, s.q.add, s.cfg.Name, r.state, r.priority, r.runAt, sched, job.MaxAttempts,
			key, group, job.Target, r.payload, now, s.cfg.Coalesce, capacity, channel,
			job.UniqueFor.Microseconds(), s.leaseShift().Microseconds(), keyRaw, groupRaw, r.meta,
		).Scan(&ok, &id, &state, &dup, &notes, &held)
	}
	if job.UniqueFor > 0 {
		// The statement takes the window's mark before it knows whether
		// the job goes in: a job refused must give the mark back.
		err = s.inTx(ctx, db, func(tx pgx.Tx) (bool, error) {
			err := insert(tx)
			return err == nil && id != nil, err
		})
	} else {
		err = insert(db)
	}
	if nm := s.notMigrated(err); nm != nil {
		return storekit.Added{}, nm
	}
	if err != nil {
		return storekit.Added{}, fmt.Errorf("pgstore: add: %w", err)
	}
	switch {
	case held:
		return storekit.Added{}, durable.WindowDuplicate(job.Key)
	case id != nil:
		return storekit.Added{ID: *id, Scheduled: state == stScheduled, Coalesced: state == stPending}, nil
	case dup || ok:
		return storekit.Added{}, queue.ErrDuplicate
	default:
		return storekit.Added{}, queue.ErrQueueFull
	}
}

// inTx runs fn in a transaction of db's (a subtransaction, a savepoint,
// when db is one), committing it when fn reports true and rolling it back
// otherwise.
func (s *Store[T]) inTx(ctx context.Context, db querier, fn func(tx pgx.Tx) (bool, error)) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // a no-op after Commit
	keep, err := fn(tx)
	if err != nil || !keep {
		return err
	}
	return tx.Commit(ctx)
}

// EnqueueMany inserts jobs in one statement and returns, for each job in
// order, what became of it: an Added with ID 0 means the job was skipped
// because its key or group was taken, or its key is in a unique window
// (EnqueueMany never coalesces). A batch with windowed jobs (UniqueFor)
// runs in a transaction that takes their keys' marks first (see the
// package documentation). Jobs without key or group are written with one
// INSERT from arrays, or with COPY in batches of 5 000 or more, or whose
// payloads and metadata add up to 16 MiB or more. Capacity is not checked. If
// any payload cannot be encoded or is too large, or the database fails,
// nothing is inserted. Each inserted job is reported to the queue as
// enqueued (storekit.Config.Report), which counts and observes it as it does
// Enqueue's. The store must have been passed to queue.NewWithStore.
//
// With keys or groups, or by COPY, the IDs are taken from the table's
// sequence beforehand, so that inserted rows can be matched to the input
// (sequences are not transactional, so a failed insert only leaves a
// gap). With keys or groups it takes two round trips, the IDs and the
// insert, a single statement and so all or nothing, and other processes
// are notified after it committed, as for Add. Without, it takes one
// round trip (three by COPY), the insert in one transaction that also
// notifies them (see insertPlain).
func (s *Store[T]) EnqueueMany(ctx context.Context, jobs []queue.Job[T]) ([]storekit.Added, error) {
	if !s.bound.Load() {
		return nil, ErrNotBound
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	jobs, hookErr := storekit.EnqueueHooks(ctx, &s.cfg, jobs)
	if hookErr != nil {
		return nil, fmt.Errorf("pgstore: EnqueueMany: %w", hookErr)
	}
	now := s.cfg.Clock.Now()
	rows := make([]row, len(jobs))
	keyed, windowed := false, false
	for i := range jobs {
		r, err := s.prepare(&jobs[i], now)
		if err != nil {
			return nil, fmt.Errorf("pgstore: job %d: %w", i, err)
		}
		rows[i] = r
		keyed = keyed || jobs[i].Key != "" || jobs[i].Group != ""
		windowed = windowed || jobs[i].UniqueFor > 0
	}
	out := make([]storekit.Added, len(jobs))
	notified := false
	err := func() error {
		if !keyed && !windowed {
			ids, err := s.insertPlain(ctx, jobs, rows, now)
			if err != nil {
				return err
			}
			for i, id := range ids {
				out[i] = storekit.Added{ID: id, Scheduled: rows[i].scheduled}
			}
			notified = true
			return nil
		}
		ids, err := s.allocIDs(ctx, s.pool, len(jobs))
		if err != nil {
			return err
		}
		inserted := make(map[int64]bool, len(jobs))
		if windowed {
			err = s.inTx(ctx, s.pool, func(tx pgx.Tx) (bool, error) {
				return true, s.insertWindowed(ctx, tx, jobs, rows, ids, now, inserted)
			})
		} else {
			err = s.insertUnnest(ctx, s.pool, jobs, rows, ids, nil, now, inserted)
		}
		if err != nil {
			return err
		}
		for i, id := range ids {
			if inserted[id] {
				out[i] = storekit.Added{ID: id, Scheduled: rows[i].scheduled}
			}
		}
		return nil
	}()
	if err != nil {
		s.noteErr(err)
		if nm := s.notMigrated(err); nm != nil {
			return nil, nm
		}
		return nil, fmt.Errorf("pgstore: enqueue many: %w", err)
	}
	var ready, added int64
	for i := range out {
		if out[i].ID != 0 {
			added++
			if !out[i].Scheduled {
				ready++
			}
			j := &jobs[i]
			s.cfg.Report(queue.Event{Kind: queue.EventEnqueued, Time: now, JobID: out[i].ID, Key: j.Key,
				Target: j.Target, Priority: j.Priority})
		}
	}
	s.ready.Add(ready)
	kick(s.wakeFetch)
	kick(s.wakePromote)
	if added > 0 && !notified {
		s.notifyAdded()
	}
	return out, nil
}

// allocIDs takes n IDs from the jobs table's sequence, so that inserted
// rows can be matched to the input. The sequence is looked up once per
// statement (materialised): pg_get_serial_sequence per row searched the
// catalog for every ID and took longer than the COPY itself.
func (s *Store[T]) allocIDs(ctx context.Context, db rowQuerier, n int) ([]int64, error) {
	rows, err := db.Query(ctx, sqlAllocIDs, s.q.jobs, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// sqlAllocIDs takes $2 IDs from the sequence of table $1 (see allocIDs).
const sqlAllocIDs = `WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence($1, 'id')::regclass AS seq)
SELECT nextval(s.seq) FROM s, generate_series(1, $2::integer)`

// insertWindowed is insertUnnest for a batch with unique windows, in tx:
// it takes the marks of the windowed jobs (the first job of each key),
// inserts the jobs, and gives back the marks of those it did not insert.
func (s *Store[T]) insertWindowed(ctx context.Context, tx pgx.Tx, jobs []queue.Job[T], rows []row, ids []int64, now time.Time, inserted map[int64]bool) error {
	first := make(map[string]int64) // key as stored → the ID of its first windowed job
	var mids, wins []int64
	var mkeys []string
	for i := range jobs {
		j := &jobs[i]
		key := storedKey(j.Key)
		if _, ok := first[key]; j.UniqueFor <= 0 || ok {
			continue
		}
		first[key] = ids[i]
		mids, mkeys, wins = append(mids, ids[i]), append(mkeys, key), append(wins, j.UniqueFor.Microseconds())
	}
	shift := s.leaseShift().Microseconds()
	res, err := tx.Query(ctx, s.q.markMany, s.cfg.Name, mids, mkeys, wins, shift)
	if err != nil {
		return err
	}
	taken, err := pgx.CollectRows(res, pgx.RowTo[string])
	if err != nil {
		return err
	}
	winners := make([]int64, 0, len(taken))
	for _, k := range taken {
		winners = append(winners, first[k])
	}
	if err := s.insertUnnest(ctx, tx, jobs, rows, ids, winners, now, inserted); err != nil {
		return err
	}
	var back []string
	for _, k := range taken {
		if !inserted[first[k]] {
			back = append(back, k)
		}
	}
	if len(back) > 0 {
		_, err = tx.Exec(ctx, s.q.unmark, s.cfg.Name, back)
	}
	return err
}

// rowQuerier is a pool or a transaction, for insertUnnest.
type rowQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// insertUnnest inserts keyed jobs with sqlInsertMany; winners are the IDs
// of the jobs that took their key's unique-window mark.
func (s *Store[T]) insertUnnest(ctx context.Context, db rowQuerier, jobs []queue.Job[T], rows []row, ids, winners []int64, now time.Time, inserted map[int64]bool) error {
	n := len(jobs)
	states, prios, runAts, scheds := make([]string, n), make([]int32, n), make([]time.Time, n), make([]*time.Time, n)
	maxes, keys, groups, targets, payloads := make([]int32, n), make([]string, n), make([]string, n), make([]string, n), make([][]byte, n)
	keyRaws, groupRaws, metas := make([][]byte, n), make([][]byte, n), make([]*string, n)
	for i := range jobs {
		r := &rows[i]
		metas[i] = r.meta
		states[i], prios[i], runAts[i], scheds[i], payloads[i] = r.state, int32(r.priority), r.runAt, r.schedAt, r.payload
		maxes[i], targets[i] = int32(jobs[i].MaxAttempts), jobs[i].Target
		keys[i], keyRaws[i] = storeKey(jobs[i].Key)
		groups[i], groupRaws[i] = storeKey(jobs[i].Group)
	}
	if winners == nil {
		winners = []int64{}
	}
	res, err := db.Query(ctx, s.q.insertMany, s.cfg.Name, ids, states, prios, runAts, scheds, maxes,
		keys, groups, targets, payloads, now, winners, s.leaseShift().Microseconds(), keyRaws, groupRaws, metas)
	if err != nil {
		return err
	}
	var id int64
	_, err = pgx.ForEachRow(res, []any{&id}, func() error {
		inserted[id] = true
		return nil
	})
	return err
}

// defaultCopyMin is the least number of jobs without key or group that
// EnqueueMany writes with COPY; smaller batches go by insertPlain. The
// server's COPY sets up a tuple slot for each of up to 1 000 buffered
// rows and frees them at the end of the statement, a cost per statement
// that, at 1 000 rows, took more of its CPU than the rows themselves; a
// statement that inserts from arrays uses one slot. Over many thousands
// of rows the COPY is the cheaper per row, and it streams.
const defaultCopyMin = 5000

// copyMinBytes is the least size of a batch's payloads and metadata,
// together, that EnqueueMany writes with COPY whatever the number of
// jobs: insertPlain sends each column as one array, built whole in
// memory on both sides (and no value the server takes may exceed 1 GiB),
// where COPY streams row by row.
const copyMinBytes = 16 << 20

// insertPlain inserts jobs without key or group and returns their IDs,
// in one round trip: sqlInsertPlain and the wake-up notification in a
// pipeline that the server runs as one (implicit) transaction. The IDs
// come from the table's identity default, taken row by row in the
// order of the arrays, which is the order the rows are inserted in, so
// the IDs it returns, ascending, are the jobs' in order. A NOTIFY is
// transactional (delivered at commit), so it costs no transaction and no
// WAL flush of its own, as the notifier's does after an autocommitted
// insert; the lock a NOTIFY holds through its commit serialises the
// commits of concurrent calls, as it does those of EnqueueTx. Batches of
// s.copyMin jobs or more, or of copyMinBytes, go by insertCopy.
func (s *Store[T]) insertPlain(ctx context.Context, jobs []queue.Job[T], rows []row, now time.Time) ([]int64, error) {
	size := 0
	for i := range rows {
		size += len(rows[i].payload)
		if rows[i].meta != nil {
			size += len(*rows[i].meta)
		}
	}
	if len(jobs) >= s.copyMin || size >= copyMinBytes {
		return s.insertCopy(ctx, jobs, rows, now)
	}
	n := len(jobs)
	ids := make([]int64, 0, n)
	b := &pgx.Batch{}
	var q *pgx.QueuedQuery
	if alike(jobs, rows) {
		payloads := make([][]byte, n)
		for i := range rows {
			payloads[i] = rows[i].payload
		}
		r := &rows[0]
		q = b.Queue(s.q.insertAlike, s.cfg.Name, r.state, int32(r.priority), r.runAt, int32(jobs[0].MaxAttempts), jobs[0].Target, payloads, now)
	} else {
		states, prios, runAts, scheds := make([]string, n), make([]int32, n), make([]time.Time, n), make([]*time.Time, n)
		maxes, targets, payloads, metas := make([]int32, n), make([]string, n), make([][]byte, n), make([]*string, n)
		for i := range jobs {
			r := &rows[i]
			states[i], prios[i], runAts[i], scheds[i], payloads[i], metas[i] = r.state, int32(r.priority), r.runAt, r.schedAt, r.payload, r.meta
			maxes[i], targets[i] = int32(jobs[i].MaxAttempts), jobs[i].Target
		}
		q = b.Queue(s.q.insertPlain, s.cfg.Name, states, prios, runAts, scheds, maxes, targets, payloads, now, metas)
	}
	q.Query(func(r pgx.Rows) error {
		var id int64
		_, err := pgx.ForEachRow(r, []any{&id}, func() error {
			ids = append(ids, id)
			return nil
		})
		return err
	})
	b.Queue("SELECT pg_notify($1::text, $2::text)", s.channel, s.cfg.Name)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if len(ids) != n { // an INSERT … SELECT without ON CONFLICT inserts every row or none
		return nil, fmt.Errorf("the insert returned %d IDs for %d jobs", len(ids), n)
	}
	slices.Sort(ids) // in the order returned already; sorted, they depend on the order taken only
	return ids, nil
}

// alike reports whether jobs differ in their payloads only (state,
// priority, due time, attempts and target; no RunAt of their own, no
// metadata), as a batch of ready jobs built in a loop does: sqlInsertAlike
// then sends the rest once, not as arrays.
func alike[T any](jobs []queue.Job[T], rows []row) bool {
	r0, j0 := &rows[0], &jobs[0]
	for i := range rows {
		r, j := &rows[i], &jobs[i]
		if r.schedAt != nil || r.meta != nil || r.state != r0.state || r.priority != r0.priority ||
			!r.runAt.Equal(r0.runAt) || j.MaxAttempts != j0.MaxAttempts || j.Target != j0.Target {
			return false
		}
	}
	return true
}

// insertCopy inserts jobs without key or group with COPY, in a
// transaction that also takes their IDs and sends the wake-up
// notification, and returns the IDs. It takes three round trips: BEGIN
// and the IDs in one pipeline, the COPY, and the NOTIFY and COMMIT in
// another (see insertPlain for the NOTIFY).
func (s *Store[T]) insertCopy(ctx context.Context, jobs []queue.Job[T], rows []row, now time.Time) (ids []int64, err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release() // a connection left in a transaction is closed, not reused
	c := conn.Conn()
	defer func() {
		if err != nil && c.PgConn().TxStatus() != 'I' {
			if _, rerr := c.Exec(context.WithoutCancel(ctx), "ROLLBACK"); rerr != nil {
				_ = c.Close(context.WithoutCancel(ctx))
			}
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlAllocIDs, s.q.jobs, len(jobs)).Query(func(r pgx.Rows) error {
		ids, err = pgx.CollectRows(r, pgx.RowTo[int64])
		return err
	})
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	cols := []string{"id", "queue", "state", "priority", "run_at", "scheduled_at", "max_attempts", "target", "payload", "created_at"}
	// The meta column only when a job of the batch has metadata: a batch
	// without any sends and stores nothing for it.
	withMeta := slices.ContainsFunc(rows, func(r row) bool { return r.meta != nil })
	if withMeta {
		cols = append(cols, "meta")
	}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i == len(jobs) {
			return nil, nil
		}
		r := &rows[i]
		var sched any
		if r.schedAt != nil {
			sched = *r.schedAt
		}
		vals := []any{ids[i], s.cfg.Name, r.state, int32(r.priority), r.runAt, sched, int32(jobs[i].MaxAttempts), jobs[i].Target, r.payload, now}
		if withMeta {
			var meta any
			if r.meta != nil {
				meta = *r.meta
			}
			vals = append(vals, meta)
		}
		i++
		return vals, nil
	})
	if _, err := c.CopyFrom(ctx, s.q.jobsIdent, cols, src); err != nil {
		return nil, err
	}
	b = &pgx.Batch{}
	b.Queue("SELECT pg_notify($1::text, $2::text)", s.channel, s.cfg.Name)
	b.Queue("COMMIT")
	if err := c.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return ids, nil
}
