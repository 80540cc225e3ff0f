package queuetype

import (
	"strings"
	"time"
)

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

// PriorityNames lists the levels' names, comma-separated, for errors.
func PriorityNames(levels []Priority) string {
	names := make([]string, len(levels))
	for i, p := range levels {
		names[i] = p.Name
	}
	return strings.Join(names, ", ")
}
