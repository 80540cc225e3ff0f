-- queuekit pgstore migration 006: per-target concurrency slots shared by
-- every process of a queue (queue.SlotStore), so that a
-- WithTargetConcurrency limit holds across the fleet.
--
-- A target with limit k has rows slot = 0..k-1, made on first use. A
-- slot is held while expires_at is after the server's clock
-- (statement_timestamp()); a free or released slot has holder NULL and
-- expires_at -infinity. A process takes a free slot with one UPDATE that
-- locks it (SKIP LOCKED), renews the slots it holds while their jobs
-- run, and frees a slot when its job ends, announcing it on the schema's
-- NOTIFY channel. A crashed process's slots are free once expired.
--
-- As 001, tables are unqualified: set search_path to the store's schema
-- first when applying this file with another migration tool.
CREATE TABLE queuekit_slots (
    queue      text        NOT NULL,
    target     text        NOT NULL,
    slot       integer     NOT NULL,
    holder     text,
    expires_at timestamptz NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (queue, target, slot)
);

-- Renewals and releases find a process's slots by holder.
CREATE INDEX queuekit_slots_holder_idx ON queuekit_slots (queue, target, holder);
