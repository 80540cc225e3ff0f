package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// Text and times a store keeps for its callers as they were given:
// error texts with bytes a database's text type refuses, and RunAt.

// oddError is an error text with a NUL byte and a byte that is not UTF-8,
// as a handler may return from a downstream's reply.
const oddError = "upstream said: a\x00b\xff"

// testErrorText: an outcome whose error text holds a NUL byte or invalid
// UTF-8 is written like any other. A store that refused it would leave
// the job leased, to be rescued and run again.
func testErrorText(t *testing.T, h *harness, ttl time.Duration) {
	add(t, h, queue.Job[Payload]{Key: "dead", Payload: Payload{N: 1}})
	add(t, h, queue.Job[Payload]{Key: "retry", Payload: Payload{N: 2}})
	add(t, h, queue.Job[Payload]{Key: "cancel", Payload: Payload{N: 3}})
	for range 3 {
		j := claim(t, h)
		switch j.Key {
		case "dead":
			must(t, "Dead with an odd error text", h.Store.Dead(bg, j, errors.New(oddError)))
		case "retry":
			must(t, "Retry with an odd error text", h.Store.Retry(bg, j, h.Clock.Now().Add(time.Second), errors.New(oddError)))
		case "cancel":
			if cc, ok := h.Store.(storekit.ClaimCanceller[Payload]); ok {
				must(t, "CancelClaimed with an odd reason", cc.CancelClaimed(bg, j, errors.New(oddError)))
			} else {
				must(t, "Defer with an odd error text", h.Store.Defer(bg, j, h.Clock.Now().Add(time.Second), errors.New(oddError)))
			}
		}
	}
	if st := stats(t, h); st.Running != 0 || st.Ready != 0 {
		t.Fatalf("after the outcomes: %+v; want none running or ready", st)
	}
	if l, ok := h.Store.(storekit.Leaser); ok && ttl > 0 {
		h.Clock.Advance(ttl + time.Second)
		if n, err := l.RescueExpired(bg); err != nil || n != 0 {
			t.Fatalf("RescueExpired = %d, %v; want no job left leased", n, err)
		}
	}
	// The retried job (and, on a store without CancelClaimed, the
	// deferred one) comes back once.
	want := 1
	if _, ok := h.Store.(storekit.ClaimCanceller[Payload]); !ok {
		want = 2
	}
	h.Clock.Advance(time.Second)
	promote(t, h)
	for range want {
		j := claim(t, h)
		if j.Key == "retry" && j.Attempt != 2 || j.Key == "dead" {
			t.Fatalf("claimed %+v; want the retried job at attempt 2 or the deferred one", j)
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}
	noClaim(t, h)
	if st := stats(t, h); st.Running != 0 || st.Ready != 0 || st.Scheduled != 0 || st.PendingKeys != 0 {
		t.Fatalf("at the end: %+v; want nothing left", st)
	}
	if n := h.Events.Count(queue.EventRescued); n != 0 {
		t.Fatalf("%d rescues reported, want none", n)
	}
}

// testRunAtKept: a job's RunAt is handed back at Claim as it was enqueued
// when it is not in the future (a time in the past, now), and zero stays
// zero.
func testRunAtKept(t *testing.T, h *harness) {
	now := h.Clock.Now()
	runAts := []time.Time{now.Add(-time.Hour), now, {}}
	for i, at := range runAts {
		if a := add(t, h, queue.Job[Payload]{RunAt: at, Payload: Payload{N: i}}); a.Scheduled {
			t.Fatalf("Add with RunAt %v (now %v): %+v, want ready", at, now, a)
		}
	}
	for range runAts {
		j := claim(t, h)
		if want := runAts[j.Payload.N]; !j.RunAt.Equal(want) {
			t.Fatalf("claimed job %d: RunAt %v, want %v as enqueued", j.Payload.N, j.RunAt, want)
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}
}
