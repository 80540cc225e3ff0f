-- queuekit pgstore migration 007: jobs held back for their target
-- (queue.HoldStore).
--
-- held marks a job that a queue put back (Hold) because its target was
-- suspended or its circuit breaker open: when the target is resumed,
-- ReleaseHeld makes the target's held jobs due at once, while a job
-- scheduled for later on purpose, or retried after a failure, keeps its
-- time. The claim that takes the job again clears it.
--
-- Adding a column with a constant default rewrites no rows (PostgreSQL
-- 11 and later); the index holds only the held jobs.
--
-- As 001, tables are unqualified: set search_path to the store's schema
-- first when applying this file with another migration tool.
ALTER TABLE queuekit_jobs ADD COLUMN held boolean NOT NULL DEFAULT false;

CREATE INDEX queuekit_jobs_held_idx ON queuekit_jobs (queue, target)
    WHERE held AND state = 'retryable';
