package storetest

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/queuekit/queue/storekit"
)

// testTargetState checks the storekit.TargetStore contract, for stores that
// implement it: entries saved are loaded back field for field (times to
// the microsecond), keyed by Target and Key, the last write wins, an
// empty entry deletes, and every write is announced to WatchTargets.
func testTargetState(t *testing.T, h *harness) {
	ts, ok := h.Store.(storekit.TargetStore)
	if !ok {
		t.Skip("store does not implement storekit.TargetStore")
	}
	ctx := context.Background()
	load := func() map[string]storekit.TargetState {
		t.Helper()
		states, err := ts.LoadTargets(ctx)
		if err != nil {
			t.Fatalf("LoadTargets: %v", err)
		}
		m := map[string]storekit.TargetState{}
		for _, st := range states {
			m[st.Target+"|"+st.Key] = st
		}
		return m
	}
	save := func(states ...storekit.TargetState) {
		t.Helper()
		if err := ts.SaveTargets(ctx, states); err != nil {
			t.Fatalf("SaveTargets: %v", err)
		}
		// Each write is announced, in order (one process saves here).
		for _, want := range states {
			select {
			case got := <-h.Watched:
				if !sameState(got, want) {
					t.Fatalf("WatchTargets got %+v, want %+v", got, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("WatchTargets did not announce %+v", want)
			}
		}
	}
	if m := load(); len(m) != 0 {
		t.Fatalf("a new store holds %d target entries: %v", len(m), m)
	}
	at := epoch.Add(5*time.Minute + 123456*time.Microsecond)
	odd := "tracker:{x}/ü 1" // hash-tag braces, a colon, a space, UTF-8
	entries := []storekit.TargetState{
		{Target: "a", SuspendedUntil: at, BreakerUntil: epoch.Add(30 * time.Second)},
		{Target: odd, Disabled: true, Reason: "404 Not Found", DisabledAt: epoch},
		{Target: "a", Key: "hash1", NextDue: epoch.Add(time.Hour)},
		{Target: odd, Key: "hash1", NextDue: epoch.Add(2 * time.Hour)},
	}
	save(entries...)
	m := load()
	if len(m) != len(entries) {
		t.Fatalf("loaded %d entries, want %d: %v", len(m), len(entries), keys(m))
	}
	for _, want := range entries {
		if got := m[want.Target+"|"+want.Key]; !sameState(got, want) {
			t.Fatalf("loaded %+v, want %+v", got, want)
		}
	}
	// The last write wins; an empty entry deletes; the health entry and
	// the next-due entries of one target are apart.
	save(storekit.TargetState{Target: odd, Disabled: true, Reason: "gone", DisabledAt: epoch.Add(time.Second)},
		storekit.TargetState{Target: "a"},
		storekit.TargetState{Target: "a", Key: "hash1"})
	m = load()
	if len(m) != 2 || m[odd+"|"].Reason != "gone" || m[odd+"|hash1"].NextDue.IsZero() {
		t.Fatalf("after overwrite and deletes: %v", m)
	}
	// Deleting what is not stored is no error.
	save(storekit.TargetState{Target: "never"})
}

// sameState compares entries with times to the microsecond (PostgreSQL's
// precision).
func sameState(a, b storekit.TargetState) bool {
	eq := func(x, y time.Time) bool { return x.Truncate(time.Microsecond).Equal(y.Truncate(time.Microsecond)) }
	return a.Target == b.Target && a.Key == b.Key && a.Disabled == b.Disabled && a.Reason == b.Reason &&
		eq(a.NextDue, b.NextDue) && eq(a.SuspendedUntil, b.SuspendedUntil) && eq(a.DisabledAt, b.DisabledAt) &&
		eq(a.BreakerUntil, b.BreakerUntil)
}

func keys(m map[string]storekit.TargetState) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
