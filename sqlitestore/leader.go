package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/queuekit/queue/storekit/durable"
)

// Leadership, the janitor and the fleet's presence are judged by the
// machine's clock (every process of a file runs on one machine), job
// times by the queue's Clock.

// pruneBatch bounds the jobs of each final state one pruning pass deletes.
const pruneBatch = 20000

// pruneEvery is how many janitor intervals pass between pruning passes.
const pruneEvery = 60

func (s *Store[T]) leaderLoop(ctx context.Context) {
	tick := 0
	behind := false
	s.lead.Run(ctx, durable.Election{
		TTL:             s.o.LeaderTTL,
		JanitorInterval: s.o.JanitorInterval,
		Elect:           s.elect,
		Janitor: func(ctx context.Context) {
			tick++
			if tick%pruneEvery != 1 && !behind {
				return
			}
			var err error
			behind, err = s.Prune(ctx)
			if err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("sqlitestore: pruning failed", "err", err)
			}
		},
		Log: s.cfg.Logger,
		Pkg: "sqlitestore",
	})
}

// elect takes or renews the queue's leadership for the leader TTL.
func (s *Store[T]) elect(ctx context.Context, _ bool) (bool, error) {
	now := time.Now().UnixNano()
	var leading bool
	err := s.db.write(ctx, func(tx *wtx) error {
		var id string
		err := tx.QueryRowContext(ctx, `INSERT INTO queuekit_leaders (queue, leader_id, elected_at, expires_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (queue) DO UPDATE SET leader_id = excluded.leader_id,
				elected_at = CASE WHEN leader_id = excluded.leader_id THEN elected_at ELSE excluded.elected_at END,
				expires_at = excluded.expires_at
			WHERE leader_id = excluded.leader_id OR expires_at < ?
			RETURNING leader_id`, s.cfg.Name, s.owner, now, now+int64(s.o.LeaderTTL), now).Scan(&id)
		leading = err == nil
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	return leading, err
}

// Prune deletes, for the queue, completed and cancelled jobs older than
// the completed retention, dead jobs older than the dead retention (each
// at most 20 000 per call, oldest first), unique-window marks that ended,
// and old announcements. It reports whether it reached a bound (more
// remain). The leader runs it every 60 janitor intervals, and at every
// interval while it is behind.
func (s *Store[T]) Prune(ctx context.Context) (bool, error) {
	now := s.now()
	real := time.Now().UnixNano()
	var behind bool
	err := s.db.write(ctx, func(tx *wtx) error {
		behind = false
		for _, p := range []struct {
			state string
			keep  time.Duration
		}{{stCompleted, s.o.keepCompleted}, {stCancelled, s.o.keepCompleted}, {stDead, s.o.DeadRetention}} {
			res, err := tx.ExecContext(ctx, `DELETE FROM queuekit_jobs WHERE id IN (SELECT id FROM queuekit_jobs
				WHERE queue = ? AND state = ? AND finalized_at < ? ORDER BY finalized_at LIMIT ?)`,
				s.cfg.Name, p.state, now-int64(p.keep), pruneBatch)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n >= pruneBatch {
				behind = true
			}
		}
		for _, q := range []struct {
			sql string
			arg int64
		}{
			{"DELETE FROM queuekit_unique WHERE queue = ? AND until <= ?", now},
			{"DELETE FROM queuekit_notes WHERE queue = ? AND at < ?", real - int64(time.Minute)},
			{"DELETE FROM queuekit_processes WHERE queue = ? AND expires_at < ?", real},
			{"DELETE FROM queuekit_slot_line WHERE queue = ? AND expires_at < ?", now},
			{"DELETE FROM queuekit_targets WHERE queue = ? AND key <> '' AND next_due < ?", now - int64(time.Minute)},
		} {
			if _, err := tx.ExecContext(ctx, q.sql, s.cfg.Name, q.arg); err != nil {
				return err
			}
		}
		return nil
	})
	return behind, err
}

func (s *Store[T]) rescueLoop(ctx context.Context) {
	durable.RescueLoop(ctx, s.o.JanitorInterval, s.RescueExpired, s.cfg.Logger, "sqlitestore")
}

// presenceTTL is how long a process counts in Processes after its last
// renewal; it renews every third of it.
const presenceTTL = 6 * time.Second

// fleetLoop keeps this process's presence (Processes), renews the leases
// of the jobs claimed and not yet handed out, refreshes Len, and reports
// EnqueueTx's jobs once committed.
func (s *Store[T]) fleetLoop(ctx context.Context) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.txLoop(ctx)
	}()
	every := min(presenceTTL/3, s.o.HeartbeatInterval(), s.o.PollInterval)
	for {
		s.presence(ctx)
		if ids := s.bufferedIDs(); len(ids) > 0 {
			_, _ = s.Heartbeat(ctx, ids)
		}
		s.refreshLen(ctx)
		if !durable.Sleep(ctx, every) {
			return
		}
	}
}

func (s *Store[T]) presence(ctx context.Context) {
	now := time.Now().UnixNano()
	var n int64
	err := s.db.write(ctx, func(tx *wtx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO queuekit_processes (queue, owner, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (queue, owner) DO UPDATE SET expires_at = excluded.expires_at`, s.cfg.Name, s.owner, now+int64(presenceTTL)); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, "SELECT count(*) FROM queuekit_processes WHERE queue = ? AND expires_at > ?", s.cfg.Name, now).Scan(&n)
	})
	if err == nil {
		s.procs.Store(max(n, 1))
	}
}

// Processes implements storekit.FleetSizer: the started processes of the
// queue on the file, as last counted (every 2 s at most), at least 1.
func (s *Store[T]) Processes() int { return int(max(s.procs.Load(), 1)) }
