package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Outcomes: each is one operation of the writer's batch, so the outcomes
// of many workers share a commit. An outcome for a run this process no
// longer holds (its lease expired and the job was rescued, or the attempt
// is not the run's) writes nothing and returns an error matching
// storekit.ErrLeaseLost.

func leaseLost(id int64) error {
	return fmt.Errorf("sqlitestore: job %d: %w", id, storekit.ErrLeaseLost)
}

// errJSON appends one entry to a job's error log (the errors column).
const errJSON = `json_insert(coalesce(errors, '[]'), '$[#]', json_object('attempt', attempt, 'at', ?, 'error', ?))`

func stamp(ns int64) string { return fromNS(ns).Format(time.RFC3339Nano) }

// end ends a run in state (completed, dead or cancelled) and releases its
// key's rerun. A run an operator asked to cancel ends cancelled when it
// fails.
func (s *Store[T]) end(ctx context.Context, job queuetype.Job[T], state string, cause error) error {
	now := s.now()
	var made bool
	err := s.db.write(ctx, func(tx *wtx) error {
		var res sql.Result
		var err error
		if state == stCompleted {
			res, err = tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'completed', finalized_at = ?, lease_owner = NULL,
				lease_expires_at = NULL WHERE id = ? AND attempt = ? AND state = 'running' AND lease_owner = ?`,
				now, job.ID, job.Attempt, s.owner)
		} else {
			text := storekit.ErrorText(cause)
			res, err = tx.ExecContext(ctx, `UPDATE queuekit_jobs SET
				state = CASE WHEN cancel_requested <> 0 THEN 'cancelled' ELSE ? END, finalized_at = ?,
				lease_owner = NULL, lease_expires_at = NULL, last_error = ?, errors = `+errJSON+`
				WHERE id = ? AND attempt = ? AND state = 'running' AND lease_owner = ?`,
				state, now, text, stamp(now), text, job.ID, job.Attempt, s.owner)
		}
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return leaseLost(job.ID)
		}
		made, err = s.releaseRerun(ctx, tx, kb(job.Key), now)
		return err
	})
	s.forgetCancel(job.ID)
	if err != nil {
		if !errors.Is(err, storekit.ErrLeaseLost) {
			s.noteErr(err)
		}
		return err
	}
	if made {
		s.madeReady(1)
	}
	return nil
}

// madeReady notes that n jobs became available in this process's write.
func (s *Store[T]) madeReady(n int) {
	s.ready.Add(int64(n))
	s.empty.Store(false)
	kick(s.wake)
}

// releaseRerun makes key's coalesced rerun ready once no live job holds
// the key: available when due and the queue has room, else retryable at
// its time or RequeueDelay later. It reports whether it made one
// available now.
func (s *Store[T]) releaseRerun(ctx context.Context, tx dbtx, key []byte, now int64) (bool, error) {
	if len(key) == 0 {
		return false, nil
	}
	var id int64
	var sched sql.NullInt64
	err := tx.QueryRowContext(ctx, `SELECT id, scheduled_at FROM queuekit_jobs p WHERE queue = ? AND key = ? AND key <> x''
		AND state = 'pending' AND NOT EXISTS (SELECT 1 FROM queuekit_jobs l WHERE l.queue = p.queue AND l.key = p.key
			AND l.key <> x'' AND l.state IN `+liveStates+`)`, s.cfg.Name, key).Scan(&id, &sched)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if sched.Valid && sched.Int64 > now {
		_, err = tx.ExecContext(ctx, "UPDATE queuekit_jobs SET state = 'retryable', run_at = ? WHERE id = ?", sched.Int64, id)
		return false, err
	}
	room, err := s.room(ctx, tx)
	if err != nil {
		return false, err
	}
	if !room {
		later := now + int64(s.cfg.RequeueDelay)
		_, err = tx.ExecContext(ctx, "UPDATE queuekit_jobs SET state = 'retryable', run_at = ?, scheduled_at = ? WHERE id = ?", later, later, id)
		return false, err
	}
	_, err = tx.ExecContext(ctx, "UPDATE queuekit_jobs SET state = 'available', run_at = ? WHERE id = ?", now, id)
	return err == nil, err
}

// room reports whether the queue has fewer available jobs than its
// capacity (always, without the capacity check).
func (s *Store[T]) room(ctx context.Context, tx dbtx) (bool, error) {
	if !s.o.checkCapacity || s.cfg.Capacity <= 0 {
		return true, nil
	}
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM queuekit_jobs WHERE queue = ? AND state = 'available' LIMIT ?)`,
		s.cfg.Name, s.cfg.Capacity).Scan(&n)
	return n < s.cfg.Capacity, err
}

// Complete implements storekit.Store. It returns once the outcome is
// committed.
func (s *Store[T]) Complete(ctx context.Context, job queuetype.Job[T]) error {
	return s.end(ctx, job, stCompleted, nil)
}

// Dead implements storekit.Store.
func (s *Store[T]) Dead(ctx context.Context, job queuetype.Job[T], cause error) error {
	return s.end(ctx, job, stDead, cause)
}

// CancelClaimed implements storekit.ClaimCanceller: the run ends cancelled
// with reason as its last error.
func (s *Store[T]) CancelClaimed(ctx context.Context, job queuetype.Job[T], reason error) error {
	return s.end(ctx, job, stCancelled, reason)
}

// Retry implements storekit.Store.
func (s *Store[T]) Retry(ctx context.Context, job queuetype.Job[T], at time.Time, cause error) error {
	return s.putBack(ctx, job, at, cause, false, false)
}

// Defer implements storekit.Store: the attempt is given back.
func (s *Store[T]) Defer(ctx context.Context, job queuetype.Job[T], at time.Time, cause error) error {
	return s.putBack(ctx, job, at, cause, true, false)
}

// Hold implements storekit.HoldStore: Defer, marked held for the job's
// target until it is claimed again.
func (s *Store[T]) Hold(ctx context.Context, job queuetype.Job[T], at time.Time) error {
	return s.putBack(ctx, job, at, nil, true, true)
}

// putBack puts a run back to run at at, unless its key has a rerun
// waiting or an operator asked to cancel it: then the run is cancelled
// (superseded) and putBack returns storekit.ErrSuperseded. undo gives the
// attempt back (Defer, Hold); a Defer without a cause keeps the last
// error.
func (s *Store[T]) putBack(ctx context.Context, job queuetype.Job[T], at time.Time, cause error, undo, hold bool) error {
	now := s.now()
	due := toNS(at)
	text := ""
	if cause != nil {
		text = storekit.ErrorText(cause)
	}
	var sup, made bool
	err := s.db.write(ctx, func(tx *wtx) error {
		sup, made = false, false
		var cancelReq int
		err := tx.QueryRowContext(ctx, `SELECT cancel_requested OR (key <> x'' AND EXISTS (SELECT 1 FROM queuekit_jobs r
				WHERE r.queue = j.queue AND r.key = j.key AND r.key <> x'' AND r.state = 'pending'))
			FROM queuekit_jobs j WHERE id = ? AND attempt = ? AND state = 'running' AND lease_owner = ?`,
			job.ID, job.Attempt, s.owner).Scan(&cancelReq)
		if errors.Is(err, sql.ErrNoRows) {
			return leaseLost(job.ID)
		}
		if err != nil {
			return err
		}
		if cancelReq != 0 {
			sup = true
			if _, err := tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'cancelled', finalized_at = ?, lease_owner = NULL,
				lease_expires_at = NULL WHERE id = ?`, now, job.ID); err != nil {
				return err
			}
			made, err = s.releaseRerun(ctx, tx, kb(job.Key), now)
			return err
		}
		dec, heldV := 0, 0
		if undo {
			dec = 1
		}
		if hold {
			heldV = 1
		}
		if undo && text == "" {
			_, err = tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'retryable', run_at = ?, scheduled_at = ?,
				attempt = attempt - ?, lease_owner = NULL, lease_expires_at = NULL, held = ? WHERE id = ?`,
				due, due, dec, heldV, job.ID)
		} else {
			_, err = tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'retryable', run_at = ?, scheduled_at = ?,
				last_error = ?, errors = `+errJSON+`, attempt = attempt - ?,
				lease_owner = NULL, lease_expires_at = NULL, held = ? WHERE id = ?`,
				due, due, text, stamp(now), text, dec, heldV, job.ID)
		}
		return err
	})
	s.forgetCancel(job.ID)
	if err != nil {
		if !errors.Is(err, storekit.ErrLeaseLost) {
			s.noteErr(err)
		}
		return err
	}
	if made {
		s.madeReady(1)
	}
	if sup {
		return storekit.ErrSuperseded
	}
	kick(s.wakePromote)
	return nil
}

// Heartbeat implements storekit.Leaser: it extends the leases of ids that
// this process holds, in one write, and returns those it no longer holds;
// a running job an operator asked to cancel (admin Cancel) is returned as
// lost too, its lease extended, and CancelRequested then reports it.
func (s *Store[T]) Heartbeat(ctx context.Context, ids []int64) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	now := s.now()
	kept := make(map[int64]bool, len(ids))
	cancel := map[int64]bool{}
	err := s.db.write(ctx, func(tx *wtx) error {
		clear(kept)
		clear(cancel)
		rows, err := tx.QueryContext(ctx, `UPDATE queuekit_jobs SET lease_expires_at = ?, heartbeat_at = ?
			WHERE id IN (SELECT value FROM json_each(?)) AND state = 'running' AND lease_owner = ?
			RETURNING id, cancel_requested`, now+int64(s.o.LeaseTTL), now, idList(ids), s.owner)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var c int
			if err := rows.Scan(&id, &c); err != nil {
				return err
			}
			kept[id] = true
			if c != 0 {
				cancel[id] = true
			}
		}
		return rows.Err()
	})
	if err != nil {
		s.noteErr(err)
		return nil, fmt.Errorf("sqlitestore: heartbeat: %w", err)
	}
	var lost []int64
	for _, id := range ids {
		if !kept[id] || cancel[id] {
			lost = append(lost, id)
		}
	}
	if len(cancel) > 0 {
		s.cancelMu.Lock()
		for id := range cancel {
			s.cancelReq[id] = true
		}
		s.cancelMu.Unlock()
	}
	return lost, nil
}

// CancelRequested implements storekit.RunCanceller.
func (s *Store[T]) CancelRequested(id int64) bool {
	s.cancelMu.Lock()
	defer s.cancelMu.Unlock()
	return s.cancelReq[id]
}

func (s *Store[T]) forgetCancel(id int64) {
	s.cancelMu.Lock()
	delete(s.cancelReq, id)
	s.cancelMu.Unlock()
}

// RescueExpired implements storekit.Leaser: running jobs of the queue
// whose lease expired go back to available (the lost run used its
// attempt), or are dead-lettered after their last attempt, or cancelled
// when an operator asked. Every process runs it every janitor interval;
// the write transaction makes each rescue happen once.
func (s *Store[T]) RescueExpired(ctx context.Context) (int, error) {
	now := s.now()
	type rescued struct {
		id        int64
		state     string
		key       []byte
		target    string
		prio, att int
	}
	var got []rescued
	err := s.db.write(ctx, func(tx *wtx) error {
		got = got[:0]
		rows, err := tx.QueryContext(ctx, `UPDATE queuekit_jobs SET
			state = CASE WHEN cancel_requested <> 0 THEN 'cancelled'
				WHEN attempt >= coalesce(nullif(max_attempts, 0), ?) THEN 'dead' ELSE 'available' END,
			finalized_at = CASE WHEN cancel_requested <> 0 OR attempt >= coalesce(nullif(max_attempts, 0), ?) THEN ? END,
			last_error = 'lease expired (owner ' || coalesce(lease_owner, '?') || ')',
			errors = json_insert(coalesce(errors, '[]'), '$[#]', json_object('attempt', attempt, 'at', ?,
				'error', 'lease expired (owner ' || coalesce(lease_owner, '?') || ')')),
			lease_owner = NULL, lease_expires_at = NULL
			WHERE id IN (SELECT id FROM queuekit_jobs WHERE queue = ? AND lease_expires_at IS NOT NULL AND lease_expires_at < ?
				AND state = 'running' ORDER BY lease_expires_at, id LIMIT 1000)
			RETURNING id, state, key, target, priority, attempt`,
			s.cfg.MaxAttempts, s.cfg.MaxAttempts, now, stamp(now), s.cfg.Name, now)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r rescued
			if err := rows.Scan(&r.id, &r.state, &r.key, &r.target, &r.prio, &r.att); err != nil {
				return err
			}
			got = append(got, r)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, r := range got {
			if r.state != stAvailable {
				if _, err := s.releaseRerun(ctx, tx, r.key, now); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		s.noteErr(err)
		return 0, fmt.Errorf("sqlitestore: rescue: %w", err)
	}
	ready := 0
	for _, r := range got {
		switch r.state {
		case stAvailable:
			ready++
			s.report(queuetype.EventRescued, r.id, r.key, r.target, r.prio, r.att, errors.New("lease expired"))
		case stDead:
			s.report(queuetype.EventDead, r.id, r.key, r.target, r.prio, r.att, errors.New("lease expired after the last attempt"))
		default:
			s.report(queuetype.EventCancelled, r.id, r.key, r.target, r.prio, r.att, errors.New("cancelled by an operator"))
		}
	}
	if len(got) > 0 {
		s.madeReady(ready)
	}
	return len(got), nil
}

// ReleaseHeld implements storekit.HoldStore: the queue's jobs held for
// target (Hold) that are not yet due become due now.
func (s *Store[T]) ReleaseHeld(ctx context.Context, target string) (int, error) {
	now := s.now()
	var n int64
	err := s.db.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `UPDATE queuekit_jobs SET run_at = ?, scheduled_at = ?, held = 0
			WHERE queue = ? AND target = ? AND held <> 0 AND state = 'retryable' AND run_at > ?`, now, now, s.cfg.Name, target, now)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: release held: %w", err)
	}
	if n > 0 {
		kick(s.wakePromote)
	}
	return int(n), nil
}
