package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// Keys and groups: duplicates refused, coalesced reruns, one scheduled
// job per group.

func testDuplicate(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 1}})
	addErr(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 2}}, queue.ErrDuplicate)
	addErr(t, h, queue.Job[Payload]{Key: "k", RunAt: h.Clock.Now().Add(time.Minute)}, queue.ErrDuplicate)
	j := claim(t, h)
	if j.Key != "k" || j.Payload.N != 1 {
		t.Fatalf("got %+v", j)
	}
	must(t, "Complete", h.Store.Complete(bg, j))
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 3}})
	if j := claim(t, h); j.Payload.N != 3 {
		t.Fatalf("got %+v, want the re-added job", j)
	}
}

func testCoalesce(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 1}})
	j := claim(t, h)
	a := add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 2}})
	if !a.Coalesced {
		t.Fatalf("Add of a running key: %+v, want Coalesced", a)
	}
	addErr(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 3}}, queue.ErrDuplicate)
	noClaim(t, h) // the rerun waits for the running job
	must(t, "Complete", h.Store.Complete(bg, j))
	r := claim(t, h)
	if r.Payload.N != 2 || r.Key != "k" || r.Attempt != 1 {
		t.Fatalf("rerun: got %+v", r)
	}
	must(t, "Complete", h.Store.Complete(bg, r))
	noClaim(t, h)
}

func testCoalesceOff(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "k"})
	j := claim(t, h)
	addErr(t, h, queue.Job[Payload]{Key: "k"}, queue.ErrDuplicate)
	must(t, "Complete", h.Store.Complete(bg, j))
	add(t, h, queue.Job[Payload]{Key: "k"})
}

func testGroup(t *testing.T, h *harness) {
	later := h.Clock.Now().Add(time.Minute)
	add(t, h, queue.Job[Payload]{Key: "h:f:p1", Group: "h:f", RunAt: later})
	addErr(t, h, queue.Job[Payload]{Key: "h:f:p2", Group: "h:f", RunAt: later}, queue.ErrDuplicate)
	add(t, h, queue.Job[Payload]{Key: "h:f:p3", Group: "h:f"}) // ready jobs are not grouped
	add(t, h, queue.Job[Payload]{Key: "h:g:p1", Group: "h:g", RunAt: later})
	h.Clock.Advance(time.Minute)
	promote(t, h)
	// Once promoted, the group is free again.
	add(t, h, queue.Job[Payload]{Key: "h:f:p4", Group: "h:f", RunAt: later.Add(time.Minute)})
}

// testGroupHeldOnlyByAddedJob: a group holds the one scheduled job
// Enqueue accepted for it, until that job is due; a retried or deferred
// job, and a coalesced rerun, do not take the group, so a later
// scheduled job of the group is accepted.
func testGroupHeldOnlyByAddedJob(t *testing.T, h *harness) {
	ctx := bg
	later := h.Clock.Now().Add(time.Minute)
	type job = queue.Job[Payload]
	// A retry and a deferral of jobs of groups g1 and g2.
	add(t, h, job{Key: "r", Group: "g1"})
	add(t, h, job{Key: "d", Group: "g2"})
	j := claim(t, h)
	if err := h.Store.Retry(ctx, j, later, errors.New("boom")); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	j = claim(t, h)
	if err := h.Store.Defer(ctx, j, later, nil); err != nil {
		t.Fatalf("Defer: %v", err)
	}
	// A rerun of group g3, scheduled once its running key ends.
	add(t, h, job{Key: "c"})
	j = claim(t, h)
	if a := add(t, h, job{Key: "c", Group: "g3", RunAt: later}); !a.Coalesced {
		t.Fatalf("Add of a running key: %+v, want coalesced", a)
	}
	if err := h.Store.Complete(ctx, j); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if st := stats(t, h); st.Scheduled != 3 {
		t.Fatalf("Stats = %+v; want the retry, the deferral and the rerun scheduled", st)
	}
	for _, g := range []string{"g1", "g2", "g3"} {
		if a := add(t, h, job{Key: "new-" + g, Group: g, RunAt: later}); !a.Scheduled {
			t.Fatalf("Add of a scheduled job of group %s: %+v, want scheduled", g, a)
		}
	}
	// The groups are held now, by the jobs Add scheduled.
	for _, g := range []string{"g1", "g2", "g3"} {
		if _, err := h.Store.Add(ctx, job{Key: "dup-" + g, Group: g, RunAt: later}); !errors.Is(err, queue.ErrDuplicate) {
			t.Fatalf("a second scheduled job of group %s = %v, want ErrDuplicate", g, err)
		}
	}
}

// testGroupFreedWhenDue: a scheduled job gives its group up when it
// is due, even when it finds the ready jobs at capacity and waits another
// RequeueDelay.
func testGroupFreedWhenDue(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Payload: Payload{N: 1}}) // fills the capacity
	add(t, h, queue.Job[Payload]{Key: "s", Group: "g", RunAt: h.Clock.Now().Add(time.Second)})
	h.Clock.Advance(time.Second)
	promote(t, h)
	if !reported(h, queue.EventRequeued, 1) || h.Events.Count(queue.EventRequeued) != 1 {
		t.Fatalf("the due job that did not fit was reported requeued %d times, want once",
			h.Events.Count(queue.EventRequeued))
	}
	if a := add(t, h, queue.Job[Payload]{Key: "t", Group: "g", RunAt: h.Clock.Now().Add(time.Minute)}); !a.Scheduled {
		t.Fatalf("Add of a scheduled job of the requeued job's group: %+v, want scheduled", a)
	}
}
