package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/queuekit/queue"
)

// Cancel implements storekit.Store: it cancels the waiting job with key
// (queued, scheduled or a rerun); a running job is not touched. The row
// stays, in state cancelled, until pruned.
func (s *Store[T]) Cancel(ctx context.Context, key string) (int, error) {
	if key == "" {
		return 0, nil
	}
	rows, err := s.pool.Query(ctx, s.q.cancel, s.cfg.Name, storedKey(key), s.cfg.Clock.Now())
	if err != nil {
		s.noteErr(err)
		return 0, fmt.Errorf("pgstore: cancel: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	s.noteErr(err)
	if err != nil {
		return 0, fmt.Errorf("pgstore: cancel: %w", err)
	}
	return len(ids), nil
}

// CancelMatch implements storekit.Store. It reads every waiting key of the
// queue, calls match on each, and cancels the matches that are still
// waiting in one statement.
func (s *Store[T]) CancelMatch(ctx context.Context, match func(key string) bool) (int, error) {
	rows, err := s.pool.Query(ctx, s.q.waitingKeys, s.cfg.Name)
	if err != nil {
		s.noteErr(err)
		return 0, fmt.Errorf("pgstore: cancel: %w", err)
	}
	var ids []int64
	var id int64
	var key string
	var raw []byte
	_, err = pgx.ForEachRow(rows, []any{&id, &key, &raw}, func() error {
		if match(loadKey(key, raw)) {
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		s.noteErr(err)
		return 0, fmt.Errorf("pgstore: cancel: %w", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	return s.execCount(ctx, "cancel", s.q.cancelIDs, ids, s.cfg.Clock.Now())
}

// Purge implements storekit.Store: every waiting job of the queue (queued,
// scheduled, retrying, reruns) is cancelled.
func (s *Store[T]) Purge(ctx context.Context) (int, error) {
	n, err := s.execCount(ctx, "purge", s.q.purge, s.cfg.Name, s.cfg.Clock.Now())
	if err == nil {
		s.ready.Store(0)
	}
	return n, err
}

func (s *Store[T]) execCount(ctx context.Context, what, sql string, args ...any) (int, error) {
	var tag pgconn.CommandTag
	tag, err := s.pool.Exec(ctx, sql, args...)
	s.noteErr(err)
	if err != nil {
		return 0, fmt.Errorf("pgstore: %s: %w", what, err)
	}
	return int(tag.RowsAffected()), nil
}

// promoteBatch bounds one promotion statement.
const promoteBatch = 1000

// PromoteDue implements storekit.Store: due scheduled and retryable jobs
// become available, in due order, while the queue has room; the rest are
// put RequeueDelay later (reported as queue.EventRequeued). Every process
// runs it by itself when the next job is due and on wake-ups; it is safe
// to run concurrently (rows are taken with SKIP LOCKED).
func (s *Store[T]) PromoteDue(ctx context.Context) (int, error) {
	return s.promoteDue(ctx, nil, 0)
}

// promoteDue is PromoteDue; when next is not nil, it also reads the
// earliest due time left into *next, in the same round trip as the last
// promotion statement. ahead promotes the jobs due within that time too
// (see promoteAhead): they are available but not claimed before their due
// time, when the fetcher claims them (see fetchDue).
func (s *Store[T]) promoteDue(ctx context.Context, next **time.Time, ahead time.Duration) (int, error) {
	// One promotion at a time per process: a caller that finds one running
	// waits for it (and for the events it reports) instead of skipping
	// the rows it holds.
	s.promoteMu.Lock()
	defer s.promoteMu.Unlock()
	moved, dueNow := 0, 0
	for range 100 {
		n, now, full, err := s.promoteOnce(ctx, next, ahead)
		moved += n
		dueNow += now
		if err != nil {
			return moved, err
		}
		if !full {
			break
		}
	}
	if moved > 0 {
		s.ready.Add(int64(moved))
	}
	if dueNow > 0 {
		kick(s.wakeFetch) // the jobs promoted ahead: at their due time
	}
	return moved, nil
}

// promoteOnce runs one promotion statement; full reports a full batch,
// dueNow how many of the jobs it made available are due already.
// When next is not nil, the earliest due time left is read into *next in
// the same round trip (and implicit transaction, so it sees the rows just
// promoted as gone).
func (s *Store[T]) promoteOnce(ctx context.Context, next **time.Time, ahead time.Duration) (moved, dueNow int, full bool, err error) {
	now := s.cfg.Clock.Now()
	capacity := 0
	if s.o.checkCapacity {
		capacity = s.cfg.Capacity
	}
	requeueAt := now.Add(s.cfg.RequeueDelay)
	type requeued struct {
		id              int64
		key, target     string
		weight, attempt int
	}
	var (
		total int
		back  []requeued
		later []time.Time // due times of the jobs promoted ahead
	)
	b := &pgx.Batch{}
	b.Queue(s.q.promote, s.cfg.Name, now.Add(ahead), promoteBatch, capacity, requeueAt, s.channel, now).Query(func(rows pgx.Rows) error {
		var (
			r     requeued
			avail bool
			runAt time.Time
			notes int64
		)
		_, err := pgx.ForEachRow(rows, []any{&r.id, &avail, &r.key, &r.target, &r.weight, &r.attempt, &runAt, &notes}, func() error {
			total++
			if avail {
				moved++
				if runAt.After(now) {
					later = append(later, runAt)
				}
			} else {
				back = append(back, r)
			}
			return nil
		})
		return err
	})
	if next != nil {
		b.Queue(s.q.nextDue, s.cfg.Name).QueryRow(func(row pgx.Row) error { return row.Scan(next) })
	}
	err = s.pool.SendBatch(ctx, b).Close()
	s.noteErr(err)
	if err != nil {
		return 0, 0, false, fmt.Errorf("pgstore: promote: %w", err)
	}
	s.fd.add(later)
	for _, r := range back {
		s.report(queue.EventRequeued, r.id, r.key, r.target, r.weight, r.attempt, s.cfg.RequeueDelay, nil)
	}
	return moved, moved - len(later), total == promoteBatch && len(back) == 0, nil
}
