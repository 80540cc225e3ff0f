-- queuekit pgstore migration 003: what the admin API (issue #23) needs.
--
-- As 001, tables are unqualified: set search_path to the store's schema
-- first when applying this file with another migration tool.

-- A running job an operator cancelled: the process holding it learns at
-- its next heartbeat, cancels the job's context and ends it as cancelled.
ALTER TABLE queuekit_jobs ADD COLUMN cancel_requested_at timestamptz;

-- One control row per queue, shared by every process: claims return
-- nothing while paused is true (enqueues, promotion and rescue go on).
CREATE TABLE queuekit_queues (
    queue      text        PRIMARY KEY,
    paused     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Listing ready jobs in (created_at, id) order, newest (or oldest) first,
-- by keyset. (Scheduled jobs are listed through the due index, running
-- ones through the lease index.)
CREATE INDEX queuekit_jobs_ready_idx ON queuekit_jobs (queue, created_at, id)
    WHERE state = 'available';

-- Listing ended jobs of one state, by keyset; and retention, which
-- prunes each state oldest first. It replaces the retention index of 001,
-- so that ending a job writes no more index entries than before.
CREATE INDEX queuekit_jobs_ended_idx ON queuekit_jobs (queue, state, finalized_at, id)
    WHERE state IN ('completed', 'dead', 'cancelled');
DROP INDEX queuekit_jobs_final_idx;

-- Looking up the newest ended job with a key.
CREATE INDEX queuekit_jobs_ended_key_idx ON queuekit_jobs (queue, key, finalized_at)
    WHERE key <> '' AND state IN ('completed', 'dead', 'cancelled');
