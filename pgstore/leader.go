package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit/durable"
)

// Leadership is a row per queue in queuekit_leaders with an expiry in
// database time: the leader renews it every third of the TTL, the others
// try to take it every tenth, at most every 500 ms, so a leader that dies
// is replaced within TTL + min(TTL/10, 500 ms) (and at once when it
// resigns in Close). A row, rather than a session advisory lock, keeps
// working behind poolers and survives a network cut the server has not
// noticed yet. The leader counts its term from before it asked, on its
// own monotonic clock, so two processes never both believe they lead.
//
// Only retention pruning is the leader's. Lease rescue runs in every
// process (rescueLoop): a leader that dies with a worker would otherwise
// leave the worker's jobs waiting for a new leader, up to a leader TTL
// after their leases expired.

// rescueLoop returns jobs whose lease expired, in every process: every
// janitor interval, the wait drawn from the interval's second half so
// that processes started together spread their statements
// (durable.RescueLoop). The first pass too waits (tests that step a fake
// clock and call RescueExpired themselves keep the loop out of their way
// with a long interval). The rescue statement takes the expired rows with
// FOR UPDATE SKIP LOCKED and changes them only while they are still
// running with an expired lease, so processes rescuing at once share the
// work and rescue each job once (TestConcurrentRescueOnce). When nothing
// expired it costs one short transaction that finds no expired entry in
// the lease index.
func (s *Store[T]) rescueLoop(ctx context.Context) {
	durable.RescueLoop(ctx, s.o.JanitorInterval, s.RescueExpired, s.cfg.Logger, "pgstore")
}

// leaderLoop elects, renews and, while leading, prunes (durable.Leader:
// renewal every third of the TTL, a standby's attempt every tenth, at
// most every 500 ms, the janitor every janitor interval).
func (s *Store[T]) leaderLoop(ctx context.Context) {
	s.lead.Run(ctx, durable.Election{
		TTL:             s.o.LeaderTTL,
		JanitorInterval: s.o.JanitorInterval,
		Elect:           func(ctx context.Context, _ bool) (bool, error) { return s.elect(ctx) },
		Janitor:         s.pruner(),
		Log:             s.cfg.Logger.With("worker", s.owner),
		Pkg:             "pgstore",
	})
}

// pruner returns the leader's janitor: a pruning pass every 60 janitor
// intervals, and at the next interval again while a pass stopped at its
// bound, so that pruning keeps up with any rate of finished jobs.
func (s *Store[T]) pruner() func(context.Context) {
	every := 60 * s.o.JanitorInterval
	var last time.Time
	behind := false // the last pass stopped at its bound
	return func(ctx context.Context) {
		if !behind && time.Since(last) < every {
			return
		}
		last = time.Now()
		var err error
		if _, behind, err = s.prune(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("pgstore: janitor: prune failed", "err", err)
		}
	}
}

// elect takes or renews leadership; true means this process leads.
func (s *Store[T]) elect(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.LeaderTTL/2)
	defer cancel()
	var id string
	err := s.pool.QueryRow(ctx, s.q.elect, s.cfg.Name, s.owner, s.o.LeaderTTL.Milliseconds()).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		s.noteErr(nil)
		return false, nil
	}
	s.noteErr(err)
	if err != nil {
		return false, err
	}
	return true, nil
}

// resign gives up leadership so that another process takes over at once.
func (s *Store[T]) resign(ctx context.Context) {
	if !s.lead.Resign() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.q.resign, s.cfg.Name, s.owner); err != nil {
		s.cfg.Logger.Warn("pgstore: resigning leadership failed; it lapses with its TTL", "err", err)
	}
}

// rescueBatch bounds one rescue statement.
const rescueBatch = 1000

// RescueExpired implements storekit.Leaser: running jobs whose lease expired
// (in database time; see WithLeaseTTL) become available again, keeping their attempt
// count — the lost run used an attempt — or are dead-lettered when that was
// their last attempt. A dead-lettered job's rerun, if any, becomes ready.
// Each job is reported as queue.EventRescued or queue.EventDead, by the
// process that rescued it. Every process runs it every janitor interval;
// it is safe to run anywhere, at any time, and concurrently: each expired
// job is rescued once.
func (s *Store[T]) RescueExpired(ctx context.Context) (int, error) {
	s.rescueMu.Lock()
	defer s.rescueMu.Unlock()
	total := 0
	for range 100 {
		n, err := s.rescueOnce(ctx)
		total += n
		if err != nil || n < rescueBatch {
			return total, err
		}
	}
	return total, nil
}

func (s *Store[T]) rescueOnce(ctx context.Context) (int, error) {
	now := s.cfg.Clock.Now()
	type rescued struct {
		id              int64
		state           string // available, dead, or cancelled (an operator asked: admin Cancel)
		key, target     string
		weight, attempt int
	}
	var got []rescued
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		got = got[:0]
		rows, err := tx.Query(ctx, s.q.rescue, s.cfg.Name, now, rescueBatch, s.cfg.MaxAttempts, s.leaseShift().Microseconds())
		if err != nil {
			return err
		}
		var r rescued
		var deadIDs []int64
		_, err = pgx.ForEachRow(rows, []any{&r.id, &r.state, &r.key, &r.target, &r.weight, &r.attempt}, func() error {
			got = append(got, r)
			if r.state != stAvailable && r.key != "" {
				deadIDs = append(deadIDs, r.id) // only keyed jobs can have reruns
			}
			return nil
		})
		if err != nil || len(got) == 0 {
			return err
		}
		if len(deadIDs) > 0 {
			capacity := 0
			if s.o.checkCapacity {
				capacity = s.cfg.Capacity
			}
			var ready, all, notes int64
			if err := tx.QueryRow(ctx, s.q.releaseReruns, s.cfg.Name, deadIDs, now, capacity,
				now.Add(s.cfg.RequeueDelay), s.channel).Scan(&ready, &all, &notes); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, "SELECT pg_notify($1::text, $2::text)", s.channel, s.cfg.Name)
		return err
	})
	s.noteErr(err)
	if err != nil {
		return 0, fmt.Errorf("pgstore: rescue: %w", err)
	}
	for _, r := range got {
		switch r.state {
		case stDead:
			s.report(queue.EventDead, r.id, r.key, r.target, r.weight, r.attempt, 0, errLeaseExpired)
		case stCancelled:
			s.report(queue.EventCancelled, r.id, r.key, r.target, r.weight, r.attempt, 0, errCancelledByAdmin)
		default:
			s.ready.Add(1)
			s.report(queue.EventRescued, r.id, r.key, r.target, r.weight, r.attempt, 0, errLeaseExpired)
		}
	}
	if len(got) > 0 {
		kick(s.wakeFetch)
		kick(s.wakePromote)
	}
	return len(got), nil
}

var errLeaseExpired = errors.New("pgstore: lease expired")

// pruneBatch bounds one retention statement; a pass runs at most
// pruneBatches of them, so that the janitor never holds up for long.
const (
	pruneBatch   = 1000
	pruneBatches = 20
)

// Prune deletes the queue's completed, cancelled and dead jobs older than
// their retention (see WithCompletedRetention and WithDeadRetention), and
// the unique-window marks (Job.UniqueFor) whose windows ended, in bounded
// batches, and reports how many jobs it deleted. The leader runs it
// every 60 janitor intervals, and at the next interval again while a pass
// leaves old jobs behind.
func (s *Store[T]) Prune(ctx context.Context) (int, error) {
	n, _, err := s.prune(ctx)
	return n, err
}

// prune runs one pruning pass; more reports that it stopped at its bound
// with old jobs (or expired unique-window marks) perhaps left. The marks
// are not counted in total, which counts jobs.
func (s *Store[T]) prune(ctx context.Context) (total int, more bool, err error) {
	more, err = s.pruneMarks(ctx)
	if err != nil {
		return 0, false, err
	}
	now := s.cfg.Clock.Now()
	for range pruneBatches {
		tag, err := s.pool.Exec(ctx, s.q.prune, s.cfg.Name, now.Add(-s.o.keepCompleted), pruneBatch, now.Add(-s.o.DeadRetention))
		s.noteErr(err)
		if err != nil {
			return total, false, fmt.Errorf("pgstore: prune: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < pruneBatch {
			return total, more, nil
		}
	}
	return total, true, nil
}

// pruneMarks deletes the queue's unique-window marks whose windows ended
// (judged by the database's clock, as the add statement judges them), in
// bounded batches; more reports that it stopped at its bound.
func (s *Store[T]) pruneMarks(ctx context.Context) (more bool, err error) {
	for range pruneBatches {
		tag, err := s.pool.Exec(ctx, s.q.pruneMarks, s.cfg.Name, pruneBatch, s.leaseShift().Microseconds())
		s.noteErr(err)
		if err != nil {
			return false, fmt.Errorf("pgstore: prune unique marks: %w", err)
		}
		if tag.RowsAffected() < pruneBatch {
			return false, nil
		}
	}
	return true, nil
}
