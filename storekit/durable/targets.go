package durable

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/storekit"
)

// Targets implements admin.Targets for a durable store's own admin
// backend (what queuectl opens), over the store's storekit.TargetStore
// methods: it reads and writes the target health entries (Key "") that
// every running queue of the fleet reloads each second and hears of
// through the store's announcements (see "Fleet state" in
// docs/OPERATIONS.md).
//
// Each action is a read-modify-write of one target's entry: Load, change
// the fields the action owns, Save. It is not atomic against the running
// engines, which write the same entries: the last write of an entry wins,
// as between two engines.
//
// Times come from Now, the store's clock (the queue's Clock once the
// store is bound; the system clock in queuectl). A suspension's end and
// a disabling's time are absolute times that every engine compares with
// its own clock, so a clock that runs ahead of the engines' lengthens a
// suspension by the skew, one that runs behind shortens it.
//
// The failure count, the running and the parked jobs are each process's
// own and not in the store: TargetList reports them as 0.
type Targets struct {
	// Load is the store's LoadTargets; it returns the store's ErrNotBound
	// before the store is bound to its queue.
	Load func(ctx context.Context) ([]storekit.TargetState, error)
	// Save is the store's SaveTargets, which announces the entries.
	Save func(ctx context.Context, states []storekit.TargetState) error
	// Now is called after Load, so it may read what binding set.
	Now func() time.Time
	// Release is the store's queue.HoldStore ReleaseHeld, or nil:
	// ResumeTarget and Enable call it when they leave the target free to
	// run, so that the jobs held back for it are due at once even when
	// no running queue hears of the change.
	Release func(ctx context.Context, target string) (int, error)
}

var _ admin.Targets = Targets{}

// TargetList implements admin.Targets: the targets whose stored health
// has something to report (disabled, suspended, a breaker not closed), by
// name.
func (t Targets) TargetList(ctx context.Context) ([]admin.TargetInfo, error) {
	states, err := t.Load(ctx)
	if err != nil {
		return nil, err
	}
	now := t.Now()
	out := []admin.TargetInfo{} // not nil: JSON lists it as [], as the in-memory queue does
	for i := range states {
		st := &states[i]
		if st.Key != "" {
			continue // a fan-out next-due time
		}
		ti := admin.TargetInfo{Name: st.Target, Disabled: st.Disabled, Reason: st.Reason, DisabledAt: st.DisabledAt,
			Breaker: "closed"}
		if now.Before(st.SuspendedUntil) {
			ti.SuspendedUntil = st.SuspendedUntil
		}
		switch {
		case st.BreakerUntil.IsZero():
		case now.Before(st.BreakerUntil):
			ti.Breaker = "open"
		default:
			ti.Breaker = "half-open"
		}
		if ti.Disabled || !ti.SuspendedUntil.IsZero() || ti.Breaker != "closed" {
			out = append(out, ti)
		}
	}
	slices.SortFunc(out, func(a, b admin.TargetInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Suspend implements admin.Targets: the target is suspended until now+d
// (storekit.DefaultSuspend when d is 0), or until the end of a longer
// suspension it already has, as the engine's Suspend does.
func (t Targets) Suspend(ctx context.Context, name string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%w: Suspend(%q, %s): negative duration", admin.ErrInvalid, name, d)
	}
	if d == 0 {
		d = storekit.DefaultSuspend
	}
	return t.change(ctx, "Suspend", name, func(st *storekit.TargetState, now time.Time) {
		if until := now.Add(d); until.After(st.SuspendedUntil) {
			st.SuspendedUntil = until
		}
	})
}

// ResumeTarget implements admin.Targets: it ends the target's suspension
// and closes its breaker; a disabled target stays disabled (Enable).
func (t Targets) ResumeTarget(ctx context.Context, name string) error {
	return t.change(ctx, "ResumeTarget", name, func(st *storekit.TargetState, _ time.Time) {
		st.SuspendedUntil, st.BreakerUntil = time.Time{}, time.Time{}
	})
}

// Disable implements admin.Targets: the target is disabled with reason,
// cut as the engine cuts it (storekit.ShortReason), from now.
func (t Targets) Disable(ctx context.Context, name, reason string) error {
	if err := checkText("Disable", "reason", reason); err != nil {
		return err
	}
	return t.change(ctx, "Disable", name, func(st *storekit.TargetState, now time.Time) {
		st.Disabled, st.Reason, st.DisabledAt = true, storekit.ShortReason(reason), now
	})
}

// Enable implements admin.Targets: it clears the target's disabling; a
// suspension stays (ResumeTarget).
func (t Targets) Enable(ctx context.Context, name string) error {
	return t.change(ctx, "Enable", name, func(st *storekit.TargetState, _ time.Time) {
		st.Disabled, st.Reason, st.DisabledAt = false, "", time.Time{}
	})
}

// change reads target name's health entry (zero when the store holds
// none: a healthy target), applies fn, and writes it back; an entry left
// empty is deleted. A target that the action leaves free to run (neither
// disabled, suspended nor open) has its held jobs released (Release). The write is announced even when nothing changed, so
// that a process whose view differs from the store hears of it.
func (t Targets) change(ctx context.Context, op, name string, fn func(st *storekit.TargetState, now time.Time)) error {
	if err := checkName(op, name); err != nil {
		return err
	}
	states, err := t.Load(ctx)
	if err != nil {
		return err
	}
	st := storekit.TargetState{Target: name}
	for i := range states {
		if states[i].Target == name && states[i].Key == "" {
			st = states[i]
		}
	}
	now := t.Now()
	fn(&st, now)
	if err := t.Save(ctx, []storekit.TargetState{st}); err != nil {
		return err
	}
	if t.Release != nil && !st.Disabled && !now.Before(st.SuspendedUntil) && !now.Before(st.BreakerUntil) {
		if _, err := t.Release(ctx, name); err != nil {
			return fmt.Errorf("%s(%q): the target is saved, but its held jobs wait for the end of their hold: %w", op, name, err)
		}
	}
	return nil
}

// checkName refuses a target name a store cannot keep: empty, not
// UTF-8, or holding a NUL byte (which PostgreSQL's text refuses, and
// which separates a target from a key in the stores' entry names).
func checkName(op, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s: empty target name", admin.ErrInvalid, op)
	}
	return checkText(op, "target name", name)
}

func checkText(op, what, s string) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s: %s %q is not valid UTF-8", admin.ErrInvalid, op, what, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s: %s %q holds a NUL byte", admin.ErrInvalid, op, what, s)
	}
	return nil
}
