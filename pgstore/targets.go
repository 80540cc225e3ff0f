package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuekit/queue/storekit"
)

// The store implements storekit.TargetStore: target health and fan-out
// cadence live in the queuekit_targets table (migration 004), one row per
// entry, and each write is announced on the schema's NOTIFY channel with
// the entry in the payload, so that the other processes apply it without
// a query. A payload too large for NOTIFY (a target name or key of several
// kilobytes) is not announced: the other processes see the entry at
// their next reload, at most a second later.
var _ storekit.TargetStore = (*Store[int])(nil)

// maxNotePayload is the largest target announcement sent; PostgreSQL's
// limit is 8000 bytes.
const maxNotePayload = 7900

// pruneEvery is how many loads pass between two prunings of next-due
// entries that are past.
const pruneEvery = 60

// targetNote is the payload announcing a written entry.
type targetNote struct {
	Queue string               `json:"q"`
	State storekit.TargetState `json:"s"`
}

// targetWatch holds WatchTargets' function; the listener calls it.
type targetWatch struct {
	fn         atomic.Pointer[func(storekit.TargetState)]
	loads      atomic.Int64
	listenUp   chan struct{} // closed once the LISTEN connection first listens
	listenOnce sync.Once
}

// awaitListen waits, at most schemaCheckTimeout, for the LISTEN
// connection when WatchTargets was called, so that no entry written
// after Start is missed.
func (s *Store[T]) awaitListen() {
	if s.tw.fn.Load() == nil || !s.o.listen {
		return
	}
	t := time.NewTimer(schemaCheckTimeout)
	defer t.Stop()
	select {
	case <-s.tw.listenUp:
	case <-t.C:
		s.cfg.Logger.Warn("pgstore: not listening yet; target changes are seen at the next reload until it does")
	}
}

func (s *Store[T]) targetsTable() string {
	if s.o.schema == "" {
		return pgx.Identifier{"queuekit_targets"}.Sanitize()
	}
	return pgx.Identifier{s.o.schema, "queuekit_targets"}.Sanitize()
}

// LoadTargets implements storekit.TargetStore: it returns the queue's rows of
// queuekit_targets. Every 60th load also deletes next-due entries more
// than a minute past.
func (s *Store[T]) LoadTargets(ctx context.Context) ([]storekit.TargetState, error) {
	if !s.bound.Load() {
		return nil, ErrNotBound
	}
	table := s.targetsTable()
	if s.tw.loads.Add(1)%pruneEvery == 0 {
		if _, err := s.pool.Exec(ctx, "DELETE FROM "+table+
			" WHERE queue = $1 AND key <> '' AND next_due < now() - interval '1 minute'", s.cfg.Name); err != nil {
			return nil, fmt.Errorf("pgstore: pruning target state: %w", err)
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT target, key, next_due, suspended_until, disabled, reason, disabled_at, breaker_until
		FROM `+table+` WHERE queue = $1`, s.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("pgstore: loading target state: %w", s.tableErr(err))
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (storekit.TargetState, error) {
		var st storekit.TargetState
		var due, susp, dis, brk *time.Time
		err := row.Scan(&st.Target, &st.Key, &due, &susp, &st.Disabled, &st.Reason, &dis, &brk)
		st.NextDue, st.SuspendedUntil, st.DisabledAt, st.BreakerUntil = deref(due), deref(susp), deref(dis), deref(brk)
		return st, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: loading target state: %w", err)
	}
	return out, nil
}

// tableErr turns "relation does not exist" into a *NotMigratedError.
func (s *Store[T]) tableErr(err error) error {
	if nm := s.notMigrated(err); nm != nil {
		nm.Missing = s.targetsTable()
		return nm
	}
	return err
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

// SaveTargets implements storekit.TargetStore: one transaction, in one round
// trip, upserts or deletes each entry and announces it.
func (s *Store[T]) SaveTargets(ctx context.Context, states []storekit.TargetState) error {
	if !s.bound.Load() {
		return ErrNotBound
	}
	if len(states) == 0 {
		return nil
	}
	table := s.targetsTable()
	upsert := `WITH w AS (INSERT INTO ` + table + ` AS t (queue, target, key, next_due, suspended_until, disabled, reason, disabled_at, breaker_until)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (queue, target, key) DO UPDATE SET next_due = EXCLUDED.next_due, suspended_until = EXCLUDED.suspended_until,
			disabled = EXCLUDED.disabled, reason = EXCLUDED.reason, disabled_at = EXCLUDED.disabled_at,
			breaker_until = EXCLUDED.breaker_until, updated_at = now())
		SELECT CASE WHEN $11::text = '' THEN '' ELSE pg_notify($10::text, $11::text)::text END`
	del := `WITH w AS (DELETE FROM ` + table + ` WHERE queue = $1 AND target = $2 AND key = $3)
		SELECT CASE WHEN $5::text = '' THEN '' ELSE pg_notify($4::text, $5::text)::text END`
	b := &pgx.Batch{}
	for i := range states {
		st := &states[i]
		note := ""
		if s.o.listen {
			p, err := json.Marshal(targetNote{Queue: s.cfg.Name, State: *st})
			if err != nil {
				return fmt.Errorf("pgstore: encoding target state: %w", err)
			}
			if len(p) <= maxNotePayload {
				note = string(p)
			}
		}
		if st.Empty() {
			b.Queue(del, s.cfg.Name, st.Target, st.Key, s.channel, note)
			continue
		}
		b.Queue(upsert, s.cfg.Name, st.Target, st.Key, nullTime(st.NextDue), nullTime(st.SuspendedUntil), st.Disabled,
			st.Reason, nullTime(st.DisabledAt), nullTime(st.BreakerUntil), s.channel, note)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgstore: writing target state: %w", s.tableErr(err))
	}
	return nil
}

// WatchTargets implements storekit.TargetStore: the LISTEN connection (see
// WithListen) calls fn with each entry announced for the queue. Without
// it, the queue sees changes when it reloads.
func (s *Store[T]) WatchTargets(fn func(storekit.TargetState)) { s.tw.fn.Store(&fn) }

// targetNoted hands an announced entry to WatchTargets' function.
func (s *Store[T]) targetNoted(payload string) {
	fn := s.tw.fn.Load()
	if fn == nil {
		return
	}
	var n targetNote
	if err := json.Unmarshal([]byte(payload), &n); err != nil || n.Queue != s.cfg.Name {
		return
	}
	(*fn)(n.State)
}
