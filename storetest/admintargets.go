package storetest

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/storekit"
)

// targetInfo returns the entry of name in a's TargetList, and whether
// there is one.
func targetInfo(t *testing.T, a *admin.Admin, name string) (admin.TargetInfo, bool) {
	t.Helper()
	ts, err := a.TargetList(context.Background())
	require.NoError(t, err)
	for i := 1; i < len(ts); i++ {
		require.Less(t, ts[i-1].Name, ts[i].Name, "TargetList is sorted by name")
	}
	for _, ti := range ts {
		if ti.Name == name {
			return ti, true
		}
	}
	return admin.TargetInfo{}, false
}

// awaitTarget waits until cond holds on the queue's own view of target
// name (Queue.Target; the zero status while it has none): a change
// written to the store reaches a running queue by the store's
// announcement or its next reload, on the server's time. A hang fails
// after a generous 30 s.
func awaitTarget(t *testing.T, q *queue.Queue[Payload], name, what string, cond func(st queue.TargetStatus) bool) {
	t.Helper()
	var st queue.TargetStatus
	require.Eventually(t, func() bool {
		st, _ = q.Target(name)
		return cond(st)
	}, 30*time.Second, 5*time.Millisecond, "the queue never saw target %q %s (last: %+v)", name, what, st)
}

// adminTargets checks the target actions through the queue's Admin (the
// engine's, written through to a TargetStore) and, when the store has an
// admin backend of its own with admin.Targets, through that backend as
// queuectl uses it: each action's effect on TargetList, and the running
// queue applying it.
func adminTargets(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	var own *admin.Admin
	if sa, ok := store.(interface{ Admin() admin.Store }); ok {
		if b := admin.New(sa.Admin()); b.HasTargets() {
			own = b
			_, err := own.TargetList(ctx)
			require.Error(t, err, "the store's admin backend before the store is bound")
		}
	}
	q, _ := adminQueue(t, store, idle)
	start(t, q)
	a := q.Admin()
	require.True(t, a.HasTargets())

	// Through the queue: TargetList reports what the queue did at once.
	require.NoError(t, a.Suspend(ctx, "q-susp", time.Hour))
	ti, ok := targetInfo(t, a, "q-susp")
	require.True(t, ok, "a target the queue suspended is listed")
	require.True(t, ti.SuspendedUntil.After(time.Now().Add(59*time.Minute)), "suspended for an hour: %+v", ti)
	require.NoError(t, a.Disable(ctx, "q-dis", "maintenance"))
	ti, ok = targetInfo(t, a, "q-dis")
	require.True(t, ok)
	require.True(t, ti.Disabled)
	require.Equal(t, "maintenance", ti.Reason)
	require.NoError(t, a.ResumeTarget(ctx, "q-susp"))
	require.NoError(t, a.Enable(ctx, "q-dis"))
	for _, name := range []string{"q-susp", "q-dis"} {
		_, ok = targetInfo(t, a, name)
		require.False(t, ok, "%s is healthy again", name)
	}
	require.ErrorIs(t, a.Suspend(ctx, "", time.Second), admin.ErrInvalid)
	require.ErrorIs(t, a.Suspend(ctx, "x", -time.Second), admin.ErrInvalid)
	require.ErrorIs(t, a.Disable(ctx, "", "r"), admin.ErrInvalid)

	if own == nil {
		return
	}

	// The queue's own change is written through: the store's backend
	// lists it.
	require.NoError(t, a.Suspend(ctx, "from-q", time.Hour))
	require.Eventually(t, func() bool {
		ti, ok := targetInfo(t, own, "from-q")
		return ok && ti.SuspendedUntil.After(time.Now())
	}, 30*time.Second, 5*time.Millisecond, "the store never listed the queue's suspension")

	// Suspend, then Disable keeps the suspension.
	require.NoError(t, own.Suspend(ctx, "ext", time.Hour))
	ti, ok = targetInfo(t, own, "ext")
	require.True(t, ok)
	require.True(t, ti.SuspendedUntil.After(time.Now().Add(59*time.Minute)), "%+v", ti)
	require.False(t, ti.Disabled)
	require.Equal(t, "closed", ti.Breaker)
	require.Zero(t, ti.Failures+ti.Running+ti.Parked, "process-local counts are 0")
	awaitTarget(t, q, "ext", "suspended", func(st queue.TargetStatus) bool { return !st.SuspendedUntil.IsZero() })

	long := strings.Repeat("é", 200) // 400 bytes: cut at a character boundary
	require.NoError(t, own.Disable(ctx, "ext", long))
	ti, ok = targetInfo(t, own, "ext")
	require.True(t, ok)
	require.True(t, ti.Disabled)
	require.False(t, ti.DisabledAt.IsZero())
	require.False(t, ti.SuspendedUntil.IsZero(), "Disable keeps the suspension")
	require.LessOrEqual(t, len(ti.Reason), 256)
	require.True(t, utf8.ValidString(ti.Reason), "%q", ti.Reason)
	require.True(t, strings.HasSuffix(ti.Reason, "..."), "%q", ti.Reason)
	awaitTarget(t, q, "ext", "disabled", func(st queue.TargetStatus) bool { return st.Disabled && st.Reason == ti.Reason })

	// ResumeTarget ends the suspension, the disabling stays; Enable ends it.
	require.NoError(t, own.ResumeTarget(ctx, "ext"))
	ti, ok = targetInfo(t, own, "ext")
	require.True(t, ok)
	require.True(t, ti.Disabled)
	require.Zero(t, ti.SuspendedUntil)
	awaitTarget(t, q, "ext", "resumed and still disabled", func(st queue.TargetStatus) bool {
		return st.Disabled && st.SuspendedUntil.IsZero()
	})
	require.NoError(t, own.Enable(ctx, "ext"))
	_, ok = targetInfo(t, own, "ext")
	require.False(t, ok, "an enabled, unsuspended target has nothing to report")
	awaitTarget(t, q, "ext", "enabled", func(st queue.TargetStatus) bool { return !st.Disabled && st.SuspendedUntil.IsZero() })

	// A Suspend of 0 is the default WithSuspend, 5 minutes; a shorter
	// one does not cut a longer suspension short.
	before := time.Now()
	require.NoError(t, own.Suspend(ctx, "dflt", 0))
	ti, ok = targetInfo(t, own, "dflt")
	require.True(t, ok)
	require.False(t, ti.SuspendedUntil.Before(before.Add(5*time.Minute)), "%+v", ti)
	require.True(t, ti.SuspendedUntil.Before(time.Now().Add(5*time.Minute+time.Second)), "%+v", ti)
	require.NoError(t, own.Suspend(ctx, "dflt", time.Minute))
	again, _ := targetInfo(t, own, "dflt")
	require.True(t, again.SuspendedUntil.Equal(ti.SuspendedUntil), "%v then %v", ti.SuspendedUntil, again.SuspendedUntil)

	// The breaker, as an engine writes it: open before BreakerUntil,
	// half-open after; ResumeTarget closes it.
	if ts, ok := store.(storekit.TargetStore); ok {
		require.NoError(t, ts.SaveTargets(ctx, []storekit.TargetState{
			{Target: "brk-open", BreakerUntil: time.Now().Add(time.Hour)},
			{Target: "brk-half", BreakerUntil: time.Now().Add(-time.Second)},
		}))
		ti, _ = targetInfo(t, own, "brk-open")
		require.Equal(t, "open", ti.Breaker)
		ti, _ = targetInfo(t, own, "brk-half")
		require.Equal(t, "half-open", ti.Breaker)
		require.NoError(t, own.ResumeTarget(ctx, "brk-open"))
		_, ok = targetInfo(t, own, "brk-open")
		require.False(t, ok, "ResumeTarget closes the breaker")
	}

	// Resuming or enabling a target the store holds nothing for is a
	// no-op, not an error: its health is not in the store.
	require.NoError(t, own.ResumeTarget(ctx, "never-seen"))
	require.NoError(t, own.Enable(ctx, "never-seen"))

	// Bad names and reasons are refused, naming what is wrong.
	err := own.Suspend(ctx, "", time.Second)
	require.ErrorIs(t, err, admin.ErrInvalid)
	require.ErrorContains(t, err, "empty target name")
	err = own.Disable(ctx, "a\x00b", "r")
	require.ErrorIs(t, err, admin.ErrInvalid)
	require.ErrorContains(t, err, "NUL")
	err = own.Disable(ctx, "x", "bad \xff")
	require.ErrorIs(t, err, admin.ErrInvalid)
	require.ErrorContains(t, err, "reason")
	err = own.ResumeTarget(ctx, "bad \xff")
	require.ErrorIs(t, err, admin.ErrInvalid)
	require.ErrorContains(t, err, "UTF-8")
	require.ErrorIs(t, own.Suspend(ctx, "x", -time.Second), admin.ErrInvalid)
}
