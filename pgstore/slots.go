package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queuekit/queue"
)

// The store implements queue.SlotStore on the queuekit_slots table
// (migration 006): a target with limit k has k rows, slot 0..k-1, made on
// the first acquisition by each process (one more round trip, once per
// target and limit). Every other call is one statement, one round trip,
// by the server's clock:
//
//   - AcquireSlot updates the lowest free row (expired, or released) of
//     slot < limit that no other transaction has locked (SKIP LOCKED) to
//     the holder and an expiry ttl from now. Two processes asking at once
//     lock different rows, so at most limit holders hold one.
//   - RenewSlots moves the expiry of the holders' rows.
//   - ReleaseSlot frees the holder's row and, when it held one, announces
//     "slot {queue, target}" on the schema's NOTIFY channel; the LISTEN
//     connection of every process (WithListen) hands it to WatchSlots.
//
// The three commit without waiting for the WAL flush (synchronous_commit
// off for their transaction only, as admission's takes): a NOTIFY holds a
// cluster-wide lock through its commit, and a flush under it serialised
// every release of the fleet (250 jobs/s at most). A server crash may
// then forget the last changes: a forgotten release holds its slot until
// the lease expires; a forgotten acquisition lets one more job of the
// target start while the one holding it runs on.
//
// A limit lowered while slots above it are held lets their holders finish:
// only rows below the limit are granted, so the fleet is back under the
// new limit when those jobs end.
var _ queue.SlotStore = (*Store[int])(nil)

// slotNote is the payload announcing a released slot, after "slot ".
type slotNote struct {
	Queue  string `json:"q"`
	Target string `json:"t"`
}

// slotState is the store's side of queue.SlotStore.
type slotState struct {
	fn   atomic.Pointer[func(string)]
	made sync.Map // target + "\x00" + limit -> struct{}: its rows exist
}

// slotQueries holds the slot statements with the table name filled in.
type slotQueries struct {
	table, make, acquire, renew, release string
}

func newSlotQueries(schema string) slotQueries {
	table := pgx.Identifier{"queuekit_slots"}.Sanitize()
	if schema != "" {
		table = pgx.Identifier{schema, "queuekit_slots"}.Sanitize()
	}
	r := strings.NewReplacer("{slots}", table)
	return slotQueries{table: table, make: r.Replace(sqlMakeSlots), acquire: r.Replace(sqlAcquireSlot),
		renew: r.Replace(sqlRenewSlots), release: r.Replace(sqlReleaseSlot)}
}

// sqlMakeSlots makes rows 0..$3-1 of queue $1's target $2.
const sqlMakeSlots = `INSERT INTO {slots} (queue, target, slot)
SELECT $1::text, $2::text, g FROM generate_series(0, $3::integer - 1) g
ON CONFLICT DO NOTHING`

// sqlAcquireSlot gives holder $3 a free slot below $4 of queue $1's
// target $2 until $5 seconds from now, and returns its number; no row
// when none is free. The row lock, and the re-check of expires_at on a
// row another transaction changed meanwhile, make it atomic.
const sqlAcquireSlot = `
WITH free AS (
    SELECT slot FROM {slots}
    WHERE queue = $1::text AND target = $2::text AND slot < $4::integer AND expires_at <= statement_timestamp()
    ORDER BY slot LIMIT 1
    FOR UPDATE SKIP LOCKED
)
UPDATE {slots} s SET holder = $3::text, expires_at = statement_timestamp() + make_interval(secs => $5::float8)
FROM free, (SELECT set_config('synchronous_commit', 'off', true)) AS async WHERE s.queue = $1::text AND s.target = $2::text AND s.slot = free.slot
RETURNING s.slot`

// sqlRenewSlots moves the expiry of holders $3's slots of queue $1's
// target $2 to $4 seconds from now, and returns the holders renewed. A
// lease that expired but was not taken is still its holder's.
const sqlRenewSlots = `UPDATE {slots} SET expires_at = statement_timestamp() + make_interval(secs => $4::float8)
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async
WHERE queue = $1::text AND target = $2::text AND holder = ANY($3::text[])
RETURNING holder`

// sqlReleaseSlot frees holder $3's slot of queue $1's target $2 and, when
// it held one, sends $5 on channel $4 (unless $5 is empty).
const sqlReleaseSlot = `
WITH freed AS (
    UPDATE {slots} SET holder = NULL, expires_at = '-infinity'
    FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async
    WHERE queue = $1::text AND target = $2::text AND holder = $3::text
    RETURNING 1
)
SELECT pg_notify($4::text, $5::text) FROM (SELECT 1 FROM freed LIMIT 1) f WHERE $5::text <> ''`

func (s *Store[T]) slotArgs(op, target string) error {
	switch {
	case !s.bound.Load():
		return ErrNotBound
	case target == "":
		return fmt.Errorf("pgstore: %s: empty target", op)
	}
	return nil
}

// AcquireSlot implements queue.SlotStore: one statement (and, the first
// time this process asks for target at this limit, one more that makes
// its rows).
func (s *Store[T]) AcquireSlot(ctx context.Context, target, holder string, limit int, ttl time.Duration) (bool, error) {
	if err := s.slotArgs("AcquireSlot", target); err != nil {
		return false, err
	}
	switch {
	case holder == "":
		return false, fmt.Errorf("pgstore: AcquireSlot of %q: empty holder", target)
	case limit < 1:
		return false, fmt.Errorf("pgstore: AcquireSlot of %q: limit %d: must be >= 1", target, limit)
	case ttl <= 0:
		return false, fmt.Errorf("pgstore: AcquireSlot of %q: ttl %s: must be > 0", target, ttl)
	}
	key := fmt.Sprintf("%s\x00%d", target, limit)
	if _, ok := s.slots.made.Load(key); !ok {
		if _, err := s.pool.Exec(ctx, s.sq.make, s.cfg.Name, target, limit); err != nil {
			return false, fmt.Errorf("pgstore: making the slots of %q: %w", target, s.slotsErr(err))
		}
		s.slots.made.Store(key, struct{}{})
	}
	var slot int
	err := s.pool.QueryRow(ctx, s.sq.acquire, s.cfg.Name, target, holder, limit, ttl.Seconds()).Scan(&slot)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		s.noteErr(err)
		return false, fmt.Errorf("pgstore: acquiring a slot of %q: %w", target, s.slotsErr(err))
	}
	return true, nil
}

// RenewSlots implements queue.SlotStore: one statement.
func (s *Store[T]) RenewSlots(ctx context.Context, target string, holders []string, ttl time.Duration) ([]string, error) {
	if err := s.slotArgs("RenewSlots", target); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("pgstore: RenewSlots of %q: ttl %s: must be > 0", target, ttl)
	}
	rows, err := s.pool.Query(ctx, s.sq.renew, s.cfg.Name, target, holders, ttl.Seconds())
	if err != nil {
		s.noteErr(err)
		return nil, fmt.Errorf("pgstore: renewing slots of %q: %w", target, s.slotsErr(err))
	}
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("pgstore: renewing slots of %q: %w", target, s.slotsErr(err))
	}
	var lost []string
	for _, h := range holders {
		if !slices.Contains(renewed, h) {
			lost = append(lost, h)
		}
	}
	return lost, nil
}

// ReleaseSlot implements queue.SlotStore: one statement, which announces
// the freed slot in the same transaction. An announcement too large for
// NOTIFY (a target name of kilobytes) is not sent: the other processes'
// waiters find the slot when they next ask, within half a second.
func (s *Store[T]) ReleaseSlot(ctx context.Context, target, holder string) error {
	if err := s.slotArgs("ReleaseSlot", target); err != nil {
		return err
	}
	p, err := json.Marshal(slotNote{Queue: s.cfg.Name, Target: target})
	if err != nil {
		return fmt.Errorf("pgstore: ReleaseSlot: %w", err)
	}
	note := "slot " + string(p)
	if len(note) > maxNotePayload {
		note = ""
	}
	if _, err := s.pool.Exec(ctx, s.sq.release, s.cfg.Name, target, holder, s.channel, note); err != nil {
		s.noteErr(err)
		return fmt.Errorf("pgstore: releasing a slot of %q: %w", target, s.slotsErr(err))
	}
	return nil
}

// WatchSlots implements queue.SlotStore: the LISTEN connection (see
// WithListen) calls fn with the target of each release announced for the
// queue. Without it, the queue's waiter asks every half second.
func (s *Store[T]) WatchSlots(fn func(target string)) { s.slots.fn.Store(&fn) }

// slotNoted hands an announced release to WatchSlots' function.
func (s *Store[T]) slotNoted(payload string) {
	fn := s.slots.fn.Load()
	if fn == nil {
		return
	}
	var n slotNote
	if err := json.Unmarshal([]byte(strings.TrimPrefix(payload, "slot ")), &n); err != nil || n.Queue != s.cfg.Name {
		return
	}
	(*fn)(n.Target)
}

// slotsErr turns "relation does not exist" into a *NotMigratedError.
func (s *Store[T]) slotsErr(err error) error {
	if nm := s.notMigrated(err); nm != nil {
		nm.Missing = s.sq.table
		return nm
	}
	return err
}
