package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// A claimed job's outcomes: Retry, Defer and Dead, and a waiting rerun
// superseding a retry or a deferral.

func testRetry(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 7}})
	j := claim(t, h)
	must(t, "Retry", h.Store.Retry(bg, j, h.Clock.Now().Add(5*time.Second), errors.New("boom")))
	addErr(t, h, queue.Job[Payload]{Key: "k"}, queue.ErrDuplicate) // retries keep the key
	noClaim(t, h)
	h.Clock.Advance(5 * time.Second)
	promote(t, h)
	j = claim(t, h)
	if j.Attempt != 2 || j.Payload.N != 7 || j.Key != "k" {
		t.Fatalf("retried job: got %+v, want attempt 2", j)
	}
	must(t, "Complete", h.Store.Complete(bg, j))
	add(t, h, queue.Job[Payload]{Key: "k"})
}

func testSuperseded(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 1}})
	j := claim(t, h)
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 2}})
	if err := h.Store.Retry(bg, j, h.Clock.Now().Add(time.Minute), errors.New("boom")); !errors.Is(err, storekit.ErrSuperseded) {
		t.Fatalf("Retry with a waiting rerun = %v, want ErrSuperseded", err)
	}
	r := claim(t, h)
	if r.Payload.N != 2 {
		t.Fatalf("got %+v, want the rerun", r)
	}
	must(t, "Complete", h.Store.Complete(bg, r))
	h.Clock.Advance(2 * time.Minute)
	promote(t, h)
	noClaim(t, h)
}

func testDefer(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 1}})
	j := claim(t, h)
	must(t, "Defer", h.Store.Defer(bg, j, h.Clock.Now(), nil))
	promote(t, h)
	j = claim(t, h)
	if j.Attempt != 1 {
		t.Fatalf("deferred job: attempt %d, want 1 (Defer uses no attempt)", j.Attempt)
	}
	must(t, "Defer", h.Store.Defer(bg, j, h.Clock.Now().Add(time.Minute), errors.New("retry in 1 minute")))
	noClaim(t, h)
	h.Clock.Advance(time.Minute)
	promote(t, h)
	j = claim(t, h)
	must(t, "Complete", h.Store.Complete(bg, j))
}

// testDeferSuperseded: a coalesced rerun waiting for its key supersedes a
// Defer of the running job, as it does a Retry: the deferred job is
// dropped (ErrSuperseded, which the queue counts as cancelled) and the
// rerun, the newer job, becomes ready at once. Both a deferral to now (a
// shutdown putting a job back) and a later one (RetryAfter, a suspended
// target) are covered.
func testDeferSuperseded(t *testing.T, h *harness) {
	ctx := bg
	for i, delay := range []time.Duration{0, time.Minute} {
		key := fmt.Sprint("k", i)
		add(t, h, queue.Job[Payload]{Key: key, Payload: Payload{N: 1}})
		j := claim(t, h)
		if a := add(t, h, queue.Job[Payload]{Key: key, Payload: Payload{N: 2}}); !a.Coalesced {
			t.Fatalf("Add of a running key: %+v, want Coalesced", a)
		}
		err := h.Store.Defer(ctx, j, h.Clock.Now().Add(delay), errors.New("retry in"))
		if !errors.Is(err, storekit.ErrSuperseded) {
			t.Fatalf("Defer (by %v) with a waiting rerun = %v, want ErrSuperseded", delay, err)
		}
		// Ready or, for a store that claims ahead for its workers (pgstore
		// claims in the transaction that records an outcome), running.
		if st := stats(t, h); st.Ready+st.Running != 1 || st.Scheduled != 0 || st.Waiting != 0 || st.PendingKeys != 1 {
			t.Fatalf("after a superseded Defer: %+v; want the rerun ready, nothing scheduled or waiting, one key", st)
		}
		r := claim(t, h)
		if r.Key != key || r.Payload.N != 2 || r.Attempt != 1 {
			t.Fatalf("claimed %+v; want the rerun (payload 2) at attempt 1", r)
		}
		if err := h.Store.Complete(ctx, r); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		h.Clock.Advance(2 * delay)
		promote(t, h)
		noClaim(t, h)                           // the deferred job is gone for good
		add(t, h, queue.Job[Payload]{Key: key}) // and its key is free
		j = claim(t, h)
		if err := h.Store.Complete(ctx, j); err != nil {
			t.Fatalf("Complete: %v", err)
		}
	}
}

func testDead(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "k"})
	j := claim(t, h)
	must(t, "Dead", h.Store.Dead(bg, j, errors.New("fatal")))
	add(t, h, queue.Job[Payload]{Key: "k"}) // the key is free again
}
