package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// Leases (stores that implement storekit.Leaser): heartbeats keep a job,
// an expired lease is rescued once.

func testLeases(t *testing.T, h *harness, ttl time.Duration) {
	l, ok := h.Store.(storekit.Leaser)
	if !ok || ttl <= 0 {
		t.Skip("store has no leases")
	}
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 1}})
	add(t, h, queue.Job[Payload]{Key: "k2", Payload: Payload{N: 2}})
	j := claim(t, h)
	j2 := claim(t, h)
	lost, err := l.Heartbeat(bg, []int64{j.ID, j2.ID})
	if err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat = %v, %v; want no lost leases", lost, err)
	}
	// j2 keeps heartbeating; j stops, as if its worker died.
	h.Clock.Advance(ttl / 2)
	if lost, err := l.Heartbeat(bg, []int64{j2.ID}); err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat = %v, %v", lost, err)
	}
	// rescue checks that RescueExpired rescued one job, or that the
	// store's own background rescue did (the event tells).
	rescue := func(events int) {
		t.Helper()
		n, err := l.RescueExpired(bg)
		if err != nil || n > 1 || (n == 0 && !reported(h, queue.EventRescued, events)) ||
			h.Events.Count(queue.EventRescued) != events {
			t.Fatalf("RescueExpired = %d, %v, %d rescues reported; want 1 rescued (%d reported)",
				n, err, h.Events.Count(queue.EventRescued), events)
		}
	}
	h.Clock.Advance(ttl/2 + time.Second)
	rescue(1)
	if lost, _ := l.Heartbeat(bg, []int64{j.ID}); len(lost) != 1 || lost[0] != j.ID {
		t.Fatalf("Heartbeat of a rescued job's lease = %v, want it reported lost", lost)
	}
	promote(t, h)
	r := claim(t, h)
	if r.ID != j.ID || r.Attempt != 2 {
		t.Fatalf("rescued job: got %+v, want job %d at attempt 2", r, j.ID)
	}
	must(t, "Complete", h.Store.Complete(bg, r))
	must(t, "Complete", h.Store.Complete(bg, j2))

	// A job rescued while its key's coalesced rerun waits: the key holds
	// two jobs, and Cancel ends and reports both. The outcome of the run
	// that lost the lease is refused with ErrLeaseLost.
	add(t, h, queue.Job[Payload]{Key: "c", Payload: Payload{N: 3}})
	jc := claim(t, h)
	if a := add(t, h, queue.Job[Payload]{Key: "c", Payload: Payload{N: 4}}); !a.Coalesced {
		t.Fatalf("Add of a running key: %+v, want coalesced", a)
	}
	h.Clock.Advance(ttl + time.Second)
	rescue(2)
	if n, err := h.Store.Cancel(bg, "c"); err != nil || n != 2 {
		t.Fatalf("Cancel of a key holding a rescued job and its rerun = %d, %v; want 2", n, err)
	}
	if err := h.Store.Complete(bg, jc); !errors.Is(err, storekit.ErrLeaseLost) {
		t.Fatalf("Complete of a run whose lease was lost = %v, want an error matching storekit.ErrLeaseLost", err)
	}
	promote(t, h)
	noClaim(t, h)
}
