package queue

import (
	"strings"
	"time"
)

// maxRecentErrors bounds the recent-error ring.
const maxRecentErrors = 50

// maxErrorLen bounds the error text kept per recent error.
const maxErrorLen = 512

// ErrorRecord is one job error kept in the recent-error ring (the last 50
// errors, Stats.RecentErrors). Error is the handler's error text, cut to
// 512 bytes; payloads are never recorded, but an error that quotes its
// payload will show it.
type ErrorRecord struct {
	Time    time.Time `json:"time"`             // when the run ended
	JobID   int64     `json:"job_id"`           // the job's ID
	Key     string    `json:"key,omitempty"`    // the job's pending key, if any
	Target  string    `json:"target,omitempty"` // the job's target, if any
	Attempt int       `json:"attempt"`          // the number of the run that failed
	Error   string    `json:"error"`            // the handler's error text, at most 512 bytes
}

// recordError keeps a job error in the ring.
func (o *observers) recordError(id int64, key, target string, attempt int, err error, now time.Time) {
	msg := err.Error()
	if len(msg) > maxErrorLen {
		msg = strings.ToValidUTF8(msg[:maxErrorLen-3], "") + "..."
	}
	rec := ErrorRecord{Time: now, JobID: id, Key: key, Target: target, Attempt: attempt, Error: msg}
	o.errMu.Lock()
	if len(o.errs) < maxRecentErrors {
		o.errs = append(o.errs, rec)
	} else {
		o.errs[o.errAt%maxRecentErrors] = rec
	}
	o.errAt++
	o.errMu.Unlock()
}

// recentErrors returns the ring, newest first.
func (o *observers) recentErrors() []ErrorRecord {
	o.errMu.Lock()
	defer o.errMu.Unlock()
	n := len(o.errs)
	out := make([]ErrorRecord, n)
	for i := range n {
		// errAt-1 is the newest slot once the ring has wrapped; before
		// that, errAt == n and this is a plain reversal.
		out[i] = o.errs[((o.errAt-1-i)%n+n)%n]
	}
	return out
}
