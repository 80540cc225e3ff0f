-- queuekit pgstore migration 005: fleet state. The admission bucket that
-- every process of a queue shares, and the presence rows by which the
-- processes of a queue count each other.
--
-- Tables are created unqualified, in the first schema of search_path (see
-- 001_create_jobs.sql).

-- One GCRA bucket per queue: tat is the bucket's theoretical arrival time
-- (the bucket is full when tat <= now), granted the tokens the last take
-- was given. Every take is one statement that locks the row, by the
-- server's clock (statement_timestamp()).
CREATE TABLE queuekit_admission (
    queue   text        PRIMARY KEY,
    tat     timestamptz NOT NULL,
    granted integer     NOT NULL DEFAULT 0
);

-- One row per started process of a queue, renewed with each count of the
-- ready jobs (every poll interval) and deleted when the store closes; a
-- row past expires_at is a process that died.
CREATE TABLE queuekit_processes (
    queue      text        NOT NULL,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, owner)
);
