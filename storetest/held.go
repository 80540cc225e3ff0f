package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// testHeld: a queue.HoldStore tells the jobs held back for their target
// (Hold) from the jobs scheduled on purpose. ReleaseHeld of a target
// makes its held jobs due now, keeping their keys and attempts; a job of
// the target scheduled for later, a job put back with Defer or Retry,
// and a job held for another target keep their times; a held job that
// has been claimed since is held no more.
func testHeld(t *testing.T, h *harness) {
	hs, ok := h.Store.(storekit.HoldStore[Payload])
	if !ok {
		t.Skip("store is not a queue.HoldStore")
	}
	now := h.Clock.Now()
	later := now.Add(time.Hour)
	add(t, h, queue.Job[Payload]{Key: "held", Target: "api", Payload: Payload{N: 1}})
	add(t, h, queue.Job[Payload]{Key: "deferred", Target: "api", Payload: Payload{N: 2}})
	add(t, h, queue.Job[Payload]{Key: "retried", Target: "api", Payload: Payload{N: 3}})
	add(t, h, queue.Job[Payload]{Key: "elsewhere", Target: "other", Payload: Payload{N: 4}})
	add(t, h, queue.Job[Payload]{Key: "scheduled", Target: "api", RunAt: later, Payload: Payload{N: 5}})
	for range 4 {
		j := claim(t, h)
		switch j.Key {
		case "held", "elsewhere":
			must(t, "Hold", hs.Hold(bg, j, later))
		case "deferred":
			must(t, "Defer", h.Store.Defer(bg, j, later, nil))
		case "retried":
			must(t, "Retry", h.Store.Retry(bg, j, later, errors.New("failed")))
		default:
			t.Fatalf("claimed %+v, not a ready job", j)
		}
	}
	noClaim(t, h)

	n, err := hs.ReleaseHeld(bg, "api")
	must(t, "ReleaseHeld", err)
	if n != 1 {
		t.Fatalf("ReleaseHeld(api) = %d, want 1: the held job only", n)
	}
	promote(t, h)
	j := claim(t, h)
	if j.Key != "held" || j.Attempt != 1 || j.Target != "api" || j.Payload.N != 1 {
		t.Fatalf("claimed %+v after ReleaseHeld; want the held job, at attempt 1 (Hold uses no attempt)", j)
	}
	noClaim(t, h)
	if st := stats(t, h); st.Scheduled != 4 || st.PendingKeys != 5 {
		t.Fatalf("after ReleaseHeld: %+v; want the 4 other jobs scheduled, every key held", st)
	}
	sched, err := h.Store.Scheduled(bg, 10)
	must(t, "Scheduled", err)
	for _, s := range sched {
		if !s.RunAt.Equal(later) {
			t.Fatalf("scheduled %+v; want every job still due at %v", s, later)
		}
	}

	// Claimed again, the job is held no more: a Defer keeps its time.
	must(t, "Defer", h.Store.Defer(bg, j, later, nil))
	if n, err := hs.ReleaseHeld(bg, "api"); err != nil || n != 0 {
		t.Fatalf("ReleaseHeld(api) of a job deferred since = %d, %v; want 0", n, err)
	}
	if n, err := hs.ReleaseHeld(bg, "nobody"); err != nil || n != 0 {
		t.Fatalf("ReleaseHeld of a target with no jobs = %d, %v; want 0", n, err)
	}
	promote(t, h)
	noClaim(t, h)

	// The other target's held job is released by its own ReleaseHeld.
	if n, err := hs.ReleaseHeld(bg, "other"); err != nil || n != 1 {
		t.Fatalf("ReleaseHeld(other) = %d, %v; want 1", n, err)
	}
	promote(t, h)
	if j := claim(t, h); j.Key != "elsewhere" {
		t.Fatalf("claimed %+v; want other's held job", j)
	}
}
