package queue

import (
	"github.com/queuekit/queue/queuetype"
)

// EventKind names a lifecycle event of a job or a target. Its String
// method returns the event's lower-case name, e.g. "done".
type EventKind = queuetype.EventKind

// The events a queue reports to its observers and counts.
const (
	EventEnqueued  = queuetype.EventEnqueued  // accepted by Enqueue
	EventCoalesced = queuetype.EventCoalesced // accepted as the rerun of a running key
	EventDropped   = queuetype.EventDropped   // refused by Enqueue: ready queue full
	EventStarted   = queuetype.EventStarted   // handed to a handler
	EventDone      = queuetype.EventDone      // handler succeeded (or retry past the ceiling)
	EventRetried   = queuetype.EventRetried   // scheduled to run again after a failure or RetryAfter
	EventDead      = queuetype.EventDead      // dead-lettered
	EventCancelled = queuetype.EventCancelled // cancelled before running (Cancel, disabled target, superseded, Purge)
	EventRequeued  = queuetype.EventRequeued  // due, but the ready queue was full: rescheduled RequeueDelay later
	EventDeferred  = queuetype.EventDeferred  // put back without using an attempt (early, target suspended or busy)
	EventRescued   = queuetype.EventRescued   // its lease expired and it was returned to the queue
	EventSuspended = queuetype.EventSuspended // a target was suspended
	EventDisabled  = queuetype.EventDisabled  // a target was disabled
	EventResumed   = queuetype.EventResumed   // a target was resumed
	// EventPaused and EventUnpaused: the admin API paused the queue
	// (workers stop claiming), and resumed it. They name no job or
	// target, and are not counted (no job ends).
	EventPaused   = queuetype.EventPaused
	EventUnpaused = queuetype.EventUnpaused
	// EventDeleted: the admin API deleted a job that had ended (a dead
	// job; a durable store's done or cancelled one too), which was
	// counted when it ended. A pending job that Delete removes is
	// cancelled instead (EventCancelled, counted), and a dead job that
	// the admin API retries is enqueued again as a new job
	// (EventEnqueued, with the new ID).
	EventDeleted = queuetype.EventDeleted
)

// Event describes one lifecycle event: its Kind, Time, the job's JobID,
// Key, Target, Priority and Attempt, and the Err and Delay that apply.
// Payloads are never included. Fields that do not apply are zero; each
// field is documented at its definition, which the in-memory store shares.
type Event = queuetype.Event
