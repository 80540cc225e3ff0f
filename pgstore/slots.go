package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queuekit/queue/storekit"
)

// The store implements storekit.SlotStore on the queuekit_slots table
// (migration 006) and the queuekit_slot_line table (migration 008): a
// target with limit k has k rows, slot 0..k-1, made on the first
// acquisition by each process (one more round trip, once per target and
// limit), and a row per process waiting for one. Every other call is one
// statement, one round trip, by the server's clock:
//
//   - AcquireSlot updates the lowest free row (expired, or released) of
//     slot < limit that no other transaction has locked (SKIP LOCKED) to
//     the holder and an expiry ttl from now, when more rows are free than
//     processes wait ahead of the caller in the line (unexpired rows of
//     queuekit_slot_line with an earlier since). Two processes asking at
//     once lock different rows, so at most limit holders hold one. A
//     granted process leaves the line; a refused one takes its place in
//     it, or keeps it, and the refusal is announced as "slot {queue,
//     target, waiter}" on the schema's NOTIFY channel.
//   - RenewSlots moves the expiry of the holders' rows.
//   - ReleaseSlot frees the holder's row and, when it held one, announces
//     "slot {queue, target}" on the channel; the LISTEN connection of
//     every process (WithListen) hands both to WatchSlots. It counts the
//     other processes in the line.
//   - LeaveSlotLine deletes the process's row of the line.
//
// The four commit without waiting for the WAL flush (synchronous_commit
// off for their transaction only, as admission's takes): a NOTIFY holds a
// cluster-wide lock through its commit, and a flush under it serialised
// every release of the fleet (250 jobs/s at most). A server crash may
// then forget the last changes: a forgotten release holds its slot until
// the lease expires; a forgotten acquisition lets one more job of the
// target start while the one holding it runs on; a forgotten place in the
// line is taken again at the process's next ask.
//
// A limit lowered while slots above it are held lets their holders finish:
// only rows below the limit are granted, so the fleet is back under the
// new limit when those jobs end.
var _ storekit.SlotStore = (*Store[int])(nil)

// slotNote is the payload announcing a released slot (Waiter empty) or a
// process refused one (Waiter that process), after "slot ".
type slotNote struct {
	Queue  string `json:"q"`
	Target string `json:"t"`
	Waiter string `json:"w,omitempty"`
}

// slotState is the store's side of storekit.SlotStore.
type slotState struct {
	fn   atomic.Pointer[func(target, waiter string)]
	made sync.Map // target + "\x00" + limit -> struct{}: its rows exist
}

// slotQueries holds the slot statements with the table names filled in.
type slotQueries struct {
	table, line, make, acquire, renew, release, leave string
}

func newSlotQueries(schema string) slotQueries {
	table := pgx.Identifier{"queuekit_slots"}.Sanitize()
	line := pgx.Identifier{"queuekit_slot_line"}.Sanitize()
	if schema != "" {
		table = pgx.Identifier{schema, "queuekit_slots"}.Sanitize()
		line = pgx.Identifier{schema, "queuekit_slot_line"}.Sanitize()
	}
	r := strings.NewReplacer("{slots}", table, "{line}", line)
	return slotQueries{table: table, line: line, make: r.Replace(sqlMakeSlots), acquire: r.Replace(sqlAcquireSlot),
		renew: r.Replace(sqlRenewSlots), release: r.Replace(sqlReleaseSlot), leave: r.Replace(sqlLeaveSlotLine)}
}

// sqlMakeSlots makes rows 0..$3-1 of queue $1's target $2.
const sqlMakeSlots = `INSERT INTO {slots} (queue, target, slot)
SELECT $1::text, $2::text, g FROM generate_series(0, $3::integer - 1) g
ON CONFLICT DO NOTHING`

// sqlAcquireSlot gives holder $3 of process $6 a free slot below $4 of
// queue $1's target $2 until $5 seconds from now, when more are free
// than processes wait ahead of $6 (whose place is now less $7 seconds),
// and takes $6 out of the line; or else puts $6 in the line, for $8
// seconds, and sends $10 on channel $9 (unless $10 is empty). It returns
// whether the slot was granted and how many other processes wait. The
// row lock, and the re-check of expires_at on a row another transaction
// changed meanwhile, make the grant atomic; a holder that holds a slot
// keeps it.
const sqlAcquireSlot = `
WITH async AS (SELECT set_config('synchronous_commit', 'off', true) AS v),
line AS (
    SELECT since FROM {line}
    WHERE queue = $1::text AND target = $2::text AND process <> $6::text AND expires_at > statement_timestamp()
),
ahead AS (
    SELECT count(*) AS n FROM line WHERE since < statement_timestamp() - make_interval(secs => $7::float8)
),
mine AS (
    SELECT slot FROM {slots}
    WHERE queue = $1::text AND target = $2::text AND holder = $3::text AND expires_at > statement_timestamp()
    LIMIT 1
),
nfree AS (
    SELECT count(*) AS n FROM {slots}
    WHERE queue = $1::text AND target = $2::text AND slot < $4::integer AND expires_at <= statement_timestamp()
),
free AS (
    SELECT slot FROM {slots}
    WHERE queue = $1::text AND target = $2::text AND slot < $4::integer AND expires_at <= statement_timestamp()
      AND NOT EXISTS (SELECT 1 FROM mine) AND (SELECT n FROM nfree) > (SELECT n FROM ahead)
    ORDER BY slot LIMIT 1
    FOR UPDATE SKIP LOCKED
),
taken AS (
    UPDATE {slots} s SET holder = $3::text, expires_at = statement_timestamp() + make_interval(secs => $5::float8)
    FROM (SELECT slot FROM free UNION ALL SELECT slot FROM mine) f
    WHERE s.queue = $1::text AND s.target = $2::text AND s.slot = f.slot
    RETURNING 1
),
gone AS (
    DELETE FROM {line} WHERE queue = $1::text AND target = $2::text AND process = $6::text AND EXISTS (SELECT 1 FROM taken)
    RETURNING 1
),
queued AS (
    INSERT INTO {line} (queue, target, process, since, expires_at)
    SELECT $1::text, $2::text, $6::text, statement_timestamp() - make_interval(secs => $7::float8),
        statement_timestamp() + make_interval(secs => $8::float8)
    WHERE NOT EXISTS (SELECT 1 FROM taken)
    ON CONFLICT (queue, target, process) DO UPDATE SET since = excluded.since, expires_at = excluded.expires_at
    RETURNING 1
),
purged AS (
    DELETE FROM {line} WHERE queue = $1::text AND target = $2::text AND process <> $6::text AND expires_at <= statement_timestamp()
    RETURNING 1
),
note AS (
    SELECT pg_notify($9::text, $10::text) FROM queued WHERE $10::text <> ''
)
SELECT EXISTS (SELECT 1 FROM taken), (SELECT count(*) FROM line)::integer,
    (SELECT count(*) FROM gone) + (SELECT count(*) FROM purged) + (SELECT count(*) FROM note), (SELECT v FROM async)`

// sqlRenewSlots moves the expiry of holders $3's slots of queue $1's
// target $2 to $4 seconds from now, and returns the holders renewed. A
// lease that expired but was not taken is still its holder's.
const sqlRenewSlots = `UPDATE {slots} SET expires_at = statement_timestamp() + make_interval(secs => $4::float8)
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async
WHERE queue = $1::text AND target = $2::text AND holder = ANY($3::text[])
RETURNING holder`

// sqlReleaseSlot frees holder $3's slot of queue $1's target $2 and, when
// it held one, sends $5 on channel $4 (unless $5 is empty); it returns
// how many processes other than $6 wait in the target's line.
const sqlReleaseSlot = `
WITH async AS (SELECT set_config('synchronous_commit', 'off', true) AS v),
freed AS (
    UPDATE {slots} SET holder = NULL, expires_at = '-infinity'
    WHERE queue = $1::text AND target = $2::text AND holder = $3::text
    RETURNING 1
),
note AS (
    SELECT pg_notify($4::text, $5::text) FROM (SELECT 1 FROM freed LIMIT 1) f WHERE $5::text <> ''
)
SELECT (SELECT count(*) FROM {line}
        WHERE queue = $1::text AND target = $2::text AND process <> $6::text AND expires_at > statement_timestamp())::integer,
    (SELECT count(*) FROM note), (SELECT v FROM async)`

// sqlLeaveSlotLine takes process $3 out of queue $1's target $2's line.
const sqlLeaveSlotLine = `DELETE FROM {line}
USING (SELECT set_config('synchronous_commit', 'off', true)) AS async
WHERE queue = $1::text AND target = $2::text AND process = $3::text`

func (s *Store[T]) slotArgs(op, target string) error {
	switch {
	case !s.bound.Load():
		return ErrNotBound
	case target == "":
		return fmt.Errorf("pgstore: %s: empty target", op)
	}
	return nil
}

// AcquireSlot implements storekit.SlotStore: one statement (and, the first
// time this process asks for target at this limit, one more that makes
// its rows).
func (s *Store[T]) AcquireSlot(ctx context.Context, req storekit.SlotRequest) (storekit.SlotAnswer, error) {
	target := req.Target
	if err := s.slotArgs("AcquireSlot", target); err != nil {
		return storekit.SlotAnswer{}, err
	}
	switch {
	case req.Holder == "":
		return storekit.SlotAnswer{}, fmt.Errorf("pgstore: AcquireSlot of %q: empty holder", target)
	case req.Process == "":
		return storekit.SlotAnswer{}, fmt.Errorf("pgstore: AcquireSlot of %q: empty process", target)
	case req.Limit < 1:
		return storekit.SlotAnswer{}, fmt.Errorf("pgstore: AcquireSlot of %q: limit %d: must be >= 1", target, req.Limit)
	case req.TTL <= 0:
		return storekit.SlotAnswer{}, fmt.Errorf("pgstore: AcquireSlot of %q: ttl %s: must be > 0", target, req.TTL)
	case req.Line <= 0:
		return storekit.SlotAnswer{}, fmt.Errorf("pgstore: AcquireSlot of %q: line %s: must be > 0", target, req.Line)
	case req.Waited < 0:
		return storekit.SlotAnswer{}, fmt.Errorf("pgstore: AcquireSlot of %q: waited %s: must be >= 0", target, req.Waited)
	}
	key := fmt.Sprintf("%s\x00%d", target, req.Limit)
	if _, ok := s.slots.made.Load(key); !ok {
		if _, err := s.pool.Exec(ctx, s.sq.make, s.cfg.Name, target, req.Limit); err != nil {
			return storekit.SlotAnswer{}, fmt.Errorf("pgstore: making the slots of %q: %w", target, s.slotsErr(err))
		}
		s.slots.made.Store(key, struct{}{})
	}
	note, err := s.slotPayload(target, req.Process)
	if err != nil {
		return storekit.SlotAnswer{}, fmt.Errorf("pgstore: AcquireSlot: %w", err)
	}
	var (
		ans        storekit.SlotAnswer
		rows       int64
		unusedSync string
	)
	err = s.pool.QueryRow(ctx, s.sq.acquire, s.cfg.Name, target, req.Holder, req.Limit, req.TTL.Seconds(),
		req.Process, req.Waited.Seconds(), req.Line.Seconds(), s.channel, note).Scan(&ans.Granted, &ans.Waiting, &rows, &unusedSync)
	if err != nil {
		s.noteErr(err)
		return storekit.SlotAnswer{}, fmt.Errorf("pgstore: acquiring a slot of %q: %w", target, s.slotsErr(err))
	}
	return ans, nil
}

// slotPayload is the NOTIFY payload announcing a release of target
// (waiter "") or waiter's refusal; "" when it is too large for NOTIFY (a
// target name of kilobytes): the other processes then learn of it when
// they next ask.
func (s *Store[T]) slotPayload(target, waiter string) (string, error) {
	p, err := json.Marshal(slotNote{Queue: s.cfg.Name, Target: target, Waiter: waiter})
	if err != nil {
		return "", err
	}
	note := "slot " + string(p)
	if len(note) > maxNotePayload {
		return "", nil
	}
	return note, nil
}

// RenewSlots implements storekit.SlotStore: one statement.
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

// ReleaseSlot implements storekit.SlotStore: one statement, which announces
// the freed slot in the same transaction. An announcement too large for
// NOTIFY (a target name of kilobytes) is not sent: the other processes'
// waiters find the slot when they next ask, within half a second.
func (s *Store[T]) ReleaseSlot(ctx context.Context, target, holder, process string) (int, error) {
	if err := s.slotArgs("ReleaseSlot", target); err != nil {
		return 0, err
	}
	note, err := s.slotPayload(target, "")
	if err != nil {
		return 0, fmt.Errorf("pgstore: ReleaseSlot: %w", err)
	}
	var (
		waiting    int
		notes      int64
		unusedSync string
	)
	err = s.pool.QueryRow(ctx, s.sq.release, s.cfg.Name, target, holder, s.channel, note, process).Scan(&waiting, &notes, &unusedSync)
	if err != nil {
		s.noteErr(err)
		return 0, fmt.Errorf("pgstore: releasing a slot of %q: %w", target, s.slotsErr(err))
	}
	return waiting, nil
}

// LeaveSlotLine implements storekit.SlotStore: one statement.
func (s *Store[T]) LeaveSlotLine(ctx context.Context, target, process string) error {
	if err := s.slotArgs("LeaveSlotLine", target); err != nil {
		return err
	}
	if _, err := s.pool.Exec(ctx, s.sq.leave, s.cfg.Name, target, process); err != nil {
		s.noteErr(err)
		return fmt.Errorf("pgstore: leaving the slot line of %q: %w", target, s.slotsErr(err))
	}
	return nil
}

// WatchSlots implements storekit.SlotStore: the LISTEN connection (see
// WithListen) calls fn with the target of each release announced for the
// queue, and with the target and the process of each refusal. Without
// it, the queue's waiter asks every half second.
func (s *Store[T]) WatchSlots(fn func(target, waiter string)) { s.slots.fn.Store(&fn) }

// slotNoted hands an announced release or refusal to WatchSlots'
// function.
func (s *Store[T]) slotNoted(payload string) {
	fn := s.slots.fn.Load()
	if fn == nil {
		return
	}
	var n slotNote
	if err := json.Unmarshal([]byte(strings.TrimPrefix(payload, "slot ")), &n); err != nil || n.Queue != s.cfg.Name {
		return
	}
	(*fn)(n.Target, n.Waiter)
}

// slotsErr turns "relation does not exist" into a *NotMigratedError
// naming the missing table.
func (s *Store[T]) slotsErr(err error) error {
	if nm := s.notMigrated(err); nm != nil {
		nm.Missing = s.sq.table
		if strings.Contains(err.Error(), "queuekit_slot_line") {
			nm.Missing = s.sq.line
		}
		return nm
	}
	return err
}
