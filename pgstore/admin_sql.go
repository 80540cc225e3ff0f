package pgstore

import "strings"

// The admin API's statements (see admin.go). {jobs} and {queues} are
// filled in by newQueries; List's statement is built per call (listSQL).

// adminCols are the columns a JobInfo is read from (scanInfo), the
// payload last; $P is replaced by the payload expression.
const adminCols = `id, key, group_key, target, priority, state, attempt, max_attempts, run_at, created_at,
    CASE state WHEN 'available' THEN run_at WHEN 'running' THEN attempted_at
        WHEN 'completed' THEN finalized_at WHEN 'dead' THEN finalized_at WHEN 'cancelled' THEN finalized_at
        ELSE coalesce(attempted_at, created_at) END,
    coalesce(last_error, ''), cancel_requested_at IS NOT NULL, key_bytes, group_bytes, meta`

// sqlAdminGet reads job $1 of queue $2, its payload when $3.
const sqlAdminGet = `SELECT ` + adminCols + `, CASE WHEN $3::boolean THEN payload END
FROM {jobs} WHERE id = $1::bigint AND queue = $2::text`

// sqlAdminGetKey reads queue $1's job holding key $2 (queued, scheduled,
// retrying or running), else its coalesced rerun, else the newest ended
// job with the key; its payload when $3. The branches run in order and
// the first row wins.
const sqlAdminGetKey = `
(SELECT ` + adminCols + `, CASE WHEN $3::boolean THEN payload END FROM {jobs}
    WHERE queue = $1::text AND key = $2::text AND key <> '' AND state IN {live} LIMIT 1)
UNION ALL
(SELECT ` + adminCols + `, CASE WHEN $3::boolean THEN payload END FROM {jobs}
    WHERE queue = $1::text AND key = $2::text AND key <> '' AND state = 'pending' LIMIT 1)
UNION ALL
(SELECT ` + adminCols + `, CASE WHEN $3::boolean THEN payload END FROM {jobs}
    WHERE queue = $1::text AND key = $2::text AND key <> '' AND state IN ('completed', 'dead', 'cancelled')
    ORDER BY finalized_at DESC LIMIT 1)
LIMIT 1`

// sqlAdminState reads job $1's state in queue $2 (to tell why an action
// found nothing to do).
const sqlAdminState = `SELECT state FROM {jobs} WHERE id = $1::bigint AND queue = $2::text`

// sqlAdminCounts counts queue $1's jobs by stored state.
const sqlAdminCounts = `SELECT state, count(*) FROM {jobs} WHERE queue = $1::text GROUP BY state`

// sqlAdminRetry makes queue $2's dead or cancelled job $1 available at $3
// with its attempts reset, and notifies channel $4. A key another live job
// holds makes it fail on the key index (unique_violation): the job stays
// as it was. The state test is evaluated again on the row a concurrent
// statement left, so a job pruned or retried meanwhile is not touched.
const sqlAdminRetry = `
WITH up AS (
    UPDATE {jobs} SET state = 'available', attempt = 0, run_at = $3::timestamptz, scheduled_at = NULL,
        finalized_at = NULL, cancel_requested_at = NULL, lease_owner = NULL, lease_expires_at = NULL,
        heartbeat_at = NULL
    WHERE id = $1::bigint AND queue = $2::text AND state IN ('dead', 'cancelled')
    RETURNING id, key, target, priority, attempt
)
SELECT id, key, target, priority, attempt, (SELECT count(*) FROM (SELECT pg_notify($4::text, $2::text) FROM up) n) FROM up`

// sqlAdminDelete deletes queue $2's job $1 unless it is running.
const sqlAdminDelete = `
DELETE FROM {jobs} WHERE id = $1::bigint AND queue = $2::text AND state <> 'running'
RETURNING state, key, target, priority, attempt`

// sqlAdminCancel cancels queue $2's waiting job $1 (at $3, with error
// $4), or marks it to be cancelled if it is running: the process that
// holds it learns at its next heartbeat. It returns the job's new state.
const sqlAdminCancel = `
UPDATE {jobs} SET
    state = CASE WHEN state = 'running' THEN state ELSE 'cancelled' END,
    finalized_at = CASE WHEN state = 'running' THEN finalized_at ELSE $3::timestamptz END,
    last_error = CASE WHEN state = 'running' THEN last_error ELSE $4::text END,
    cancel_requested_at = CASE WHEN state = 'running' THEN coalesce(cancel_requested_at, $3::timestamptz) END
WHERE id = $1::bigint AND queue = $2::text AND state IN ('scheduled', 'available', 'running', 'retryable', 'pending')
RETURNING state, key, target, priority, attempt`

// sqlAdminPause sets queue $1's paused flag to $2 and notifies channel $3
// (the processes re-read it and, on resume, claim at once).
const sqlAdminPause = `
WITH up AS (
    INSERT INTO {queues} AS c (queue, paused, updated_at) VALUES ($1::text, $2::boolean, now())
    ON CONFLICT (queue) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at
    RETURNING queue
)
SELECT (SELECT count(*) FROM (SELECT pg_notify($3::text, $1::text) FROM up) n)`

// sqlAdminPaused reads queue $1's paused flag.
const sqlAdminPaused = `SELECT coalesce((SELECT paused FROM {queues} WHERE queue = $1::text), false)`

// sqlAdminRelease is sqlReleaseReruns for one key ($2) rather than the
// keys of jobs: Delete's job no longer has a row to find its key by.
var sqlAdminRelease = strings.Replace(sqlReleaseReruns,
	"SELECT DISTINCT key FROM {jobs} WHERE id = "+byIDs("$2")+" AND key <> ''",
	"SELECT $2::text AS key WHERE $2::text <> ''", 1)

func init() {
	if sqlAdminRelease == sqlReleaseReruns {
		panic("pgstore: sqlAdminRelease: sqlReleaseReruns changed; update the replacement")
	}
}

// notPaused is the claim statements' test that queue $1 is not paused: an
// uncorrelated subquery, evaluated once per statement (a primary-key probe
// of a table with one row per queue).
const notPaused = `NOT EXISTS (SELECT 1 FROM {queues} WHERE queue = $1::text AND paused)`
