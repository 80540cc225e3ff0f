package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/queuekit/queue/queuetype"
)

// PromoteDue implements storekit.Store: the queue's scheduled and
// retryable jobs that are due become available while the queue has
// room; the others wait RequeueDelay more (reported as requeued). It
// moves at most 1000 jobs per call.
func (s *Store[T]) PromoteDue(ctx context.Context) (int, error) {
	return s.promote(ctx, 0)
}

// promote is PromoteDue; when want > 0 jobs are reserved for this
// process's waiting Claim callers (see reserve), the same transaction
// claims up to want of the jobs it made available and delivers them: a
// due job costs one commit, not one for the promotion and another for
// the claim.
func (s *Store[T]) promote(ctx context.Context, want int) (int, error) {
	now := s.now()
	var p promotion
	var got []claimed
	err := s.db.write(ctx, func(tx *wtx) error {
		var err error
		got = nil
		if p, err = s.promoteIn(ctx, tx, now); err != nil || p.moved == 0 || want == 0 {
			return err
		}
		got, err = s.claimIn(ctx, tx, want)
		return err
	})
	if err != nil {
		p, got = promotion{}, nil // of a transaction that did not commit
	}
	if want > 0 {
		s.ready.Add(int64(p.moved))
		s.deliver(got, want)
	}
	if err != nil {
		s.noteErr(err)
		return 0, fmt.Errorf("sqlitestore: promote: %w", err)
	}
	for _, d := range p.requeued {
		s.report(queuetype.EventRequeued, d.id, d.key, d.target, d.prio, d.att, nil)
	}
	if want > 0 {
		if p.moved > len(got) {
			s.madeReady(0)
		}
	} else if p.moved > 0 {
		s.madeReady(p.moved)
	}
	return p.moved, nil
}

// promotion is what promoteIn did: the jobs it made available, and the
// ones it put off for want of room.
type promotion struct {
	moved    int
	requeued []due
}

// due is a due job as promoteIn reads it.
type due struct {
	id        int64
	key       []byte
	target    string
	prio, att int
}

// promoteIn promotes the queue's due jobs, at most 1000, in tx.
func (s *Store[T]) promoteIn(ctx context.Context, tx *wtx, now int64) (promotion, error) {
	var p promotion
	rows, err := tx.QueryContext(ctx, `SELECT id, key, target, priority, attempt FROM queuekit_jobs
		WHERE queue = ? AND state IN ('scheduled', 'retryable') AND run_at <= ? ORDER BY run_at, id LIMIT 1000`, s.cfg.Name, now)
	if err != nil {
		return p, err
	}
	var ds []due
	for rows.Next() {
		var d due
		if err := rows.Scan(&d.id, &d.key, &d.target, &d.prio, &d.att); err != nil {
			rows.Close()
			return p, err
		}
		ds = append(ds, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ds) == 0 {
		return p, err
	}
	fits := len(ds)
	if s.o.checkCapacity && s.cfg.Capacity > 0 {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM queuekit_jobs WHERE queue = ? AND state = 'available' LIMIT ?)`,
			s.cfg.Name, s.cfg.Capacity).Scan(&n); err != nil {
			return p, err
		}
		fits = max(s.cfg.Capacity-n, 0)
	}
	later := now + int64(s.cfg.RequeueDelay)
	for i, d := range ds {
		if i < fits {
			if _, err := tx.ExecContext(ctx, "UPDATE queuekit_jobs SET state = 'available' WHERE id = ?", d.id); err != nil {
				return p, err
			}
			p.moved++
			continue
		}
		if _, err := tx.ExecContext(ctx, "UPDATE queuekit_jobs SET state = 'retryable', run_at = ?, scheduled_at = ? WHERE id = ?",
			later, later, d.id); err != nil {
			return p, err
		}
		p.requeued = append(p.requeued, d)
	}
	return p, nil
}

// nextDue returns the queue's earliest scheduled time, false when none.
func (s *Store[T]) nextDue(ctx context.Context) (int64, bool, error) {
	var at sql.NullInt64
	err := s.db.r.QueryRowContext(ctx, `SELECT (SELECT run_at FROM queuekit_jobs WHERE queue = ? AND state IN ('scheduled', 'retryable')
		ORDER BY run_at LIMIT 1)`, s.cfg.Name).Scan(&at)
	return at.Int64, at.Valid, err
}

// promoteLoop promotes the queue's jobs on a timer to the earliest due
// time (on the queue's Clock), read again whenever the schedule may have
// changed: this process's own adds and put-backs at once, other
// processes' writes within the DB's wake interval; the poll interval at
// the latest.
func (s *Store[T]) promoteLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wakePromote:
		}
		wait := s.o.PollInterval
		for {
			at, ok, err := s.nextDue(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				s.noteErr(err)
				break
			}
			if !ok {
				break
			}
			if d := time.Duration(at - s.now()); d > 0 {
				wait = min(wait, d)
				break
			}
			n, err := s.promote(ctx, s.reserve())
			if err != nil || n == 0 {
				// Nothing fits (capacity): the requeued jobs wait.
				break
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(wait)
	}
}
