package admin

import (
	"context"
	"time"
)

// Store is what an admin backend implements: the durable stores
// (pgstore, redisstore) implement it on their Store, and the queue
// implements it for the in-memory store. Admin validates every input
// before calling a Store, so a Store may trust that f.State is a known
// State, that limit is in 1..MaxLimit+1 (List asks for one job more than
// the page, to know whether another page follows) and that after came
// from a job it returned.
//
// The method set is fixed by issue #23's spec (ADMIN.md): the durable
// stores implement it on a separate branch, so change it only with a
// very good reason, and say so here.
type Store interface {
	// List returns up to limit jobs in f.State matching f's other
	// fields, in the state's order (see State), newest first unless
	// oldest, strictly after the keyset position after (nil: from the
	// start). A job that stays in the state while a caller pages is
	// never skipped nor repeated. Payloads are filled only when payload
	// is true, encoded with the store's codec. A store that implements
	// BoundedLister is listed through it instead (ListAll makes its
	// List from its ListBounded).
	List(ctx context.Context, f Filter, oldest bool, after *Cursor, limit int, payload bool) ([]JobInfo, error)

	// Get returns the job with id, its payload only when payload is
	// true; an error wrapping ErrNotFound when the store does not hold
	// it.
	Get(ctx context.Context, id int64, payload bool) (JobInfo, error)

	// GetKey returns the pending or running job holding key, or else the
	// newest ended job with key the store still holds; an error wrapping
	// ErrNotFound when there is none.
	GetKey(ctx context.Context, key string, payload bool) (JobInfo, error)

	// Counts returns the number of jobs in each state the store holds.
	// States it does not keep (Waiting on a durable store, Done on the
	// in-memory one) are absent or zero.
	Counts(ctx context.Context) (map[State]int, error)

	// Retry makes a dead (or cancelled) job ready now, with Attempt
	// reset to 0 and its Key taken again. When another pending or
	// running job holds the key it returns an error wrapping
	// queuetype.ErrDuplicate (the root package's ErrDuplicate) and the job
	// stays as it was. Any other state: an error wrapping ErrState;
	// an unknown id: ErrNotFound.
	Retry(ctx context.Context, id int64) error

	// Delete removes a ready, scheduled, waiting, dead, done or
	// cancelled job, releasing its key. A running job: an error wrapping
	// ErrState (cancel it instead).
	Delete(ctx context.Context, id int64) error

	// Cancel ends a ready, scheduled or waiting job as cancelled
	// (counted as cancelled). A running job has its context cancelled on
	// whichever process runs it (a durable store through the store,
	// within one lease heartbeat) and it ends as cancelled. An ended
	// job: an error wrapping ErrState.
	Cancel(ctx context.Context, id int64) error

	// Pause stops claims (on every process sharing a durable store);
	// enqueues continue and running jobs run to their end.
	Pause(ctx context.Context) error

	// Resume lets claims start again after Pause.
	Resume(ctx context.Context) error

	// Paused reports whether the queue is paused.
	Paused(ctx context.Context) (bool, error)
}

// BoundedLister is implemented by a Store whose filtered listing costs a
// bounded walk of the state (the in-memory store, pgstore and
// redisstore): Admin lists through ListBounded when the Store implements
// it, and a filtered page may then be Partial.
type BoundedLister interface {
	// ListBounded is List, except that when f has a Priority, Target or
	// KeyPrefix it examines at most MaxExamined jobs of the state,
	// walking its order from after: when it reaches that bound with
	// fewer than limit matches, it returns those it found (maybe none)
	// and sets Listed.Stop to the position of the last job it examined,
	// where the next call resumes. Without a filter every job examined
	// matches, so limit bounds the walk.
	ListBounded(ctx context.Context, f Filter, oldest bool, after *Cursor, limit int, payload bool) (Listed, error)
}

// ListAll is Store.List made from b's ListBounded: it follows Listed.Stop
// until it has limit jobs or the state ends, so its cost is the whole
// walk (for callers of Store.List, which has no partial answer).
func ListAll(ctx context.Context, b BoundedLister, f Filter, oldest bool, after *Cursor, limit int, payload bool) ([]JobInfo, error) {
	var out []JobInfo
	for {
		l, err := b.ListBounded(ctx, f, oldest, after, limit-len(out), payload)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Jobs...)
		if l.Stop == nil || len(out) >= limit {
			return out, nil
		}
		after = l.Stop
	}
}

// Listed is a BoundedLister's answer to ListBounded.
type Listed struct {
	Jobs []JobInfo // the matching jobs, in the state's order, at most limit
	// Examined is how many jobs of the state the store read to find
	// Jobs (at most MaxExamined with a filter); a store may report 0
	// when it cannot tell.
	Examined int
	// Stop, when not nil, says the store stopped at MaxExamined before
	// finding limit matches: the position of the last job it examined,
	// after which the state may hold more matches. Nil when the walk
	// found limit matches or reached the end of the state.
	Stop *Cursor
}

// Targets is implemented by a Store whose queue knows its targets' health
// (the in-memory queue; durable stores later). Admin exposes these
// actions when its Store implements Targets, and returns ErrUnsupported
// otherwise.
type Targets interface {
	// TargetList returns every target with something to report
	// (disabled, suspended, a breaker not closed, failures), by name.
	TargetList(ctx context.Context) ([]TargetInfo, error)
	// Suspend suspends the target for d (the queue's WithSuspend
	// duration when d is 0).
	Suspend(ctx context.Context, name string, d time.Duration) error
	// ResumeTarget ends the target's suspension and clears its breaker
	// and failure count.
	ResumeTarget(ctx context.Context, name string) error
	// Disable disables the target with reason until Enable.
	Disable(ctx context.Context, name string, reason string) error
	// Enable re-enables a disabled target.
	Enable(ctx context.Context, name string) error
}

// TargetInfo is one target's health, as the queue's TargetStatus
// reports it.
type TargetInfo struct {
	Name           string    `json:"name"`                     // the target, as in a job's Target
	SuspendedUntil time.Time `json:"suspended_until,omitzero"` // end of the current suspension; zero if not suspended
	Disabled       bool      `json:"disabled"`                 // disabled until enabled again
	Reason         string    `json:"reason,omitempty"`         // why it was disabled
	DisabledAt     time.Time `json:"disabled_at,omitzero"`     // when it was disabled
	Failures       int       `json:"failures"`                 // consecutive failures
	Breaker        string    `json:"breaker"`                  // closed, open, half-open
	Running        int       `json:"running"`                  // jobs of the target running now
	Parked         int       `json:"parked"`                   // jobs waiting for the target in process
}
