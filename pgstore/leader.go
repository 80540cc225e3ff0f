package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queuekit/queue"
)

// Leadership is a row per queue in queuekit_leaders with an expiry in
// database time: the leader renews it every third of the TTL, the others
// try to take it every tenth, so a leader that dies is replaced within
// TTL + TTL/10 (and at once when it resigns in Close). A row, rather than
// a session advisory lock, keeps working behind poolers and survives a
// network cut the server has not noticed yet. The leader counts its term
// from before it asked, on its own monotonic clock, so two processes never
// both believe they lead.
//
// Only retention pruning is the leader's. Lease rescue runs in every
// process (rescueLoop): a leader that dies with a worker would otherwise
// leave the worker's jobs waiting for a new leader, up to a leader TTL
// after their leases expired.

// rescueLoop returns jobs whose lease expired, in every process: every
// janitor interval, less a random quarter of it so that processes started
// together spread their statements. The first pass too waits an interval
// (tests that step a fake clock and call RescueExpired themselves keep
// the loop out of their way with a long one). The rescue statement takes
// the expired rows with FOR UPDATE SKIP LOCKED and changes them only
// while they are still running with an expired lease, so processes
// rescuing at once share the work and rescue each job once
// (TestConcurrentRescueOnce). When nothing expired it costs one short
// transaction that finds no expired entry in the lease index.
func (s *Store[T]) rescueLoop(ctx context.Context) {
	for sleep(ctx, jitter(s.o.janitorInterval)) {
		if _, err := s.RescueExpired(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("pgstore: rescue of expired leases failed", "err", err)
		}
	}
}

// jitter returns a random duration in (3d/4, d].
func jitter(d time.Duration) time.Duration {
	q := d / 4
	if q <= 0 {
		return d
	}
	return d - rand.N(q)
}

// leaderLoop elects, renews and, while leading, prunes.
func (s *Store[T]) leaderLoop(ctx context.Context) {
	tick := min(s.o.leaderTTL/10, s.o.janitorInterval)
	renewEvery := s.o.leaderTTL / 3
	pruneEvery := 60 * s.o.janitorInterval
	var lastRenew, lastJanitor, lastPrune time.Time
	behind := false // the last pruning pass stopped at its bound
	for {
		leading := s.Leader()
		if !leading || time.Since(lastRenew) >= renewEvery {
			sent := time.Now()
			ok, err := s.elect(ctx)
			if ctx.Err() != nil {
				return
			}
			switch {
			case err != nil:
				s.cfg.Logger.Warn("pgstore: leader election failed", "err", err)
			case ok:
				if !leading {
					s.cfg.Logger.Info("pgstore: leading", "worker", s.owner)
				}
				lastRenew = sent
				s.setLeader(sent.Add(s.o.leaderTTL))
			case leading:
				s.cfg.Logger.Warn("pgstore: leadership lost", "worker", s.owner)
				s.setLeader(time.Time{})
			}
		}
		if s.Leader() && time.Since(lastJanitor) >= s.o.janitorInterval {
			lastJanitor = time.Now()
			// A pass is bounded; one that stopped at its bound is
			// followed by another at the next tick, so that pruning
			// keeps up with any rate of finished jobs.
			if behind || time.Since(lastPrune) >= pruneEvery {
				lastPrune = time.Now()
				var err error
				if _, behind, err = s.prune(ctx); err != nil && ctx.Err() == nil {
					s.cfg.Logger.Warn("pgstore: janitor: prune failed", "err", err)
				}
			}
		}
		if !sleep(ctx, tick) {
			return
		}
	}
}

func (s *Store[T]) setLeader(until time.Time) {
	s.leaderMu.Lock()
	s.leaderUntil = until
	s.leaderMu.Unlock()
}

// elect takes or renews leadership; true means this process leads.
func (s *Store[T]) elect(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.leaderTTL/2)
	defer cancel()
	var id string
	err := s.pool.QueryRow(ctx, s.q.elect, s.cfg.Name, s.owner, s.o.leaderTTL.Milliseconds()).Scan(&id)
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
	if !s.Leader() {
		return
	}
	s.setLeader(time.Time{})
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(ctx, s.q.resign, s.cfg.Name, s.owner); err != nil {
		s.cfg.Logger.Warn("pgstore: resigning leadership failed; it lapses with its TTL", "err", err)
	}
}

// rescueBatch bounds one rescue statement.
const rescueBatch = 1000

// RescueExpired implements queue.Leaser: running jobs whose lease expired
// (on the queue's clock) become available again, keeping their attempt
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
		dead            bool
		key, target     string
		weight, attempt int
	}
	var got []rescued
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		got = got[:0]
		rows, err := tx.Query(ctx, s.q.rescue, s.cfg.Name, now, rescueBatch, s.cfg.MaxAttempts)
		if err != nil {
			return err
		}
		var r rescued
		var deadIDs []int64
		_, err = pgx.ForEachRow(rows, []any{&r.id, &r.dead, &r.key, &r.target, &r.weight, &r.attempt}, func() error {
			got = append(got, r)
			if r.dead && r.key != "" {
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
		if r.dead {
			s.report(queue.EventDead, r.id, r.key, r.target, r.weight, r.attempt, 0, errLeaseExpired)
		} else {
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
// their retention (see WithRetention), in bounded batches, and reports how
// many it deleted. The leader runs it every 60 janitor intervals, and at
// the next interval again while a pass leaves old jobs behind.
func (s *Store[T]) Prune(ctx context.Context) (int, error) {
	n, _, err := s.prune(ctx)
	return n, err
}

// prune runs one pruning pass; more reports that it stopped at its bound
// with old jobs perhaps left.
func (s *Store[T]) prune(ctx context.Context) (total int, more bool, err error) {
	now := s.cfg.Clock.Now()
	for range pruneBatches {
		tag, err := s.pool.Exec(ctx, s.q.prune, s.cfg.Name, now.Add(-s.o.keepCompleted), pruneBatch, now.Add(-s.o.keepDead))
		s.noteErr(err)
		if err != nil {
			return total, false, fmt.Errorf("pgstore: prune: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < pruneBatch {
			return total, false, nil
		}
	}
	return total, true, nil
}
