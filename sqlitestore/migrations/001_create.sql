-- queuekit sqlitestore migration 001: every table the store uses.
--
-- Times are INTEGER nanoseconds since the Unix epoch (the queue's Clock);
-- keys and groups are BLOBs, so that any bytes of any length are kept as
-- they are. One table holds the jobs of every named queue of the file.
--
-- state:
--   scheduled  added with a future run_at; waits for its time
--   available  due; waits for a worker (claimed in priority, run_at, id order)
--   running    claimed; lease_owner holds it until lease_expires_at
--   retryable  put back by Retry, Defer or Hold, waits for run_at; holds no group
--   pending    a coalesced rerun: waits for the running job with its key to end
--   completed, dead, cancelled
--              final; pruned by the leader after the retention period
CREATE TABLE queuekit_jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('scheduled', 'available', 'running', 'retryable', 'pending',
                                                       'completed', 'dead', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,   -- weight: lower runs first
    run_at           INTEGER NOT NULL,             -- due (or ready) time; claim order within a priority
    scheduled_at     INTEGER,                      -- the job's RunAt, if it had one
    attempt          INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL DEFAULT 0,   -- 0: the queue's default
    key              BLOB    NOT NULL DEFAULT x'',
    group_key        BLOB    NOT NULL DEFAULT x'',
    target           TEXT    NOT NULL DEFAULT '',
    payload          BLOB    NOT NULL,
    meta             TEXT,                         -- the job's Meta as JSON; NULL when empty
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    heartbeat_at     INTEGER,
    held             INTEGER NOT NULL DEFAULT 0,   -- put back by Hold for its target
    cancel_requested INTEGER NOT NULL DEFAULT 0,   -- an operator cancelled the running job
    last_error       TEXT,
    errors           TEXT,                         -- JSON: [{"attempt":n,"at":"…","error":"…"}]
    created_at       INTEGER NOT NULL,
    attempted_at     INTEGER,
    finalized_at     INTEGER
);

CREATE INDEX queuekit_jobs_claim_idx ON queuekit_jobs (queue, priority, run_at, id) WHERE state = 'available';
CREATE INDEX queuekit_jobs_due_idx ON queuekit_jobs (queue, run_at, id) WHERE state IN ('scheduled', 'retryable');
CREATE INDEX queuekit_jobs_lease_idx ON queuekit_jobs (queue, lease_expires_at, id) WHERE lease_expires_at IS NOT NULL;
CREATE INDEX queuekit_jobs_ended_idx ON queuekit_jobs (queue, state, finalized_at, id)
    WHERE state IN ('completed', 'dead', 'cancelled');
CREATE INDEX queuekit_jobs_ready_idx ON queuekit_jobs (queue, created_at, id) WHERE state = 'available';
CREATE INDEX queuekit_jobs_ended_key_idx ON queuekit_jobs (queue, key, finalized_at)
    WHERE key <> x'' AND state IN ('completed', 'dead', 'cancelled');
-- Dedupe: one live job per key; one rerun per key; one scheduled job per group.
CREATE UNIQUE INDEX queuekit_jobs_key_idx ON queuekit_jobs (queue, key)
    WHERE key <> x'' AND state IN ('scheduled', 'available', 'running', 'retryable');
CREATE UNIQUE INDEX queuekit_jobs_rerun_idx ON queuekit_jobs (queue, key) WHERE key <> x'' AND state = 'pending';
CREATE UNIQUE INDEX queuekit_jobs_group_idx ON queuekit_jobs (queue, group_key)
    WHERE group_key <> x'' AND state = 'scheduled';
CREATE INDEX queuekit_jobs_target_idx ON queuekit_jobs (queue, target) WHERE held <> 0;

-- Unique windows (Job.UniqueFor): a key's mark until its window ends.
CREATE TABLE queuekit_unique (
    queue TEXT    NOT NULL,
    key   BLOB    NOT NULL,
    until INTEGER NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;

-- Leader election: one row per queue.
CREATE TABLE queuekit_leaders (
    queue      TEXT    PRIMARY KEY,
    leader_id  TEXT    NOT NULL,
    elected_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Pause (admin API): claims return nothing while paused.
CREATE TABLE queuekit_queues (
    queue      TEXT    PRIMARY KEY,
    paused     INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Target health and fan-out cadence (storekit.TargetStore).
CREATE TABLE queuekit_targets (
    queue           TEXT    NOT NULL,
    target          TEXT    NOT NULL,
    key             TEXT    NOT NULL DEFAULT '',
    next_due        INTEGER,
    suspended_until INTEGER,
    disabled        INTEGER NOT NULL DEFAULT 0,
    reason          TEXT    NOT NULL DEFAULT '',
    disabled_at     INTEGER,
    breaker_until   INTEGER,
    PRIMARY KEY (queue, target, key)
) WITHOUT ROWID;

-- The shared admission bucket (storekit.Admitter): GCRA's theoretical
-- arrival time.
CREATE TABLE queuekit_admission (
    queue TEXT    PRIMARY KEY,
    tat   INTEGER NOT NULL
) WITHOUT ROWID;

-- Live processes per queue (storekit.FleetSizer).
CREATE TABLE queuekit_processes (
    queue      TEXT    NOT NULL,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, owner)
) WITHOUT ROWID;

-- Per-target concurrency slots (storekit.SlotStore) and the line of the
-- processes waiting for one.
CREATE TABLE queuekit_slots (
    queue      TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, target, holder)
) WITHOUT ROWID;
CREATE TABLE queuekit_slot_line (
    queue      TEXT    NOT NULL,
    target     TEXT    NOT NULL,
    process    TEXT    NOT NULL,
    since      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue, target, process)
) WITHOUT ROWID;

-- Announcements to every process of a queue (SQLite has no NOTIFY): target
-- state writes and slot releases and refusals. Each process reads the rows
-- after the last it saw when the file changes; the janitor prunes old ones.
CREATE TABLE queuekit_notes (
    seq   INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT    NOT NULL,
    kind  TEXT    NOT NULL,
    body  TEXT    NOT NULL,
    at    INTEGER NOT NULL
);
