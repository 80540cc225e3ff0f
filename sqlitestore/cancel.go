package sqlitestore

import (
	"context"
	"fmt"
)

// Cancel implements storekit.Store: the queue's waiting jobs (ready,
// scheduled, retryable, reruns) with key end cancelled.
func (s *Store[T]) Cancel(ctx context.Context, key string) (int, error) {
	now := s.now()
	var n int64
	err := s.db.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'cancelled', finalized_at = ?
			WHERE queue = ? AND key = ? AND key <> x'' AND state IN `+waitingStates, now, s.cfg.Name, kb(key))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: cancel: %w", err)
	}
	if n > 0 {
		s.refreshLen(ctx)
	}
	return int(n), nil
}

// CancelMatch implements storekit.Store: it reads the keys of the queue's
// waiting jobs, and cancels those match accepts that still wait.
func (s *Store[T]) CancelMatch(ctx context.Context, match func(key string) bool) (int, error) {
	rows, err := s.db.r.QueryContext(ctx, `SELECT id, key FROM queuekit_jobs WHERE queue = ? AND key <> x'' AND state IN `+waitingStates, s.cfg.Name)
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: cancel match: %w", err)
	}
	var ids []int64
	for rows.Next() {
		var id int64
		var key []byte
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return 0, fmt.Errorf("sqlitestore: cancel match: %w", err)
		}
		if match(string(key)) {
			ids = append(ids, id)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("sqlitestore: cancel match: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	now := s.now()
	var n int64
	err = s.db.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'cancelled', finalized_at = ?
			WHERE id IN (SELECT value FROM json_each(?)) AND state IN `+waitingStates, now, idList(ids))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: cancel match: %w", err)
	}
	s.refreshLen(ctx)
	return int(n), nil
}

// Purge implements storekit.Store: every waiting job of the queue ends
// cancelled. Running jobs are untouched.
func (s *Store[T]) Purge(ctx context.Context) (int, error) {
	now := s.now()
	var n int64
	err := s.db.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, `UPDATE queuekit_jobs SET state = 'cancelled', finalized_at = ?
			WHERE queue = ? AND state IN `+waitingStates, now, s.cfg.Name)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: purge: %w", err)
	}
	s.refreshLen(ctx)
	return int(n), nil
}

// refreshLen counts the queue's available jobs again, for Len (at most
// max(2·capacity, 10000)).
func (s *Store[T]) refreshLen(ctx context.Context) {
	limit := max(2*s.cfg.Capacity, 10000)
	var n int64
	if err := s.db.r.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM queuekit_jobs WHERE queue = ? AND state = 'available' LIMIT ?)`,
		s.cfg.Name, limit).Scan(&n); err == nil {
		s.ready.Store(n)
	}
}
