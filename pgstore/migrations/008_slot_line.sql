-- queuekit pgstore migration 008: the line of the processes waiting for a
-- target's concurrency slot (queue.SlotStore), so that a freed slot goes
-- to the process that has waited longest rather than to whoever asks
-- first, and the slots go round the fleet.
--
-- A process refused a slot takes its place in its target's line: since
-- orders the line (the server's clock less how long the process says it
-- has waited), and the place is given up at expires_at unless the process
-- asks again. A process granted a slot, or that stops waiting, leaves it.
--
-- As 001, tables are unqualified: set search_path to the store's schema
-- first when applying this file with another migration tool.
CREATE TABLE queuekit_slot_line (
    queue      text        NOT NULL,
    target     text        NOT NULL,
    process    text        NOT NULL,
    since      timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue, target, process)
);
