package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/storekit"
)

// Fleet state shared by the processes of a queue on one file: target
// health (storekit.TargetStore), the admission bucket (storekit.Admitter)
// and concurrency slots (storekit.SlotStore). SQLite has no NOTIFY: a
// write that other processes must hear of (a target entry, a slot
// released or refused) also appends a row to queuekit_notes, and each
// process reads the rows after the last it saw whenever the file changed
// (PRAGMA data_version, every wake interval): an announcement reaches
// every process, this one included, within a few milliseconds.

var (
	_ storekit.TargetStore = (*Store[int])(nil)
	_ storekit.Admitter    = (*Store[int])(nil)
	_ storekit.FleetSizer  = (*Store[int])(nil)
	_ storekit.SlotStore   = (*Store[int])(nil)
)

const (
	noteTarget = "target"
	noteSlot   = "slot"
)

// notes reads the queue's announcements and hands them to the watchers.
type notes struct {
	db      *DB
	queue   string
	last    atomic.Int64
	mu      sync.Mutex // one reader at a time
	targets atomic.Pointer[func(storekit.TargetState)]
	slots   atomic.Pointer[func(target, waiter string)]
	wake    chan struct{}
}

type slotBody struct {
	Target string `json:"t"`
	Waiter string `json:"w,omitempty"`
}

// init starts reading after the announcements already in the file.
func (n *notes) init(ctx context.Context, db *DB, queue string) error {
	n.db, n.queue = db, queue
	n.wake = make(chan struct{}, 1)
	var last int64
	if err := db.r.QueryRowContext(ctx, "SELECT coalesce(max(seq), 0) FROM queuekit_notes").Scan(&last); err != nil {
		return fmt.Errorf("sqlitestore: Start: %w", err)
	}
	n.last.Store(last)
	return nil
}

func (n *notes) kick() {
	if n.wake != nil {
		kick(n.wake)
	}
}

// loop reads new announcements when the file changed, and every second.
func (n *notes) loop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		case <-time.After(time.Second):
		}
		n.read(ctx)
	}
}

func (n *notes) read(ctx context.Context) {
	if n.targets.Load() == nil && n.slots.Load() == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	rows, err := n.db.r.QueryContext(ctx, "SELECT seq, kind, body FROM queuekit_notes WHERE seq > ? AND queue = ? ORDER BY seq",
		n.last.Load(), n.queue)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var kind, body string
		if rows.Scan(&seq, &kind, &body) != nil {
			return
		}
		n.last.Store(seq)
		switch kind {
		case noteTarget:
			var st storekit.TargetState
			if fn := n.targets.Load(); fn != nil && json.Unmarshal([]byte(body), &st) == nil {
				(*fn)(st)
			}
		case noteSlot:
			var b slotBody
			if fn := n.slots.Load(); fn != nil && json.Unmarshal([]byte(body), &b) == nil {
				(*fn)(b.Target, b.Waiter)
			}
		}
	}
}

// announce appends an announcement in tx.
func (s *Store[T]) announce(ctx context.Context, tx dbtx, kind string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO queuekit_notes (queue, kind, body, at) VALUES (?, ?, ?, ?)",
		s.cfg.Name, kind, string(b), time.Now().UnixNano())
	return err
}

func nullNS(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: toNS(t), Valid: true}
}

func fromNull(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNS(n.Int64)
}

// LoadTargets implements storekit.TargetStore: the queue's rows of
// queuekit_targets.
func (s *Store[T]) LoadTargets(ctx context.Context) ([]storekit.TargetState, error) {
	if !s.bound.Load() {
		return nil, ErrNotBound
	}
	rows, err := s.db.r.QueryContext(ctx, `SELECT target, key, next_due, suspended_until, disabled, reason, disabled_at, breaker_until
		FROM queuekit_targets WHERE queue = ?`, s.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: loading target state: %w", err)
	}
	defer rows.Close()
	var out []storekit.TargetState
	for rows.Next() {
		var st storekit.TargetState
		var due, susp, dis, brk sql.NullInt64
		if err := rows.Scan(&st.Target, &st.Key, &due, &susp, &st.Disabled, &st.Reason, &dis, &brk); err != nil {
			return nil, fmt.Errorf("sqlitestore: loading target state: %w", err)
		}
		st.NextDue, st.SuspendedUntil, st.DisabledAt, st.BreakerUntil = fromNull(due), fromNull(susp), fromNull(dis), fromNull(brk)
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: loading target state: %w", err)
	}
	return out, nil
}

// SaveTargets implements storekit.TargetStore: one write upserts or
// deletes each entry and announces it.
func (s *Store[T]) SaveTargets(ctx context.Context, states []storekit.TargetState) error {
	if !s.bound.Load() {
		return ErrNotBound
	}
	if len(states) == 0 {
		return nil
	}
	err := s.db.write(ctx, func(tx *wtx) error {
		for i := range states {
			st := &states[i]
			var err error
			if st.Empty() {
				_, err = tx.ExecContext(ctx, "DELETE FROM queuekit_targets WHERE queue = ? AND target = ? AND key = ?", s.cfg.Name, st.Target, st.Key)
			} else {
				_, err = tx.ExecContext(ctx, `INSERT INTO queuekit_targets (queue, target, key, next_due, suspended_until, disabled, reason,
					disabled_at, breaker_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
					ON CONFLICT (queue, target, key) DO UPDATE SET next_due = excluded.next_due, suspended_until = excluded.suspended_until,
						disabled = excluded.disabled, reason = excluded.reason, disabled_at = excluded.disabled_at,
						breaker_until = excluded.breaker_until`,
					s.cfg.Name, st.Target, st.Key, nullNS(st.NextDue), nullNS(st.SuspendedUntil), st.Disabled, st.Reason,
					nullNS(st.DisabledAt), nullNS(st.BreakerUntil))
			}
			if err != nil {
				return err
			}
			if err := s.announce(ctx, tx, noteTarget, st); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: writing target state: %w", err)
	}
	return nil
}

// WatchTargets implements storekit.TargetStore: fn receives every entry
// any process of the queue saves, this one's included, once Start has
// run.
func (s *Store[T]) WatchTargets(fn func(storekit.TargetState)) { s.notes.targets.Store(&fn) }

// WatchSlots implements storekit.SlotStore.
func (s *Store[T]) WatchSlots(fn func(target, waiter string)) { s.notes.slots.Store(&fn) }

// TakeTokens implements storekit.Admitter: a GCRA bucket per queue in
// queuekit_admission, judged by the queue's clock, in one write.
func (s *Store[T]) TakeTokens(ctx context.Context, perSecond float64, burst, n int) (int, time.Duration, error) {
	switch {
	case !(perSecond > 0) || math.IsInf(perSecond, 0):
		return 0, 0, fmt.Errorf("sqlitestore: TakeTokens: rate %v must be > 0", perSecond)
	case burst < 1:
		return 0, 0, fmt.Errorf("sqlitestore: TakeTokens: burst %d must be >= 1", burst)
	case n < 1:
		return 0, 0, fmt.Errorf("sqlitestore: TakeTokens: n %d must be >= 1", n)
	}
	interval := float64(time.Second) / perSecond // ns per token
	now := s.now()
	var got int
	var wait time.Duration
	err := s.db.write(ctx, func(tx *wtx) error {
		var tat int64
		err := tx.QueryRowContext(ctx, "SELECT tat FROM queuekit_admission WHERE queue = ?", s.cfg.Name).Scan(&tat)
		if errors.Is(err, sql.ErrNoRows) {
			tat = now
		} else if err != nil {
			return err
		}
		t := float64(max(tat, now))
		avail := int((float64(now) + float64(burst)*interval - t) / interval)
		got = max(min(n, avail), 0)
		t += float64(got) * interval
		if got == 0 {
			wait = time.Duration(t + interval - (float64(now) + float64(burst)*interval))
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO queuekit_admission (queue, tat) VALUES (?, ?)
			ON CONFLICT (queue) DO UPDATE SET tat = excluded.tat`, s.cfg.Name, int64(t))
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("sqlitestore: taking admission tokens: %w", err)
	}
	return got, max(wait, 0), nil
}

// AcquireSlot implements storekit.SlotStore in one write: the file's
// write lock makes the grant atomic across processes.
func (s *Store[T]) AcquireSlot(ctx context.Context, req storekit.SlotRequest) (storekit.SlotAnswer, error) {
	switch {
	case req.Target == "" || req.Holder == "" || req.Process == "":
		return storekit.SlotAnswer{}, errors.New("sqlitestore: AcquireSlot: target, holder and process must not be empty")
	case req.Limit <= 0 || req.TTL <= 0 || req.Line <= 0 || req.Waited < 0:
		return storekit.SlotAnswer{}, fmt.Errorf("sqlitestore: AcquireSlot: limit %d, ttl %v and line %v must be > 0, waited %v >= 0",
			req.Limit, req.TTL, req.Line, req.Waited)
	}
	now := s.now()
	var ans storekit.SlotAnswer
	err := s.db.write(ctx, func(tx *wtx) error {
		ans = storekit.SlotAnswer{}
		if _, err := tx.ExecContext(ctx, "DELETE FROM queuekit_slots WHERE queue = ? AND target = ? AND expires_at <= ?", s.cfg.Name, req.Target, now); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "UPDATE queuekit_slots SET expires_at = ? WHERE queue = ? AND target = ? AND holder = ?",
			now+int64(req.TTL), s.cfg.Name, req.Target, req.Holder)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			ans.Granted = true
		} else {
			var held, ahead int
			if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM queuekit_slots WHERE queue = ? AND target = ?", s.cfg.Name, req.Target).Scan(&held); err != nil {
				return err
			}
			since := now - int64(req.Waited)
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM queuekit_slot_line WHERE queue = ? AND target = ? AND process <> ?
				AND expires_at > ? AND since < ?`, s.cfg.Name, req.Target, req.Process, now, since).Scan(&ahead); err != nil {
				return err
			}
			if req.Limit-held > ahead {
				if _, err := tx.ExecContext(ctx, "INSERT INTO queuekit_slots (queue, target, holder, expires_at) VALUES (?, ?, ?, ?)",
					s.cfg.Name, req.Target, req.Holder, now+int64(req.TTL)); err != nil {
					return err
				}
				ans.Granted = true
			} else {
				if _, err := tx.ExecContext(ctx, `INSERT INTO queuekit_slot_line (queue, target, process, since, expires_at) VALUES (?, ?, ?, ?, ?)
					ON CONFLICT (queue, target, process) DO UPDATE SET since = min(since, excluded.since), expires_at = excluded.expires_at`,
					s.cfg.Name, req.Target, req.Process, since, now+int64(req.Line)); err != nil {
					return err
				}
				if err := s.announce(ctx, tx, noteSlot, slotBody{Target: req.Target, Waiter: req.Process}); err != nil {
					return err
				}
			}
		}
		if ans.Granted {
			if _, err := tx.ExecContext(ctx, "DELETE FROM queuekit_slot_line WHERE queue = ? AND target = ? AND process = ?",
				s.cfg.Name, req.Target, req.Process); err != nil {
				return err
			}
		}
		var err2 error
		ans.Waiting, err2 = s.lineLen(ctx, tx, req.Target, req.Process, now)
		return err2
	})
	if err != nil {
		return storekit.SlotAnswer{}, fmt.Errorf("sqlitestore: acquiring a slot: %w", err)
	}
	return ans, nil
}

func (s *Store[T]) lineLen(ctx context.Context, tx dbtx, target, process string, now int64) (int, error) {
	var n int
	err := tx.QueryRowContext(ctx, `SELECT count(*) FROM queuekit_slot_line WHERE queue = ? AND target = ? AND process <> ? AND expires_at > ?`,
		s.cfg.Name, target, process, now).Scan(&n)
	return n, err
}

// RenewSlots implements storekit.SlotStore.
func (s *Store[T]) RenewSlots(ctx context.Context, target string, holders []string, ttl time.Duration) ([]string, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("sqlitestore: RenewSlots: ttl %v must be > 0", ttl)
	}
	now := s.now()
	var lost []string
	err := s.db.write(ctx, func(tx *wtx) error {
		lost = lost[:0]
		for _, h := range holders {
			res, err := tx.ExecContext(ctx, "UPDATE queuekit_slots SET expires_at = ? WHERE queue = ? AND target = ? AND holder = ? AND expires_at > ?",
				now+int64(ttl), s.cfg.Name, target, h, now)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				lost = append(lost, h)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: renewing slots: %w", err)
	}
	return lost, nil
}

// ReleaseSlot implements storekit.SlotStore.
func (s *Store[T]) ReleaseSlot(ctx context.Context, target, holder, process string) (int, error) {
	now := s.now()
	var waiting int
	err := s.db.write(ctx, func(tx *wtx) error {
		res, err := tx.ExecContext(ctx, "DELETE FROM queuekit_slots WHERE queue = ? AND target = ? AND holder = ?", s.cfg.Name, target, holder)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n > 0 {
			if err := s.announce(ctx, tx, noteSlot, slotBody{Target: target}); err != nil {
				return err
			}
		}
		waiting, err = s.lineLen(ctx, tx, target, process, now)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: releasing a slot: %w", err)
	}
	return waiting, nil
}

// LeaveSlotLine implements storekit.SlotStore.
func (s *Store[T]) LeaveSlotLine(ctx context.Context, target, process string) error {
	err := s.db.write(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, "DELETE FROM queuekit_slot_line WHERE queue = ? AND target = ? AND process = ?", s.cfg.Name, target, process)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: leaving a slot line: %w", err)
	}
	return nil
}
