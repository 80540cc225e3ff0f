package pgstore

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// The states, as stored. live are the states that hold a job's key;
// waiting are the states a job can be cancelled or purged from.
const (
	stScheduled = "scheduled"
	stAvailable = "available"
	stRunning   = "running"
	stRetryable = "retryable"
	stPending   = "pending"
	stCompleted = "completed"
	stDead      = "dead"
	stCancelled = "cancelled"

	liveStates    = `('scheduled', 'available', 'running', 'retryable')`
	waitingStates = `('scheduled', 'available', 'retryable', 'pending')`
)

// queries holds the store's SQL with its table names filled in. Names come
// from validated identifiers and are quoted; every value is a parameter.
type queries struct {
	jobs, leaders, marks, queues string // quoted, possibly schema-qualified table names
	jobsIdent                    pgx.Identifier

	add, promote, nextDue, heartbeat string
	// The fetcher's claims, strict and weighted, committing without the
	// WAL flush (asyncCommit), and the same reading the claim index from a
	// start key (strict: all of it; weighted: the strict branch; see
	// claimHint).
	fetchClaim, fetchClaimWeighted, fetchClaimFrom, fetchClaimWeightedFrom string
	complete, dead, lockRows, retry, releaseReruns                         string
	cancel, cancelIDs, waitingKeys, purge, stats, sched                    string
	rescue, prune, elect, resign, insertMany, release                      string
	insertPlain, insertAlike                                               string
	markMany, unmark, pruneMarks, releaseHeld                              string

	// admin API (admin_sql.go)
	adminGet, adminGetKey, adminState, adminCounts, adminRetry      string
	adminDelete, adminCancel, adminPause, adminPaused, adminRelease string
}

func newQueries(schema string) *queries {
	q := &queries{}
	if schema != "" {
		q.jobsIdent = pgx.Identifier{schema, "queuekit_jobs"}
		q.leaders = pgx.Identifier{schema, "queuekit_leaders"}.Sanitize()
		q.marks = pgx.Identifier{schema, "queuekit_unique"}.Sanitize()
		q.queues = pgx.Identifier{schema, "queuekit_queues"}.Sanitize()
	} else {
		q.jobsIdent = pgx.Identifier{"queuekit_jobs"}
		q.leaders = pgx.Identifier{"queuekit_leaders"}.Sanitize()
		q.marks = pgx.Identifier{"queuekit_unique"}.Sanitize()
		q.queues = pgx.Identifier{"queuekit_queues"}.Sanitize()
	}
	q.jobs = q.jobsIdent.Sanitize()
	r := strings.NewReplacer("{jobs}", q.jobs, "{leaders}", q.leaders, "{marks}", q.marks, "{queues}", q.queues, "{live}", liveStates, "{waiting}", waitingStates)
	for _, s := range []struct {
		dst *string
		src string
	}{
		{&q.add, sqlAdd}, {&q.fetchClaim, sqlClaim}, {&q.fetchClaimWeighted, sqlClaimWeighted}, {&q.promote, sqlPromote}, {&q.nextDue, sqlNextDue},
		{&q.heartbeat, sqlHeartbeat}, {&q.complete, sqlComplete}, {&q.dead, sqlDead},
		{&q.lockRows, sqlLockRows}, {&q.retry, sqlRetry}, {&q.releaseReruns, sqlReleaseReruns},
		{&q.cancel, sqlCancel}, {&q.cancelIDs, sqlCancelIDs}, {&q.waitingKeys, sqlWaitingKeys},
		{&q.purge, sqlPurge}, {&q.stats, sqlStats}, {&q.sched, sqlScheduled}, {&q.rescue, sqlRescue},
		{&q.prune, sqlPrune}, {&q.elect, sqlElect}, {&q.resign, sqlResign},
		{&q.insertMany, sqlInsertMany}, {&q.insertPlain, sqlInsertPlain}, {&q.insertAlike, sqlInsertAlike}, {&q.release, sqlRelease},
		{&q.markMany, sqlMarkMany}, {&q.unmark, sqlUnmark}, {&q.pruneMarks, sqlPruneMarks}, {&q.releaseHeld, sqlReleaseHeld},
		{&q.adminGet, sqlAdminGet}, {&q.adminGetKey, sqlAdminGetKey}, {&q.adminState, sqlAdminState},
		{&q.adminCounts, sqlAdminCounts}, {&q.adminRetry, sqlAdminRetry}, {&q.adminDelete, sqlAdminDelete},
		{&q.adminCancel, sqlAdminCancel}, {&q.adminPause, sqlAdminPause}, {&q.adminPaused, sqlAdminPaused},
		{&q.adminRelease, sqlAdminRelease},
	} {
		*s.dst = r.Replace(s.src)
	}
	q.fetchClaimFrom = asyncCommit(claimFrom(q.fetchClaim))
	q.fetchClaim = asyncCommit(q.fetchClaim)
	q.fetchClaimWeightedFrom = asyncCommit(strings.Replace(q.fetchClaimWeighted, "{from}",
		"\n        AND (run_at, id) >= ($10::timestamptz, $11::bigint)", 1))
	q.fetchClaimWeighted = asyncCommit(strings.Replace(q.fetchClaimWeighted, "{from}", "", 1))
	return q
}

// sqlAsyncCommit, added to an UPDATE's FROM list, makes the statement's
// transaction commit without waiting for the WAL flush
// (synchronous_commit off for that transaction only).
const sqlAsyncCommit = `
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async`

// asyncCommit returns a claim statement (with its {async} mark) as the
// fetcher sends it: committing without waiting for the WAL flush.
//
// Every claim is the fetcher's: its statement is a transaction of its own
// that only claims, and its commit does not wait for the flush, the
// largest wait of such a claim. Scheduled jobs, which the fetcher claims
// at their due time, start sooner (BenchmarkScheduleLateness p99 about
// half). A claim that a PostgreSQL crash forgets leaves its jobs
// available, and they are claimed again; a run already handed out goes
// on as a run whose lease was lost (the heartbeat finds the job no longer
// running for this process, and its outcome returns ErrLeaseLost; see the
// package doc for the case of a job this process claimed again): such a
// job runs twice, as a process crash already makes the jobs it ran run
// again. A flush waited for afterwards (any outcome's commit) is later in
// the WAL and makes the claim durable too, so an outcome that returned
// never refers to a forgotten claim.
//
// Until issue #35 item 5, a write batch claimed its workers' next jobs in
// its own transaction, sync; the fetcher now claims them beside the batch
// (see Store.writeOnce).
func asyncCommit(claim string) string {
	return strings.Replace(claim, "{async}", sqlAsyncCommit, 1)
}

// sqlGenericPlans, sent first in a pipeline (one implicit transaction),
// makes the statements after it in that transaction run their cached
// generic plans instead of planning anew on every execution.
//
// The claim and outcome statements are written for generic plans (their
// ID lists go through byIDs, the claim's order is its index's), but
// PostgreSQL keeps planning a statement for its parameters whenever the
// generic plan's estimate is the higher, which it is for a LIMIT or an
// array it cannot see. Planned each time, the weighted claim
// (sqlClaimWeighted: a lateral offer per priority, a window, two sorts)
// spent 0.9-1.6 ms per execution binding against 0.1-0.2 ms for the
// strict one, about a quarter of the database's CPU in a burn-down.
// The setting is local to the transaction: the caller's other use of the
// connection is untouched.
const sqlGenericPlans = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

// roomSQL is true when a queue ($1) has fewer than $cap available jobs, or
// when $cap <= 0 (no check). It counts at most $cap index entries.
const roomSQL = `($CAP::bigint <= 0 OR (SELECT count(*) FROM (SELECT 1 FROM {jobs} WHERE queue = $1::text AND state = 'available' LIMIT greatest($CAP::bigint, 0)) c) < $CAP::bigint)`

func room(param string) string { return strings.ReplaceAll(roomSQL, "$CAP", param) }

// sqlAdd inserts one job unless its key is in a unique window, its key or
// group is taken or the queue is full; it never raises on a duplicate, so
// it is safe inside a caller's transaction. A running job with the same
// key is share-locked, so that the job's completion (which must then
// wait) sees the rerun inserted here.
//
// A job with a window ($15 > 0) takes its key's mark before it is
// inserted: the upsert
// locks the mark's row and judges the latest version of it, so of two
// concurrent adds of a key one takes the mark and the other, refused,
// waits for the first to commit. If the job is then not inserted (a
// duplicate, a full queue), the statement still took the mark, so the
// caller runs it in a (sub)transaction and rolls back (see Store.add). A
// job without a window is refused while its key's mark is open.
//
// $1 queue, $2 state, $3 priority, $4 run_at, $5 scheduled_at, $6
// max_attempts, $7 key, $8 group, $9 target, $10 payload, $11 now, $12
// coalesce, $13 capacity (0: no check), $14 channel (empty: no NOTIFY),
// $15 the window in microseconds (0: none), $16 the database-time shift in
// microseconds (see lease.go), $17 and $18 the key's and the group's
// bytes when they are stored as digests (keys.go; $7 and $8 are then the
// digests), $19 the job's metadata as JSON (NULL: none).
//
// The explicit non-empty key test lets the planner use the partial key indexes
// (their predicate must be implied by the query's, and key = $7 proves
// nothing about a generic plan's parameter). The jobs table comes first, so
// that on a schema not migrated at all it is the one the error names.
var sqlAdd = `
WITH run AS (
    SELECT id FROM {jobs}
    WHERE $7::text <> '' AND queue = $1::text AND key = $7::text AND key <> '' AND state = 'running'
    FOR SHARE
),
mk AS (
    INSERT INTO {marks} AS m (queue, key, until)
    SELECT $1::text, $7::text, ` + dbTime("($16::bigint + $15::bigint)") + `
    WHERE $15::bigint > 0 AND $7::text <> ''
    ON CONFLICT (queue, key) DO UPDATE SET until = excluded.until
    WHERE m.until <= ` + dbTime("$16") + `
    RETURNING 1
),
held AS (
    SELECT CASE WHEN $15::bigint > 0 THEN NOT EXISTS (SELECT 1 FROM mk)
        ELSE $7::text <> '' AND EXISTS (SELECT 1 FROM {marks}
            WHERE queue = $1::text AND key = $7::text AND until > ` + dbTime("$16") + `) END AS held
),
room AS (
    SELECT ($2::text <> 'available' OR EXISTS (SELECT 1 FROM run) OR ` + room("$13") + `) AS ok
),
ins AS (
    INSERT INTO {jobs} (queue, state, priority, run_at, scheduled_at, max_attempts, key, group_key, target, payload, created_at,
        key_bytes, group_bytes, meta)
    SELECT $1::text, CASE WHEN EXISTS (SELECT 1 FROM run) THEN 'pending' ELSE $2::text END,
        $3::integer, $4::timestamptz, $5::timestamptz, $6::integer, $7::text, $8::text, $9::text, $10::bytea, $11::timestamptz,
        $17::bytea, $18::bytea, $19::jsonb
    WHERE (SELECT ok FROM room) AND (NOT EXISTS (SELECT 1 FROM run) OR $12::boolean) AND NOT (SELECT held FROM held)
    ON CONFLICT DO NOTHING
    RETURNING id, state
)
SELECT (SELECT ok FROM room),
    (SELECT id FROM ins),
    coalesce((SELECT state FROM ins), ''),
    EXISTS (SELECT 1 FROM {jobs} WHERE $7::text <> '' AND queue = $1::text AND key = $7::text AND key <> ''
        AND state IN ('scheduled', 'available', 'running', 'retryable', 'pending')),
    (SELECT count(*) FROM (SELECT pg_notify($14::text, $1::text) FROM ins WHERE state <> 'pending' AND $14::text <> '') n),
    (SELECT held FROM held)`

// sqlClaim takes up to $3 due available jobs of queue $1 in priority,
// run_at, id order, leasing them to $4 for $5 microseconds of database
// time (see lease.go). $2 is now.
//
// The picked IDs are an array, so that the update finds its rows through
// the primary key whatever the row estimates: a join with the picked rows
// could be planned as a hash join over the whole table when the limit is
// not known (a generic plan). Nothing is claimed while the queue is
// paused (notPaused).
var sqlClaim = `
UPDATE {jobs} j SET state = 'running', attempt = j.attempt + 1, lease_owner = $4::text, held = false,
    lease_expires_at = ` + dbTime("$5") + `, heartbeat_at = $2::timestamptz, attempted_at = $2::timestamptz{async}
WHERE j.id = ANY (ARRAY(
    SELECT id FROM {jobs}
    WHERE queue = $1::text AND state = 'available' AND run_at <= $2::timestamptz AND ` + notPaused + `
    ORDER BY priority, run_at, id
    LIMIT $3::bigint
    FOR UPDATE SKIP LOCKED))
RETURNING j.id, j.priority, j.run_at, j.scheduled_at, j.attempt, j.max_attempts, j.key, j.group_key, j.target, j.payload,
    j.key_bytes, j.group_bytes, j.meta`

// claimFrom returns the strict claim that reads the claim index from
// ($6 priority, $7 run_at, $8 id) on, a start key the index scan descends
// to (see claimHint).
func claimFrom(claim string) string {
	const order = "ORDER BY priority, run_at, id"
	if strings.Count(claim, order) != 1 {
		panic("pgstore: the claim statement's order changed")
	}
	return strings.Replace(claim, order,
		"AND (priority, run_at, id) >= ($6::integer, $7::timestamptz, $8::bigint)\n    "+order, 1)
}

// sqlPromote moves up to $3 due scheduled and retryable jobs of queue $1
// to available while the queue has room ($4, 0: no check); the rest wait
// until $5 (RequeueDelay later). $2 is the due limit (now, or a little
// later for the promoter, see promoteAhead), $6 the channel, $7 now: the
// notification is sent for jobs due by now only (the processes claim the
// others at their due time, see fetchDue).
var sqlPromote = `
WITH due AS (
    SELECT id, run_at FROM {jobs}
    WHERE queue = $1::text AND state IN ('scheduled', 'retryable') AND run_at <= $2::timestamptz
    ORDER BY run_at, id
    LIMIT $3::bigint
    FOR UPDATE SKIP LOCKED
),
room AS (
    SELECT CASE WHEN $4::bigint <= 0 THEN $3::bigint
        ELSE greatest($4::bigint - (SELECT count(*) FROM (SELECT 1 FROM {jobs} WHERE queue = $1::text AND state = 'available' LIMIT greatest($4::bigint, 0)) c), 0) END AS n
),
ranked AS (
    SELECT id, row_number() OVER (ORDER BY run_at, id) <= (SELECT n FROM room) AS fits FROM due
),
up AS (
    UPDATE {jobs} j SET
        state = CASE WHEN r.fits THEN 'available' ELSE 'retryable' END,
        run_at = CASE WHEN r.fits THEN j.run_at ELSE $5::timestamptz END,
        scheduled_at = CASE WHEN r.fits THEN j.scheduled_at ELSE $5::timestamptz END
    FROM ranked r WHERE j.id = r.id
    RETURNING j.id, j.state, j.key, j.target, j.priority, j.attempt, j.run_at
)
SELECT id, state = 'available', key, target, priority, attempt, run_at,
    (SELECT count(*) FROM (SELECT pg_notify($6::text, $1::text) FROM up WHERE state = 'available' AND run_at <= $7::timestamptz LIMIT 1) n)
FROM up`

// sqlNextDue returns queue $1's earliest scheduled time (NULL: none).
//
// It reads the first entry of the due index, in its order, rather than
// asking for min(run_at): on a table not yet analysed (a new schema, or
// autovacuum behind a burst) the planner costed the aggregate over the
// whole index as cheaply as the first entry and read every scheduled
// job's entry, with a heap visit each: 3 ms for 5 000 scheduled jobs, in
// every promotion of every process, which made the promotions and the
// claims beside them the tail of BenchmarkScheduleLateness.
const sqlNextDue = `
SELECT (SELECT run_at FROM {jobs} WHERE queue = $1::text AND state IN ('scheduled', 'retryable') ORDER BY run_at LIMIT 1)`

// byIDs is how the statements that take a list of job IDs find their rows:
// through the primary key, always. Given the list itself, the planner
// weighs one index probe per ID against reading the table, and for a few
// hundred IDs in a table of a few hundred thousand rows it read the table,
// once per write batch (and joining the list as a table could also be
// planned as a scan of every running job). The list wrapped in an
// ARRAY(subquery) has an unknown length, costed as a few IDs, so the
// primary key is chosen whatever the batch size and the statistics.
func byIDs(param string) string { return "ANY (ARRAY(SELECT unnest(" + param + "::bigint[])))" }

// at is the position of row j's ID in $1, which the writer sorts
// ascending: the value for j in a parallel array $n is ($n::type[])[at].
// width_bucket is a binary search, so that no join with the input is
// needed (one that the planner could make quadratic with a nested loop).
const at = "width_bucket(j.id, $1::bigint[])"

// sqlHeartbeat extends the leases of $1 held by $2 for $4 microseconds of
// database time (see lease.go); $3 is now. It returns each lease kept,
// and whether an operator asked for the job to be cancelled (admin
// Cancel): the lease is still extended, so that the job stays this
// process's to end, as cancelled.
var sqlHeartbeat = `
UPDATE {jobs} SET lease_expires_at = ` + dbTime("$4") + `, heartbeat_at = $3::timestamptz
WHERE id = ` + byIDs("$1") + ` AND state = 'running' AND lease_owner = $2::text
RETURNING id, cancel_requested_at IS NOT NULL`

// sqlComplete ends the runs ($1 IDs, sorted; $2 attempts) that $3 still
// holds; $4 is now.
var sqlComplete = `
UPDATE {jobs} j SET state = 'completed', finalized_at = $4::timestamptz, lease_owner = NULL, lease_expires_at = NULL
WHERE j.id = ` + byIDs("$1") + ` AND j.attempt = ($2::integer[])[` + at + `]
    AND j.state = 'running' AND j.lease_owner = $3::text
RETURNING j.id`

// sqlDead ends the runs ($1 IDs, sorted; $2 attempts, $5 errors) that $3
// still holds as dead or cancelled ($6 states); $4 is now. A run an
// operator asked to cancel ends cancelled.
var sqlDead = `
UPDATE {jobs} j SET state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE ($6::text[])[` + at + `] END, finalized_at = $4::timestamptz,
    lease_owner = NULL, lease_expires_at = NULL,
    last_error = ($5::text[])[` + at + `],
    errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', $4::timestamptz,
        'error', ($5::text[])[` + at + `]))
WHERE j.id = ` + byIDs("$1") + ` AND j.attempt = ($2::integer[])[` + at + `]
    AND j.state = 'running' AND j.lease_owner = $3::text
RETURNING j.id`

// sqlLockRows locks rows $1 in ID order. Retry runs it first so that a
// concurrent Add holding a share lock on one of them has committed (and
// its rerun is visible) before sqlRetry looks for reruns.
var sqlLockRows = `SELECT id FROM {jobs} WHERE id = ` + byIDs("$1") + ` ORDER BY id FOR UPDATE`

// sqlRetry puts runs back ($1 IDs, sorted; $2 attempts, $3 times, $4
// errors, $5 true for Defer: no attempt used, no error; $8 true for Hold:
// held for the target) unless the key has a rerun waiting, or an
// operator asked to cancel the run (admin Cancel), in which case the run
// is cancelled (superseded). $6 is the owner, $7 now.
var sqlRetry = `
WITH t AS (
    SELECT j.id, ($3::timestamptz[])[` + at + `] AS at, ($4::text[])[` + at + `] AS err,
        ($5::boolean[])[` + at + `] AS undo,
        EXISTS (SELECT 1 FROM {jobs} r WHERE j.key <> '' AND r.queue = j.queue AND r.key = j.key AND r.key <> ''
            AND r.state = 'pending') OR j.cancel_requested_at IS NOT NULL AS sup
    FROM {jobs} j
    WHERE j.id = ` + byIDs("$1") + ` AND j.attempt = ($2::integer[])[` + at + `]
        AND j.state = 'running' AND j.lease_owner = $6::text
)
UPDATE {jobs} j SET
    state = CASE WHEN t.sup THEN 'cancelled' ELSE 'retryable' END,
    run_at = CASE WHEN t.sup THEN j.run_at ELSE t.at END,
    scheduled_at = CASE WHEN t.sup THEN j.scheduled_at ELSE t.at END,
    attempt = CASE WHEN t.undo AND NOT t.sup THEN j.attempt - 1 ELSE j.attempt END,
    finalized_at = CASE WHEN t.sup THEN $7::timestamptz END,
    last_error = CASE WHEN t.undo AND coalesce(t.err, '') = '' THEN j.last_error ELSE t.err END,
    errors = CASE WHEN t.undo AND coalesce(t.err, '') = '' THEN j.errors
        ELSE j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', $7::timestamptz, 'error', t.err)) END,
    lease_owner = NULL, lease_expires_at = NULL,
    held = NOT t.sup AND ($8::boolean[])[` + at + `]
FROM t WHERE j.id = t.id
RETURNING j.id, t.sup`

// sqlReleaseHeld makes the jobs of queue $1 held for target $2 (Hold)
// that are not yet due at $3 due then, and reports how many; the
// promotion that follows makes them available.
var sqlReleaseHeld = `
WITH up AS (
    UPDATE {jobs} SET run_at = $3::timestamptz, scheduled_at = $3::timestamptz, held = false
    WHERE queue = $1::text AND target = $2::text AND held AND state = 'retryable' AND run_at > $3::timestamptz
    RETURNING 1
)
SELECT count(*) FROM up`

// sqlReleaseReruns makes the reruns of the keys of jobs $2 (in queue $1)
// ready once no live job holds the key: available when due (no
// scheduled_at, or one not after now: a RunAt kept for the handler) and
// the queue has room ($4), else retryable at its time or at $5
// (RequeueDelay later).
// $3 is now, $6 the channel. It runs after the statements that ended the
// jobs, in a new snapshot, so it sees reruns added while they waited.
//
// The explicit non-empty key tests let the planner use the partial
// indexes on (queue, key): without them it scanned the whole table, once
// per write batch, which made every outcome slower as the table grew.
var sqlReleaseReruns = `
WITH k AS (
    SELECT DISTINCT key FROM {jobs} WHERE id = ` + byIDs("$2") + ` AND key <> ''
),
r AS (
    SELECT p.id FROM {jobs} p JOIN k ON p.key = k.key
    WHERE p.queue = $1::text AND p.key <> '' AND p.state = 'pending'
        AND NOT EXISTS (SELECT 1 FROM {jobs} l WHERE l.queue = p.queue AND l.key = p.key AND l.key <> '' AND l.state IN {live})
    ORDER BY p.id
    FOR UPDATE OF p
),
room AS (
    SELECT ` + room("$4") + ` AS ok
),
up AS (
    UPDATE {jobs} j SET
        state = CASE WHEN j.scheduled_at > $3::timestamptz OR NOT (SELECT ok FROM room) THEN 'retryable' ELSE 'available' END,
        run_at = CASE WHEN j.scheduled_at > $3::timestamptz THEN j.run_at WHEN (SELECT ok FROM room) THEN $3::timestamptz ELSE $5::timestamptz END,
        scheduled_at = CASE WHEN j.scheduled_at > $3::timestamptz OR (SELECT ok FROM room) THEN j.scheduled_at ELSE $5::timestamptz END
    FROM r WHERE j.id = r.id
    RETURNING j.state
)
SELECT count(*) FILTER (WHERE state = 'available'), count(*),
    (SELECT count(*) FROM (SELECT pg_notify($6::text, $1::text) FROM up LIMIT 1) n)
FROM up`

// sqlCancel cancels queue $1's waiting job (or rerun) with key $2; $3 is now.
const sqlCancel = `
UPDATE {jobs} SET state = 'cancelled', finalized_at = $3::timestamptz
WHERE queue = $1::text AND key = $2::text AND state IN {waiting}
RETURNING id`

// sqlWaitingKeys lists queue $1's waiting jobs that have a key.
const sqlWaitingKeys = `SELECT id, key, key_bytes FROM {jobs} WHERE queue = $1::text AND key <> '' AND state IN {waiting}`

// sqlCancelIDs cancels the jobs $1 that are still waiting; $2 is now.
var sqlCancelIDs = `
UPDATE {jobs} SET state = 'cancelled', finalized_at = $2::timestamptz
WHERE id IN (SELECT id FROM {jobs} WHERE id = ` + byIDs("$1") + ` AND state IN {waiting} ORDER BY id FOR UPDATE)
    AND state IN {waiting}
RETURNING id`

// sqlPurge cancels every waiting job of queue $1; $2 is now.
const sqlPurge = `
UPDATE {jobs} SET state = 'cancelled', finalized_at = $2::timestamptz
WHERE id IN (SELECT id FROM {jobs} WHERE queue = $1::text AND state IN {waiting} ORDER BY id FOR UPDATE)
    AND state IN {waiting}
RETURNING id`

// sqlStats counts queue $1's jobs by state and priority.
const sqlStats = `
SELECT state, priority, count(*), count(*) FILTER (WHERE key <> '')
FROM {jobs}
WHERE queue = $1::text AND state IN ('scheduled', 'available', 'running', 'retryable', 'pending', 'dead')
GROUP BY state, priority`

// sqlScheduled lists queue $1's next $2 scheduled jobs.
const sqlScheduled = `
SELECT id, key, group_key, target, priority, run_at, attempt, key_bytes, group_bytes FROM {jobs}
WHERE queue = $1::text AND state IN ('scheduled', 'retryable')
ORDER BY run_at, id
LIMIT $2::bigint`

// sqlRescue returns up to $3 of queue $1's running jobs whose lease ended
// in database time shifted by $5 microseconds (see lease.go) to available,
// or dead-letters them after their last attempt ($4: the queue's default
// limit), or cancels those an operator asked to cancel (admin Cancel). $2
// is now, for the error log and finalized_at.
var sqlRescue = `
WITH exp AS (
    SELECT id FROM {jobs}
    WHERE queue = $1::text AND state = 'running' AND lease_expires_at < ` + dbTime("$5") + `
    ORDER BY lease_expires_at, id
    LIMIT $3::bigint
    FOR UPDATE SKIP LOCKED
),
up AS (
    UPDATE {jobs} j SET
        state = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN j.attempt >= coalesce(nullif(j.max_attempts, 0), $4::integer) THEN 'dead' ELSE 'available' END,
        finalized_at = CASE WHEN j.cancel_requested_at IS NOT NULL OR j.attempt >= coalesce(nullif(j.max_attempts, 0), $4::integer)
            THEN $2::timestamptz END,
        last_error = 'lease expired (owner ' || coalesce(j.lease_owner, '?') || ')',
        errors = j.errors || jsonb_build_array(jsonb_build_object('attempt', j.attempt, 'at', $2::timestamptz,
            'error', 'lease expired (owner ' || coalesce(j.lease_owner, '?') || ')')),
        lease_owner = NULL, lease_expires_at = NULL
    FROM exp WHERE j.id = exp.id
    RETURNING j.id, j.state, j.key, j.target, j.priority, j.attempt
)
SELECT id, state, key, target, priority, attempt FROM up`

// sqlPrune deletes up to $3 of queue $1's completed jobs and $3 of its
// cancelled jobs finalized before $2, and up to $3 of its dead jobs
// finalized before $4, oldest first, each state through the ended index
// (migration 003). The state is tested again on the row itself: a job
// that an operator retried (admin Retry) after the subqueries read it is
// left alone.
const sqlPrune = `
DELETE FROM {jobs} WHERE state IN ('completed', 'cancelled', 'dead') AND id IN (
    (SELECT id FROM {jobs}
    WHERE queue = $1::text AND state = 'completed' AND finalized_at < $2::timestamptz
    ORDER BY finalized_at LIMIT $3::bigint)
    UNION ALL
    (SELECT id FROM {jobs}
    WHERE queue = $1::text AND state = 'cancelled' AND finalized_at < $2::timestamptz
    ORDER BY finalized_at LIMIT $3::bigint)
    UNION ALL
    (SELECT id FROM {jobs}
    WHERE queue = $1::text AND state = 'dead' AND finalized_at < $4::timestamptz
    ORDER BY finalized_at LIMIT $3::bigint))`

// sqlElect takes or renews queue $1's leadership for $2 for $3
// milliseconds of database time; it returns a row when $2 leads.
const sqlElect = `
INSERT INTO {leaders} AS l (queue, leader_id, elected_at, expires_at)
VALUES ($1::text, $2::text, now(), now() + $3::bigint * interval '1 millisecond')
ON CONFLICT (queue) DO UPDATE SET
    leader_id = excluded.leader_id,
    elected_at = CASE WHEN l.leader_id = excluded.leader_id THEN l.elected_at ELSE now() END,
    expires_at = excluded.expires_at
WHERE l.leader_id = excluded.leader_id OR l.expires_at < now()
RETURNING leader_id`

// sqlResign gives up queue $1's leadership if $2 holds it.
const sqlResign = `DELETE FROM {leaders} WHERE queue = $1::text AND leader_id = $2::text`

// sqlInsertMany inserts jobs with preallocated IDs, skipping those whose
// key or group is taken, and those whose key has an open unique window
// unless the job took the window's mark (sqlMarkMany, earlier in the same
// transaction). $1 queue, $2 IDs, $3 states, $4 priorities, $5 run_at, $6
// scheduled_at (the RunAt of each job, NULL for none), $7 max attempts, $8 keys, $9 groups, $10 targets, $11
// payloads, $12 now, $13 the IDs of the jobs that took their key's mark,
// $14 the database-time shift in microseconds (see lease.go), $15 and $16
// the keys' and groups' bytes where they are stored as digests (keys.go;
// $8 and $9 then hold the digests), $17 the jobs' metadata as JSON (NULL:
// none).
var sqlInsertMany = `
WITH ins AS (
    INSERT INTO {jobs} (id, queue, state, priority, run_at, scheduled_at, max_attempts, key, group_key, target, payload, created_at,
        key_bytes, group_bytes, meta)
    SELECT u.id, $1::text, u.state, u.priority, u.run_at, u.sched,
        u.max_attempts, u.key, u.grp, u.target, u.payload, $12::timestamptz, u.key_bytes, u.group_bytes, u.meta
    FROM unnest($2::bigint[], $3::text[], $4::integer[], $5::timestamptz[], $6::timestamptz[], $7::integer[],
        $8::text[], $9::text[], $10::text[], $11::bytea[], $15::bytea[], $16::bytea[], $17::jsonb[])
        AS u(id, state, priority, run_at, sched, max_attempts, key, grp, target, payload, key_bytes, group_bytes, meta)
    WHERE u.key = '' OR u.id = ANY ($13::bigint[]) OR NOT EXISTS (SELECT 1 FROM {marks} m
        WHERE m.queue = $1::text AND m.key = u.key AND m.until > ` + dbTime("$14") + `)
    ORDER BY u.id
    ON CONFLICT DO NOTHING
    RETURNING id
)
SELECT id FROM ins`

// sqlInsertPlain inserts a batch of jobs without key or group, a row
// for each element of its arrays: set-returning functions in the select
// list advance in step, one row at a time (unnest in FROM with several
// arrays would first copy each into a tuple store), in the arrays' order,
// each taking its ID from the identity default. $1 queue, $2 states, $3
// priorities, $4 run_at, $5 scheduled_at, $6 max_attempts, $7 targets,
// $8 payloads, $9 created_at, $10 metas.
var sqlInsertPlain = `
INSERT INTO {jobs} (queue, state, priority, run_at, scheduled_at, max_attempts, target, payload, created_at, meta)
SELECT $1::text, unnest($2::text[]), unnest($3::integer[]), unnest($4::timestamptz[]),
    unnest($5::timestamptz[]), unnest($6::integer[]), unnest($7::text[]), unnest($8::bytea[]), $9::timestamptz,
    unnest($10::jsonb[])
RETURNING id`

// sqlInsertAlike is sqlInsertPlain for jobs that differ in their
// payloads only (see alike): $1 queue, $2 state, $3 priority, $4 run_at,
// $5 max_attempts, $6 target, $7 payloads, $8 created_at.
var sqlInsertAlike = `
INSERT INTO {jobs} (queue, state, priority, run_at, max_attempts, target, payload, created_at)
SELECT $1::text, $2::text, $3::integer, $4::timestamptz, $5::integer, $6::text, unnest($7::bytea[]), $8::timestamptz
RETURNING id`

// sqlMarkMany takes the marks of a batch's jobs with unique windows, one
// job per key (the first), where the key's window is not open; it returns
// the IDs of the jobs whose marks it took. $1 queue, $2 IDs, $3 keys, $4
// windows in microseconds, $5 the database-time shift in microseconds.
var sqlMarkMany = `
INSERT INTO {marks} AS m (queue, key, until)
SELECT DISTINCT ON (u.key) $1::text, u.key, ` + dbTime("($5::bigint + u.win)") + `
FROM unnest($2::bigint[], $3::text[], $4::bigint[]) AS u(id, key, win)
WHERE u.win > 0 AND u.key <> ''
ORDER BY u.key, u.id
ON CONFLICT (queue, key) DO UPDATE SET until = excluded.until
WHERE m.until <= ` + dbTime("$5") + `
RETURNING m.key`

// sqlUnmark gives back the marks a batch took for jobs it did not insert
// ($2 keys), in the transaction that took them: a mark is only ever
// taken over once expired, and an expired mark is as good as none. $1
// queue.
const sqlUnmark = `DELETE FROM {marks} WHERE queue = $1::text AND key = ANY ($2::text[])`

// sqlPruneMarks deletes up to $2 of queue $1's marks whose windows ended
// ($3: the database-time shift in microseconds, see lease.go).
var sqlPruneMarks = `
DELETE FROM {marks} WHERE (queue, key) IN (
    SELECT queue, key FROM {marks}
    WHERE queue = $1::text AND until <= ` + dbTime("$3") + `
    LIMIT $2::bigint)`

// sqlRelease gives back jobs $1 that $2 claimed but never handed out: they
// are available again with the attempt undone, and queue $4's processes
// are told on channel $3.
var sqlRelease = `
WITH up AS (
    UPDATE {jobs} SET state = 'available', attempt = attempt - 1, lease_owner = NULL, lease_expires_at = NULL
    WHERE id = ` + byIDs("$1") + ` AND state = 'running' AND lease_owner = $2::text
    RETURNING id
)
SELECT count(*), (SELECT count(*) FROM (SELECT pg_notify($3::text, $4::text) FROM up LIMIT 1) n) FROM up`
