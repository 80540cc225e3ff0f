package queue

import "github.com/queuekit/queue/internal/core"

// EventKind names a lifecycle event of a job or a target. Its String
// method returns the event's lower-case name, e.g. "done".
type EventKind = core.EventKind

// The events a queue reports to its observers and counts.
const (
	EventEnqueued  = core.EventEnqueued  // accepted by Enqueue
	EventCoalesced = core.EventCoalesced // accepted as the rerun of a running key
	EventDropped   = core.EventDropped   // refused by Enqueue: ready queue full
	EventStarted   = core.EventStarted   // handed to a handler
	EventDone      = core.EventDone      // handler succeeded (or retry past the ceiling)
	EventRetried   = core.EventRetried   // scheduled to run again after a failure or RetryAfter
	EventDead      = core.EventDead      // dead-lettered
	EventCancelled = core.EventCancelled // cancelled before running (Cancel, disabled target, superseded, Purge)
	EventRequeued  = core.EventRequeued  // due, but the ready queue was full: rescheduled RequeueDelay later
	EventDeferred  = core.EventDeferred  // put back without using an attempt (early, target suspended or busy)
	EventRescued   = core.EventRescued   // its lease expired and it was returned to the queue
	EventSuspended = core.EventSuspended // a target was suspended
	EventDisabled  = core.EventDisabled  // a target was disabled
	EventResumed   = core.EventResumed   // a target was resumed
	// EventPaused and EventUnpaused: the admin API paused the queue
	// (workers stop claiming), and resumed it. They name no job or
	// target, and are not counted (no job ends).
	EventPaused   = core.EventPaused
	EventUnpaused = core.EventUnpaused
	// EventDeleted: the admin API deleted a job that had ended (a dead
	// job; a durable store's done or cancelled one too), which was
	// counted when it ended. A pending job that Delete removes is
	// cancelled instead (EventCancelled, counted), and a dead job that
	// the admin API retries is enqueued again as a new job
	// (EventEnqueued, with the new ID).
	EventDeleted = core.EventDeleted
)

// Event describes one lifecycle event: its Kind, Time, the job's JobID,
// Key, Target, Priority and Attempt, and the Err and Delay that apply.
// Payloads are never included. Fields that do not apply are zero; each
// field is documented at its definition, which the in-memory store shares.
type Event = core.Event
