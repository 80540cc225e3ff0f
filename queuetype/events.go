package queuetype

import "time"

// EventKind names a lifecycle event of a job or a target.
type EventKind uint8

// The events a queue reports to its observers and counts.
const (
	EventEnqueued  EventKind = iota + 1 // accepted by Enqueue
	EventCoalesced                      // accepted as the rerun of a running key
	EventDropped                        // refused by Enqueue: ready queue full
	EventStarted                        // handed to a handler
	EventDone                           // handler succeeded (or retry past the ceiling)
	EventRetried                        // scheduled to run again after a failure or RetryAfter
	EventDead                           // dead-lettered
	EventCancelled                      // cancelled before running (Cancel, disabled target, superseded, Purge)
	EventRequeued                       // due, but the ready queue was full: rescheduled RequeueDelay later
	EventDeferred                       // put back without using an attempt (early, target suspended or busy)
	EventRescued                        // its lease expired and it was returned to the queue
	EventSuspended                      // a target was suspended
	EventDisabled                       // a target was disabled
	EventResumed                        // a target was resumed
	EventPaused                         // the admin API paused the queue
	EventUnpaused                       // the admin API resumed the paused queue
	EventDeleted                        // the admin API deleted a job that had ended (dead)
)

var eventNames = [...]string{
	EventEnqueued: "enqueued", EventCoalesced: "coalesced", EventDropped: "dropped",
	EventStarted: "started", EventDone: "done", EventRetried: "retried", EventDead: "dead",
	EventCancelled: "cancelled", EventRequeued: "requeued", EventDeferred: "deferred",
	EventRescued: "rescued", EventSuspended: "suspended", EventDisabled: "disabled",
	EventResumed: "resumed", EventPaused: "paused", EventUnpaused: "unpaused", EventDeleted: "deleted",
}

// Event describes one lifecycle event. Payloads are never included.
// Fields that do not apply are zero: a target's events (EventSuspended,
// EventDisabled, EventResumed) name only the target, the queue's
// (EventPaused, EventUnpaused) nothing, and the
// EventCancelled events of Cancel name only the key, those of CancelMatch
// and Purge neither key nor job, as the store reports only how many jobs
// it cancelled (one event each).
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Time is when it happened, by the queue's clock.
	Time time.Time
	// JobID is the job's ID (Job.ID); zero for a target's events and for
	// a job the queue refused (EventDropped), which never got one.
	JobID int64
	// Key is the job's pending key (Job.Key), "" if it has none.
	Key string
	// Target is the job's target (Job.Target), or the target a target's
	// event is about.
	Target string
	// Priority is the job's priority label as given to Enqueue; "" means
	// the default priority.
	Priority string
	// Attempt is the job's attempt number (Job.Attempt) when the event
	// happened: 0 before its first run (EventEnqueued, EventCoalesced,
	// EventDropped), otherwise the number of the run that just ended or
	// is about to start.
	Attempt int
	// Err is the job's error for EventRetried, EventDead and failed
	// EventDone; the reason for EventDisabled and EventCancelled.
	Err error
	// Delay is the wait before the next run for EventRetried,
	// EventRequeued and EventDeferred; the suspension for EventSuspended;
	// the run time for EventDone and EventDead.
	Delay time.Duration
}

// String returns the event's lower-case name, e.g. "done".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && eventNames[k] != "" {
		return eventNames[k]
	}
	return "unknown"
}
