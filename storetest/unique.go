package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// Unique windows (Job.UniqueFor): for the window after a job is accepted,
// its key refuses every other job, whether the first is pending, running
// or ended (done, dead or cancelled); Cancel, CancelMatch and Purge leave
// the window; after it, the usual key rules apply. The window is judged
// by the store's time, which the fake clock's Advance moves.

// window is the suite's unique window: long, so that the real time a
// durable store's round trips take never ends one.
const window = time.Hour

func testUniqueWindow(t *testing.T, h *harness) {
	type job = queue.Job[Payload]
	refused := func(key string) {
		t.Helper()
		for _, j := range []job{{Key: key}, {Key: key, UniqueFor: window}, {Key: key, RunAt: h.Clock.Now().Add(time.Minute)}} {
			_, err := h.Store.Add(bg, j)
			var dup *queue.DuplicateError
			if !errors.As(err, &dup) || dup.Key != key {
				t.Fatalf("Add(%+v) within %q's window = %v, want a *DuplicateError naming the key", j, key, err)
			}
		}
	}
	// Pending, then running: a running key's window refuses what
	// coalescing would have kept as its rerun.
	add(t, h, job{Key: "run", UniqueFor: window, Payload: Payload{N: 1}})
	refused("run")
	r := claim(t, h)
	refused("run")
	if st := stats(t, h); st.Waiting != 0 {
		t.Fatalf("Stats.Waiting = %d; a key's window must refuse its rerun, not coalesce it", st.Waiting)
	}
	must(t, "Complete", h.Store.Complete(bg, r))
	settle(t, h)   // a store that claims ahead: see Settler
	refused("run") // done

	add(t, h, job{Key: "dead", UniqueFor: window})
	d := claim(t, h)
	must(t, "Dead", h.Store.Dead(bg, d, errors.New("boom")))
	settle(t, h)
	refused("dead")

	// Cancel, CancelMatch and Purge end the jobs, not the windows.
	add(t, h, job{Key: "cancel", UniqueFor: window})
	add(t, h, job{Key: "match", UniqueFor: window, RunAt: h.Clock.Now().Add(time.Minute)})
	if n, err := h.Store.Cancel(bg, "cancel"); err != nil || n != 1 {
		t.Fatalf("Cancel = %d, %v; want 1", n, err)
	}
	if n, err := h.Store.CancelMatch(bg, func(k string) bool { return k == "match" }); err != nil || n != 1 {
		t.Fatalf("CancelMatch = %d, %v; want 1", n, err)
	}
	add(t, h, job{Key: "purge", UniqueFor: window})
	if n, err := h.Store.Purge(bg); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want 1", n, err)
	}
	for _, k := range []string{"cancel", "match", "purge"} {
		refused(k)
	}

	// A window that outlives nothing: a pending job keeps its key after
	// its window, by the usual rule; and a running one takes a rerun.
	add(t, h, job{Key: "short", UniqueFor: time.Minute})
	add(t, h, job{Key: "rerun", UniqueFor: time.Minute})
	// A second past the window: a durable store's time is its server's,
	// which the fake clock shifts, and the shift is measured a round trip
	// away from the statement.
	h.Clock.Advance(time.Minute + time.Second)
	addErr(t, h, job{Key: "short"}, queue.ErrDuplicate)
	j1 := claim(t, h)
	j2 := claim(t, h)
	if j1.Key != "short" || j2.Key != "rerun" {
		t.Fatalf("claimed %q and %q, want short and rerun", j1.Key, j2.Key)
	}
	if a := add(t, h, job{Key: "rerun", UniqueFor: time.Minute}); !a.Coalesced {
		t.Fatalf("Add of a running key after its window: %+v, want coalesced", a)
	}
	refused("rerun") // the rerun's own window
	must(t, "Complete", h.Store.Complete(bg, j1))
	must(t, "Complete", h.Store.Complete(bg, j2))
	must(t, "Complete", h.Store.Complete(bg, claim(t, h)))
	settle(t, h)

	// After the window every key is free again, and a new window opens.
	h.Clock.Advance(window)
	keys := []string{"run", "dead", "cancel", "match", "purge", "short"}
	for _, k := range keys {
		if a := add(t, h, job{Key: k, UniqueFor: window}); a.Coalesced {
			t.Fatalf("Add of %q after its window: %+v, want a new job", k, a)
		}
	}
	refused("dead")
	if n, err := h.Store.Purge(bg); err != nil || n != len(keys) {
		t.Fatalf("Purge = %d, %v; want %d", n, err, len(keys))
	}
	// A job without a window opens none.
	add(t, h, job{Key: "plain"})
	must(t, "Complete", h.Store.Complete(bg, claim(t, h)))
	settle(t, h)
	add(t, h, job{Key: "plain"})
}
