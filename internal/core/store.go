package core

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// ErrDrained is returned by Store.Claim after Store.Drain once there is no
// more work for this process.
var ErrDrained = errors.New("queue: store drained")

// ErrSuperseded is returned by Store.Retry and Store.Defer when a newer
// coalesced job for the same key replaced the job put back. The queue
// counts it as cancelled.
var ErrSuperseded = errors.New("queue: retry superseded by a newer job for the same key")

// Added describes an accepted job.
type Added struct {
	ID        int64 // the job's ID
	Scheduled bool  // the job waits in the schedule
	Coalesced bool  // the job is the rerun of its running key
}

// Priority is one named priority level.
type Priority struct {
	Name   string // label used in Job.Priority
	Weight int    // rank: lower runs first (strict) or breaks ties (weighted); must be unique
	// Share is the level's share of claims under weighted dispatch: while
	// several levels have ready jobs, each level with ready jobs gets at
	// least Share/(sum of all Shares) of the claims, so none starves. 0 on
	// every level means strict priorities: a level runs only when every
	// lower Weight has no ready job. Shares are all 0 or all in 1..1000.
	Share int
}

// MaxShare bounds Priority.Share.
const MaxShare = 1000

// StoreConfig is what a Store learns from its queue in Init.
type StoreConfig struct {
	// Name is the queue's name (WithName), "default" unless set.
	Name string
	// Priorities lists the priority levels, highest first (lowest Weight).
	Priorities []Priority
	// DefaultPriority is the label used for Job.Priority == "".
	DefaultPriority string
	// Capacity bounds the ready jobs.
	Capacity int
	// MaxPending bounds the jobs the in-memory store holds (ready,
	// scheduled, coalesced reruns): Add of a new job beyond it returns
	// ErrPendingLimit; jobs put back (Retry, Defer, reruns) are never
	// refused. 0 means no bound. Durable stores ignore it: their jobs live
	// in the database (see WithCapacity's pending bound).
	MaxPending int
	// RequeueDelay is how long a due job waits when its ready queue is
	// full at promotion.
	RequeueDelay time.Duration
	// Coalesce tells whether an Add for a running key becomes its rerun
	// (true) or ErrDuplicate (false).
	Coalesce bool
	// MaxAttempts is the default attempt limit, for stores that
	// dead-letter expired leases.
	MaxAttempts int
	// Clock is the time source; never nil.
	Clock Clock
	// Logger receives the store's logs; never nil (it may discard).
	Logger *slog.Logger
	// Report receives the events a store decides on its own: EventRequeued,
	// EventRescued, EventDead (janitor) and EventCancelled (superseded);
	// and, for jobs a store accepts or refuses outside the queue's
	// Enqueue (a batch enqueue of its own), EventEnqueued, EventCoalesced
	// and EventDropped, which the queue counts and observes as Enqueue's.
	// Never nil. It must be called without holding store locks.
	Report func(Event)
}

// RunCanceller is implemented by durable stores through which an operator
// cancels a running job (admin Cancel): the store's Heartbeat returns the
// job's ID among the lost ones, and CancelRequested(id) then reports true,
// so that the queue ends the run as cancelled rather than as a lost
// lease.
type RunCanceller interface {
	CancelRequested(id int64) bool
}

// Weighted reports whether the priorities are weighted (every level has a
// Share) rather than strict.
func (c *StoreConfig) Weighted() bool {
	for _, p := range c.Priorities {
		if p.Share <= 0 {
			return false
		}
	}
	return len(c.Priorities) > 0
}

// PriorityIndex returns the index of label in Priorities ("" is the
// default priority), or -1.
func (c *StoreConfig) PriorityIndex(label string) int {
	if label == "" {
		label = c.DefaultPriority
	}
	for i := range c.Priorities {
		if c.Priorities[i].Name == label {
			return i
		}
	}
	return -1
}

// UnknownPriority returns the error for a job whose Priority label is
// not one of the levels: it wraps ErrUnknownPriority and names the label
// and the valid ones, so that every store words it alike.
func (c *StoreConfig) UnknownPriority(label string) error {
	return fmt.Errorf("%w %q (the queue's priorities: %s)", ErrUnknownPriority, label, PriorityNames(c.Priorities))
}

// PriorityNames lists the levels' names, comma-separated, for errors.
func PriorityNames(levels []Priority) string {
	names := make([]string, len(levels))
	for i, p := range levels {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}

// StoreStats is a snapshot of a store's contents.
type StoreStats struct {
	Ready           int            `json:"ready"`             // jobs ready to run
	ReadyByPriority map[string]int `json:"ready_by_priority"` // ready jobs per priority label
	Scheduled       int            `json:"scheduled"`         // jobs waiting for their time (including retries)
	Waiting         int            `json:"waiting"`           // coalesced reruns waiting for their key's running job
	Running         int            `json:"running"`           // jobs claimed and not finished (for durable stores: by any process)
	PendingKeys     int            `json:"pending_keys"`      // keys held by queued, scheduled or running jobs
	Dead            int            `json:"dead"`              // dead-lettered jobs retained (durable stores)
	Backend         string         `json:"backend"`           // "memory", "postgres", "redis"
	Leader          bool           `json:"leader"`            // this process runs the store's maintenance
	Healthy         bool           `json:"healthy"`           // the backend is reachable
	Detail          string         `json:"detail,omitempty"`  // backend-specific state, e.g. "fallback: in-memory"
}

// ScheduledJob describes one job waiting in the schedule.
type ScheduledJob struct {
	ID       int64     `json:"id"`               // the job's ID
	Key      string    `json:"key,omitempty"`    // its pending key, if any
	Group    string    `json:"group,omitempty"`  // its schedule group, if any
	Target   string    `json:"target,omitempty"` // its target, if any
	Priority string    `json:"priority"`         // its priority label
	RunAt    time.Time `json:"run_at"`           // when it becomes due
	Attempt  int       `json:"attempt"`          // attempts already made
}
