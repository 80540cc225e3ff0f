package storetest

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// Removing jobs: Cancel, CancelMatch and Purge free their keys and groups.

func testCancel(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "ready"})
	add(t, h, queue.Job[Payload]{Key: "later", Group: "g", RunAt: h.Clock.Now().Add(time.Minute)})
	for _, k := range []string{"ready", "later"} {
		n, err := h.Store.Cancel(bg, k)
		if err != nil || n != 1 {
			t.Fatalf("Cancel(%q) = %d, %v; want 1", k, n, err)
		}
	}
	if n, err := h.Store.Cancel(bg, "nope"); err != nil || n != 0 {
		t.Fatalf("Cancel of an unknown key = %d, %v; want 0", n, err)
	}
	h.Clock.Advance(time.Minute)
	promote(t, h)
	noClaim(t, h)
	// Keys and groups are free again.
	add(t, h, queue.Job[Payload]{Key: "ready", Payload: Payload{N: 9}})
	add(t, h, queue.Job[Payload]{Key: "later2", Group: "g", RunAt: h.Clock.Now().Add(time.Minute)})
	if j := claim(t, h); j.Payload.N != 9 {
		t.Fatalf("got %+v", j)
	}
	// A running job's rerun can be cancelled; the running job cannot.
	add(t, h, queue.Job[Payload]{Key: "run"})
	j := claim(t, h)
	add(t, h, queue.Job[Payload]{Key: "run"})
	if n, _ := h.Store.Cancel(bg, "run"); n != 1 {
		t.Fatalf("Cancel of a rerun = %d, want 1", n)
	}
	must(t, "Complete", h.Store.Complete(bg, j))
	noClaim(t, h)
	if st, _ := h.Store.Stats(bg); st.Ready != 0 {
		t.Fatalf("Stats.Ready = %d after cancels, want 0", st.Ready)
	}
}

func testCancelMatch(t *testing.T, h *harness) {
	for _, k := range []string{"h1:a:p1", "h1:b:p1", "h1:a:p2", "h2:a:p1"} {
		add(t, h, queue.Job[Payload]{Key: k})
	}
	add(t, h, queue.Job[Payload]{Key: "h1:c:p1", RunAt: h.Clock.Now().Add(time.Minute)})
	n, err := h.Store.CancelMatch(bg, func(k string) bool { return len(k) > 3 && k[:3] == "h1:" && k[len(k)-3:] == ":p1" })
	if err != nil || n != 3 {
		t.Fatalf("CancelMatch = %d, %v; want 3", n, err)
	}
	var got []string
	for range 2 {
		j := claim(t, h)
		got = append(got, j.Key)
		must(t, "Complete", h.Store.Complete(bg, j))
	}
	sort.Strings(got)
	if fmt.Sprint(got) != "[h1:a:p2 h2:a:p1]" {
		t.Fatalf("left after CancelMatch: %v", got)
	}
	h.Clock.Advance(time.Minute)
	promote(t, h)
	noClaim(t, h)
}

func testPurge(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "a"})
	add(t, h, queue.Job[Payload]{})
	add(t, h, queue.Job[Payload]{Key: "b", RunAt: h.Clock.Now().Add(time.Minute)})
	n, err := h.Store.Purge(bg)
	if err != nil || n != 3 {
		t.Fatalf("Purge = %d, %v; want 3", n, err)
	}
	h.Clock.Advance(time.Minute)
	promote(t, h)
	noClaim(t, h)
	add(t, h, queue.Job[Payload]{Key: "a"})
	add(t, h, queue.Job[Payload]{Key: "b"})
}
