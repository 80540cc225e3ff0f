package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// The suite's steps: each drives the store once and fails the test,
// naming the step, when the store errs.

// bg is the context of every store call that need not be bounded.
var bg = context.Background()

func add(t *testing.T, h *harness, j queue.Job[Payload]) storekit.Added {
	t.Helper()
	a, err := h.Store.Add(bg, j)
	if err != nil {
		t.Fatalf("Add(%+v): %v", j, err)
	}
	if a.ID == 0 {
		t.Fatalf("Add(%+v): zero ID", j)
	}
	return a
}

func addErr(t *testing.T, h *harness, j queue.Job[Payload], want error) {
	t.Helper()
	if _, err := h.Store.Add(bg, j); !errors.Is(err, want) {
		t.Fatalf("Add(%+v) = %v, want %v", j, err, want)
	}
}

// claim claims one job, failing the test if none comes within 5 s.
func claim(t *testing.T, h *harness) queue.Job[Payload] {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	j, err := h.Store.Claim(ctx)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return j
}

// settle waits, on a store that claims ahead (Settler), until
// the claims the last outcome started have settled, so that a job added
// next stays ready for the test.
func settle(t *testing.T, h *harness) {
	t.Helper()
	if h.settled == nil {
		return
	}
	require.Eventually(t, h.settled, 10*time.Second, time.Millisecond,
		"the store's claim ahead for a worker expected back")
}

// noClaim checks that no job is ready.
func noClaim(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
	defer cancel()
	if j, err := h.Store.Claim(ctx); err == nil {
		t.Fatalf("Claim returned job %d (key %q, payload %+v); want none ready", j.ID, j.Key, j.Payload)
	}
}

// reported reports whether n events of kind were reported within 5 s. A
// store's own background work (a durable store's janitor) may promote due
// jobs too, and report what it did just after PromoteDue returned having
// found nothing left to do: such an event is waited for, by polling, as
// it comes from another goroutine with nothing to wait on.
func reported(h *harness, kind queue.EventKind, n int) bool {
	deadline := time.Now().Add(5 * time.Second)
	for h.Events.Count(kind) < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func promote(t *testing.T, h *harness) int {
	t.Helper()
	n, err := h.Store.PromoteDue(bg)
	if err != nil {
		t.Fatalf("PromoteDue: %v", err)
	}
	return n
}

func stats(t *testing.T, h *harness) storekit.Stats {
	t.Helper()
	st, err := h.Store.Stats(bg)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
