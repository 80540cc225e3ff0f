-- queuekit pgstore migration 004: target health and fan-out cadence,
-- shared by every process of a queue (queue.TargetStore).
--
-- One row per entry: key = '' holds a target's health (suspension,
-- disabling and its reason, the circuit breaker's open state); any other
-- key holds the target's next-due time for that fan-out key. A healthy
-- target, or a cleared next-due time, has no row. Changes are announced
-- on the schema's NOTIFY channel (see pgstore's targets.go).
CREATE TABLE queuekit_targets (
    queue           text        NOT NULL,
    target          text        NOT NULL,
    key             text        NOT NULL DEFAULT '',
    next_due        timestamptz,            -- key <> '': when the target is next due for key
    suspended_until timestamptz,            -- end of the suspension
    disabled        boolean     NOT NULL DEFAULT false,
    reason          text        NOT NULL DEFAULT '',
    disabled_at     timestamptz,
    breaker_until   timestamptz,            -- end of the breaker's open state; NULL: closed
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, target, key)
);
