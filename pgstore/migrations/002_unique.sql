-- queuekit pgstore migration 002: unique windows (Job.UniqueFor).
--
-- Tables are created unqualified, in the first schema of search_path (see
-- 001_create_jobs.sql).

-- A job accepted with a unique window leaves a mark on its key until the
-- window ends (database time: statement_timestamp(), see pgstore's
-- lease.go); while it stands, every other job with the key is refused,
-- whatever became of the first. A mark whose window has ended means
-- nothing: the add statement takes it over, and the leader's janitor
-- deletes it.
CREATE TABLE queuekit_unique (
    queue text        NOT NULL,
    key   text        NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

-- Pruning: marks by expiry.
CREATE INDEX queuekit_unique_until_idx ON queuekit_unique (queue, until);
