// Package admin inspects and acts on the jobs of a queue: list them by
// state with filters and paging, get one by ID or key, count them, run a
// dead job again, delete or cancel a job (a running one too), pause and
// resume the queue, and act on its targets.
//
// The same API works on every store: a Queue's Admin method returns an
// *Admin over the in-memory store or over its durable store, and New
// wraps a durable store's backend directly (pgstore's Store.Admin()),
// with no queue running, as queuectl does. docs/OPERATIONS.md ("Admin API guarantees")
// says what each action races with and what wins.
package admin

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/queuekit/queue/queuetype"
)

// State is a job's state, as the admin API lists it.
//
// Each state has its order, in which List pages: Ready by (Created, ID),
// first in first out (pgstore lists a job that became ready from a
// schedule or a retry at the time it became ready, the order its claims
// follow; the cursor still carries Created); Scheduled and Waiting by (RunAt, ID); Running,
// Dead, Done and Cancelled by (Updated, ID).
type State string

// The states a job can be listed in.
const (
	Ready     State = "ready"     // queued, to be claimed by a worker
	Scheduled State = "scheduled" // to run at RunAt (durable stores also show deferred jobs here)
	Running   State = "running"   // claimed by a worker
	Waiting   State = "waiting"   // held in process behind a suspended or busy target (in-memory store)
	Dead      State = "dead"      // failed its last attempt, or was refused as permanent
	Done      State = "done"      // completed (durable stores, within retention)
	Cancelled State = "cancelled" // cancelled (durable stores, within retention)
)

// States lists every State in lifecycle order.
var States = []State{Ready, Scheduled, Running, Waiting, Dead, Done, Cancelled}

// valid reports whether s is a known State.
func (s State) valid() bool {
	for _, k := range States {
		if s == k {
			return true
		}
	}
	return false
}

// Errors the admin API returns; match them with errors.Is. Each is
// returned wrapped with the job's ID or the bad value.
var (
	// ErrNotFound: the store holds no job with that ID or key.
	ErrNotFound = errors.New("admin: job not found")
	// ErrState: the job is not in a state that allows the action (retry
	// a job that is not dead or cancelled, delete a running job, cancel
	// an ended job).
	ErrState = errors.New("admin: job is not in a state that allows this")
	// ErrUnsupported: the store does not implement the action (target
	// actions on a store that is not a Targets).
	ErrUnsupported = errors.New("admin: not supported by this store")
	// ErrInvalid: a Query or Filter is malformed (an unknown state, a
	// limit out of bounds, a cursor that does not decode).
	ErrInvalid = errors.New("admin: invalid argument")
)

// JobInfo describes one job.
type JobInfo struct {
	ID          int64     `json:"id"`                   // the job's ID
	Key         string    `json:"key,omitempty"`        // the job's Key, "" if none
	Group       string    `json:"group,omitempty"`      // the job's Group, "" if none
	Target      string    `json:"target,omitempty"`     // the job's Target, "" if none
	Priority    string    `json:"priority,omitempty"`   // the job's priority label
	State       State     `json:"state"`                // the job's state
	Attempt     int       `json:"attempt"`              // attempts made so far
	MaxAttempts int       `json:"max_attempts"`         // attempts allowed (0: the queue's default)
	RunAt       time.Time `json:"run_at,omitzero"`      // when it is due (scheduled and waiting jobs)
	Created     time.Time `json:"created,omitzero"`     // when it was enqueued
	Updated     time.Time `json:"updated,omitzero"`     // when it entered its state
	LastError   string    `json:"last_error,omitempty"` // the cause recorded by its last failed run or refusal
	// Meta is the job's metadata (queue.Job's Meta), empty if none.
	// Unlike the payload it is always filled in: it is small, and it is
	// what an operator looks for (a tenant, a trace ID). Show it escaped,
	// as any text a job's producer chose.
	Meta queuetype.Meta `json:"meta,omitzero"`
	// Payload is the job's payload encoded by the store's codec; nil
	// unless the caller asked for it (Query.Payload, Get's payload).
	Payload []byte `json:"payload,omitempty"`
}

// Filter selects jobs: those in State (required) whose Priority,
// Target and Key match, each when not empty.
type Filter struct {
	State     State  `json:"state"`                // the state to list (required)
	Priority  string `json:"priority,omitempty"`   // exact priority label
	Target    string `json:"target,omitempty"`     // exact target name
	KeyPrefix string `json:"key_prefix,omitempty"` // jobs whose Key starts with it
}

// Cursor is a keyset position in a state's order (see State): At is the
// ordering time of the last job returned, ID its ID. Admin encodes it
// into Page.Next and decodes Query.After; stores receive it decoded.
type Cursor struct {
	At time.Time // the ordering time of the last job returned
	ID int64     // its ID
}

// Query asks List for a page of jobs.
type Query struct {
	Filter
	Oldest  bool   // oldest first; newest first by default
	Limit   int    // jobs per page: 1..1000, 0 for DefaultLimit
	After   string // Page.Next of the previous page; "" for the first page
	Payload bool   // fill JobInfo.Payload
}

// Page is one page of List's answer.
type Page struct {
	Jobs []JobInfo `json:"jobs"` // the jobs, in the state's order
	// Next is the cursor of the next page, to pass as Query.After; ""
	// when this page is the last.
	Next string `json:"next,omitempty"`
	// Partial says the page holds fewer than Limit jobs (maybe none)
	// because the store examined MaxExamined jobs of the state without
	// filling it: Next resumes after the last job examined, and later
	// pages may hold more matches. Only a filtered List can be partial.
	Partial bool `json:"partial,omitempty"`
	// Examined is how many jobs of the state the store read for this
	// page (0 when the store does not implement BoundedLister).
	Examined int `json:"examined,omitempty"`
}

// Page sizes and bounds.
const (
	DefaultLimit = 100  // Query.Limit when 0
	MaxLimit     = 1000 // the largest Query.Limit
	// MaxExamined bounds the jobs of the state a filtered List
	// (Priority, Target or KeyPrefix set) examines per call, so that a
	// rare filter costs at most a bounded walk of the state's order
	// rather than a scan of the whole state: a page that reaches it
	// comes back Partial, with Next set.
	MaxExamined = 10000
)

// Filtered reports whether f selects by more than its state (Priority,
// Target or KeyPrefix set): a store then bounds List's walk by
// MaxExamined.
func (f Filter) Filtered() bool {
	return f.Priority != "" || f.Target != "" || f.KeyPrefix != ""
}

// Admin inspects and acts on the jobs of one store. It validates its
// input, so a Store sees only known states, limits in bounds and cursors
// it produced. It is safe for concurrent use.
type Admin struct {
	s Store
	b BoundedLister // nil when s does not implement BoundedLister
	t Targets       // nil when s does not implement Targets
}

// New returns an Admin over s. When s also implements Targets, the
// target actions work; otherwise they return ErrUnsupported.
func New(s Store) *Admin {
	a := &Admin{s: s}
	if t, ok := s.(Targets); ok {
		a.t = t
	}
	if b, ok := s.(BoundedLister); ok {
		a.b = b
	}
	return a
}

// list lists through the store's ListBounded when it has one.
func (a *Admin) list(ctx context.Context, f Filter, oldest bool, after *Cursor, limit int, payload bool) (Listed, error) {
	if a.b != nil {
		return a.b.ListBounded(ctx, f, oldest, after, limit, payload)
	}
	jobs, err := a.s.List(ctx, f, oldest, after, limit, payload)
	return Listed{Jobs: jobs}, err
}

// checkFilter validates f for List and the *Match actions.
func checkFilter(f Filter) error {
	if !f.State.valid() {
		return fmt.Errorf("%w: state %q: want one of %s", ErrInvalid, string(f.State), stateNames())
	}
	return nil
}

func stateNames() string {
	names := make([]string, len(States))
	for i, s := range States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// List returns a page of the jobs matching q. Paging with Page.Next
// never skips nor repeats a job that stays in its state meanwhile; jobs
// that enter the state after the cursor's position appear on later
// pages, those that leave it do not.
//
// On a store that implements BoundedLister (every store of this module
// and its store modules), a filtered List (Priority, Target or KeyPrefix)
// examines at most MaxExamined jobs of the state per call: when it
// reaches that bound
// before the page is full, the page is Partial, holds the matches found
// (maybe none) and its Next resumes after the last job examined. So a
// short page is the last only when Next is "".
func (a *Admin) List(ctx context.Context, q Query) (Page, error) {
	if err := checkFilter(q.Filter); err != nil {
		return Page{}, err
	}
	limit := q.Limit
	if limit == 0 {
		limit = DefaultLimit
	}
	if limit < 1 || limit > MaxLimit {
		return Page{}, fmt.Errorf("%w: limit %d: want 1..%d (0 for %d)", ErrInvalid, q.Limit, MaxLimit, DefaultLimit)
	}
	var after *Cursor
	if q.After != "" {
		c, err := decodeCursor(q.After, q.State, q.Oldest)
		if err != nil {
			return Page{}, err
		}
		after = &c
	}
	// Ask for one more than the page, so that Next is "" on the last page.
	l, err := a.list(ctx, q.Filter, q.Oldest, after, limit+1, q.Payload)
	if err != nil {
		return Page{}, err
	}
	p := Page{Jobs: l.Jobs, Examined: l.Examined}
	switch {
	case len(l.Jobs) > limit:
		p.Jobs = l.Jobs[:limit]
		p.Next = encodeCursor(q.State, q.Oldest, Position(p.Jobs[limit-1]))
	case l.Stop != nil:
		p.Partial = true
		p.Next = encodeCursor(q.State, q.Oldest, *l.Stop)
	}
	return p, nil
}

// Position returns j's keyset position in its state's order (see State):
// the Cursor a Store compares against.
func Position(j JobInfo) Cursor {
	switch j.State {
	case Ready:
		return Cursor{At: j.Created, ID: j.ID}
	case Scheduled, Waiting:
		return Cursor{At: j.RunAt, ID: j.ID}
	default:
		return Cursor{At: j.Updated, ID: j.ID}
	}
}

// Before reports whether position c comes before d in ascending order
// (time, then ID).
func (c Cursor) Before(d Cursor) bool {
	if !c.At.Equal(d.At) {
		return c.At.Before(d.At)
	}
	return c.ID < d.ID
}

// A cursor is "v1.<state>.<o|n>.<unix nanoseconds>.<id>", base64url
// encoded: opaque to callers, and checked against the query it is
// used with.
func encodeCursor(s State, oldest bool, c Cursor) string {
	dir := "n"
	if oldest {
		dir = "o"
	}
	raw := "v1." + string(s) + "." + dir + "." + strconv.FormatInt(c.At.UnixNano(), 10) + "." + strconv.FormatInt(c.ID, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeCursor(after string, s State, oldest bool) (Cursor, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: cursor %q: %s", ErrInvalid, after, why)
	}
	raw, err := base64.RawURLEncoding.DecodeString(after)
	if err != nil {
		return Cursor{}, bad("not a cursor from Page.Next")
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 5 || parts[0] != "v1" {
		return Cursor{}, bad("not a cursor from Page.Next")
	}
	dir := "n"
	if oldest {
		dir = "o"
	}
	if State(parts[1]) != s || parts[2] != dir {
		return Cursor{}, bad(fmt.Sprintf("made for state %s order %s, used with state %s order %s", parts[1], parts[2], s, dir))
	}
	ns, err1 := strconv.ParseInt(parts[3], 10, 64)
	id, err2 := strconv.ParseInt(parts[4], 10, 64)
	if err1 != nil || err2 != nil {
		return Cursor{}, bad("not a cursor from Page.Next")
	}
	return Cursor{At: time.Unix(0, ns).UTC(), ID: id}, nil
}

// Get returns the job with id, with its payload when payload is true.
// An error wrapping ErrNotFound when the store does not hold it.
func (a *Admin) Get(ctx context.Context, id int64, payload bool) (JobInfo, error) {
	return a.s.Get(ctx, id, payload)
}

// GetKey returns the pending or running job holding key, or else the
// newest ended job with that key the store still holds.
func (a *Admin) GetKey(ctx context.Context, key string, payload bool) (JobInfo, error) {
	if key == "" {
		return JobInfo{}, fmt.Errorf("%w: GetKey: empty key", ErrInvalid)
	}
	return a.s.GetKey(ctx, key, payload)
}

// Counts returns the number of jobs in each state; every State is
// present, zero when the store does not keep that state.
func (a *Admin) Counts(ctx context.Context) (map[State]int, error) {
	m, err := a.s.Counts(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[State]int, len(States))
	for _, s := range States {
		out[s] = m[s]
	}
	return out, nil
}

// Retry makes the dead or cancelled job id ready now, with fresh
// attempts. It fails with an error wrapping the queue's ErrDuplicate
// when another pending or running job holds its key, ErrState when the
// job is in another state, ErrNotFound when it is gone.
func (a *Admin) Retry(ctx context.Context, id int64) error { return a.s.Retry(ctx, id) }

// Delete removes job id (any state but running), releasing its key.
func (a *Admin) Delete(ctx context.Context, id int64) error { return a.s.Delete(ctx, id) }

// Cancel cancels job id: a queued, scheduled or waiting job ends
// cancelled at once; a running job has its context cancelled and ends
// cancelled when its handler returns. An ended job: ErrState.
func (a *Admin) Cancel(ctx context.Context, id int64) error { return a.s.Cancel(ctx, id) }

// Pause stops workers claiming jobs (on every process of a durable
// store); enqueues continue and running jobs run to their end.
func (a *Admin) Pause(ctx context.Context) error { return a.s.Pause(ctx) }

// Resume lets workers claim again after Pause.
func (a *Admin) Resume(ctx context.Context) error { return a.s.Resume(ctx) }

// Paused reports whether the queue is paused.
func (a *Admin) Paused(ctx context.Context) (bool, error) { return a.s.Paused(ctx) }

// RetryMatch retries every job matching f (State Dead or Cancelled; Dead
// when empty), oldest first, page by page, and returns how many it
// made ready. Jobs another caller retried, deleted or pruned meanwhile
// are skipped; jobs refused because their key is taken again are
// skipped too, and reported in the error (wrapping ErrDuplicate) after
// the others are retried.
func (a *Admin) RetryMatch(ctx context.Context, f Filter) (int, error) {
	if f.State == "" {
		f.State = Dead
	}
	if f.State != Dead && f.State != Cancelled {
		return 0, fmt.Errorf("%w: RetryMatch: state %q: want dead or cancelled", ErrInvalid, string(f.State))
	}
	return a.match(ctx, f, "RetryMatch", a.s.Retry)
}

// CancelMatch cancels every job matching f (State Ready, Scheduled,
// Waiting or Running), page by page, and returns how many it cancelled
// (running jobs count when their cancellation was requested). Jobs that
// ended meanwhile are skipped.
func (a *Admin) CancelMatch(ctx context.Context, f Filter) (int, error) {
	switch f.State {
	case Ready, Scheduled, Waiting, Running:
	default:
		return 0, fmt.Errorf("%w: CancelMatch: state %q: want ready, scheduled, waiting or running", ErrInvalid, string(f.State))
	}
	return a.match(ctx, f, "CancelMatch", a.s.Cancel)
}

// match applies act to every job matching f, oldest first.
func (a *Admin) match(ctx context.Context, f Filter, name string, act func(context.Context, int64) error) (int, error) {
	if err := checkFilter(f); err != nil {
		return 0, err
	}
	var (
		n, refused int
		first      error
		after      *Cursor
	)
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		l, err := a.list(ctx, f, true, after, MaxLimit, false)
		if err != nil {
			return n, err
		}
		for _, j := range l.Jobs {
			err := act(ctx, j.ID)
			switch {
			case err == nil:
				n++
			case errors.Is(err, ErrNotFound), errors.Is(err, ErrState):
				// Another caller or a worker got there first.
			case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
				return n, err
			default:
				refused++
				if first == nil {
					first = err
				}
			}
		}
		switch {
		case len(l.Jobs) == MaxLimit:
			c := Position(l.Jobs[len(l.Jobs)-1])
			after = &c
		case l.Stop != nil:
			after = l.Stop
		default:
			return n, matchErr(name, refused, first)
		}
	}
}

// matchErr is match's answer once it has walked every matching job.
func matchErr(name string, refused int, first error) error {
	if refused > 0 {
		return fmt.Errorf("admin: %s: %d of the matching jobs refused, the first: %w", name, refused, first)
	}
	return nil
}

// TargetList returns every target with something to report, by name;
// ErrUnsupported when the store does not know its targets.
func (a *Admin) TargetList(ctx context.Context) ([]TargetInfo, error) {
	if a.t == nil {
		return nil, ErrUnsupported
	}
	return a.t.TargetList(ctx)
}

// Suspend suspends target name for d (the queue's WithSuspend duration
// when 0).
func (a *Admin) Suspend(ctx context.Context, name string, d time.Duration) error {
	if a.t == nil {
		return ErrUnsupported
	}
	if name == "" {
		return fmt.Errorf("%w: Suspend: empty target name", ErrInvalid)
	}
	if d < 0 {
		return fmt.Errorf("%w: Suspend(%q, %s): negative duration", ErrInvalid, name, d)
	}
	return a.t.Suspend(ctx, name, d)
}

// ResumeTarget ends target name's suspension and clears its breaker; on
// a store that holds jobs back for their target (queue.HoldStore), the
// jobs held for it are due at once.
func (a *Admin) ResumeTarget(ctx context.Context, name string) error {
	if a.t == nil {
		return ErrUnsupported
	}
	return a.t.ResumeTarget(ctx, name)
}

// Disable disables target name with reason until Enable.
func (a *Admin) Disable(ctx context.Context, name, reason string) error {
	if a.t == nil {
		return ErrUnsupported
	}
	if name == "" {
		return fmt.Errorf("%w: Disable: empty target name", ErrInvalid)
	}
	return a.t.Disable(ctx, name, reason)
}

// Enable re-enables the disabled target name; when that leaves it free
// to run, the jobs held for it are due at once, as with ResumeTarget.
func (a *Admin) Enable(ctx context.Context, name string) error {
	if a.t == nil {
		return ErrUnsupported
	}
	return a.t.Enable(ctx, name)
}

// HasTargets reports whether the target actions are supported.
func (a *Admin) HasTargets() bool { return a.t != nil }
