package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// Scheduled jobs: due on time and never early, and requeued when the
// ready jobs are at capacity.

func testSchedule(t *testing.T, h *harness) {
	at := h.Clock.Now().Add(10 * time.Second)
	a := add(t, h, queue.Job[Payload]{RunAt: at, Payload: Payload{N: 1}})
	if !a.Scheduled {
		t.Fatalf("Add: %+v, want scheduled", a)
	}
	add(t, h, queue.Job[Payload]{RunAt: h.Clock.Now().Add(-time.Hour), Payload: Payload{N: 2}}) // past: now
	j := claim(t, h)
	if j.Payload.N != 2 {
		t.Fatalf("got %+v, want the past-due job", j)
	}
	must(t, "Complete", h.Store.Complete(bg, j))
	h.Clock.Advance(9 * time.Second)
	promote(t, h)
	noClaim(t, h)
	h.Clock.Advance(time.Second)
	promote(t, h)
	j = claim(t, h)
	if j.Payload.N != 1 || !j.RunAt.Equal(at) {
		t.Fatalf("got %+v (RunAt %v), want job 1 due %v", j, j.RunAt, at)
	}
	must(t, "Complete", h.Store.Complete(bg, j))
}

// testNeverEarly: no job is claimable before its RunAt, nor a retried or
// deferred job before its new time, whatever the store's timestamp
// precision: a store that keeps times coarser than a nanosecond rounds a
// due time up, never down. Each job is claimable a millisecond after its
// time. The times are set just past whole units (ns, µs, ms), where a
// store that truncates makes a job due early.
func testNeverEarly(t *testing.T, h *harness) {
	// step moves the clock to at + d.
	step := func(at time.Time, d time.Duration) { h.Clock.Advance(at.Add(d).Sub(h.Clock.Now())) }
	// due checks that nothing is claimable a nanosecond before at and
	// returns what is a millisecond after it.
	due := func(at time.Time, what string) queue.Job[Payload] {
		t.Helper()
		step(at, -time.Nanosecond)
		promote(t, h)
		ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
		j, err := h.Store.Claim(ctx)
		cancel()
		if err == nil {
			t.Fatalf("%s: job %d (payload %+v) claimed at %v, before its time %v",
				what, j.ID, j.Payload, h.Clock.Now().Format(time.RFC3339Nano), at.Format(time.RFC3339Nano))
		}
		step(at, time.Millisecond)
		promote(t, h)
		return claim(t, h)
	}
	offsets := []time.Duration{time.Nanosecond, 500 * time.Nanosecond, time.Microsecond + time.Nanosecond,
		500 * time.Microsecond, time.Millisecond - time.Nanosecond, time.Millisecond + time.Nanosecond}
	for i, off := range offsets {
		at := h.Clock.Now().Truncate(time.Second).Add(time.Second + off)
		if a := add(t, h, queue.Job[Payload]{RunAt: at, Payload: Payload{N: i}}); !a.Scheduled {
			t.Fatalf("Add of a job due at %v: %+v, want scheduled", at, a)
		}
		j := due(at, fmt.Sprintf("added, due %v after a whole second", off))
		if j.Payload.N != i {
			t.Fatalf("claimed %+v, want payload %d", j, i)
		}
		if i%2 == 0 {
			must(t, "Complete", h.Store.Complete(bg, j))
			continue
		}
		at = h.Clock.Now().Truncate(time.Second).Add(time.Second + off)
		if i%4 == 1 {
			must(t, "Retry", h.Store.Retry(bg, j, at, errors.New("boom")))
		} else {
			must(t, "Defer", h.Store.Defer(bg, j, at, nil))
		}
		j = due(at, fmt.Sprintf("put back, due %v after a whole second", off))
		if j.Payload.N != i {
			t.Fatalf("claimed %+v, want payload %d", j, i)
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}
}

func testPromoteFull(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Payload: Payload{N: 1}})
	add(t, h, queue.Job[Payload]{Key: "s", Payload: Payload{N: 2}, RunAt: h.Clock.Now().Add(time.Second)})
	h.Clock.Advance(time.Second)
	promote(t, h)
	if !reported(h, queue.EventRequeued, 1) {
		t.Fatal("a due job that did not fit was not reported requeued")
	}
	j := claim(t, h)
	must(t, "Complete", h.Store.Complete(bg, j))
	h.Clock.Advance(9 * time.Second)
	promote(t, h)
	noClaim(t, h) // waits the full requeue delay
	h.Clock.Advance(time.Second)
	promote(t, h)
	if j := claim(t, h); j.Payload.N != 2 {
		t.Fatalf("got %+v, want the requeued job", j)
	}
}
