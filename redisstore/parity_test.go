package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// The tests in this file state store behaviour that the conformance suite
// (queuetest.RunStoreTests) does not check yet. Each runs against the
// in-memory store, the reference semantics, and against this store, so
// that a difference shows as one of the two failing. They are written as
// the suite's tests are (a harness with a fake clock, a store that was
// given StoreConfig), so that they can move to queuetest unchanged.

// parityHarness is a started store bound to the suite's configuration.
type parityHarness struct {
	Store  queue.Store[queuetest.Payload]
	Clock  *queuetest.FakeClock
	Events *queuetest.EventLog
}

var parityEpoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// runParity runs test against the in-memory store and this store, each
// configured by queuetest.StoreConfig (capacity 100 unless mutate changes
// it).
func runParity(t *testing.T, test func(t *testing.T, h *parityHarness), mutate ...func(*queue.StoreConfig)) {
	t.Helper()
	stores := []struct {
		name string
		make func(t *testing.T) queue.Store[queuetest.Payload]
	}{
		{"memory", func(*testing.T) queue.Store[queuetest.Payload] { return queue.NewMemoryStore[queuetest.Payload]() }},
		{"redis", func(t *testing.T) queue.Store[queuetest.Payload] {
			c := needRedis(t)
			s, err := New[queuetest.Payload](c, WithPrefix(testPrefix(t, c)))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			h := &parityHarness{Store: st.make(t), Clock: queuetest.NewFakeClock(parityEpoch), Events: &queuetest.EventLog{}}
			cfg := queuetest.StoreConfig("parity", 100, h.Clock, h.Events.Report)
			for _, m := range mutate {
				m(&cfg)
			}
			if err := h.Store.Init(cfg); err != nil {
				t.Fatalf("Init: %v", err)
			}
			if err := h.Store.Start(context.Background()); err != nil {
				t.Fatalf("Start: %v", err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := h.Store.Close(ctx); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			test(t, h)
		})
	}
}

func (h *parityHarness) add(t *testing.T, j queue.Job[queuetest.Payload]) queue.Added {
	t.Helper()
	a, err := h.Store.Add(context.Background(), j)
	if err != nil {
		t.Fatalf("Add(%+v): %v", j, err)
	}
	return a
}

func (h *parityHarness) claim(t *testing.T) queue.Job[queuetest.Payload] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j, err := h.Store.Claim(ctx)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return j
}

// noClaim checks that no job is ready. Nothing signals "no job": the
// Claim is given 150ms, as the conformance suite's noClaim does.
func (h *parityHarness) noClaim(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	if j, err := h.Store.Claim(ctx); err == nil {
		t.Fatalf("Claim returned job %d (key %q, payload %+v); want none ready", j.ID, j.Key, j.Payload)
	}
}

func (h *parityHarness) promote(t *testing.T) {
	t.Helper()
	if _, err := h.Store.PromoteDue(context.Background()); err != nil {
		t.Fatalf("PromoteDue: %v", err)
	}
}

func (h *parityHarness) stats(t *testing.T) queue.StoreStats {
	t.Helper()
	st, err := h.Store.Stats(context.Background())
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// TestParityDeferSuperseded: a coalesced rerun waiting for its key
// supersedes a Defer of the running job, as it does a Retry: the deferred
// job is dropped (ErrSuperseded, which the queue counts as cancelled) and
// the rerun, the newer job, becomes ready at once. Redis used to keep the
// deferred job, which then ran again at its time with its older payload,
// and only after it the rerun. Both a deferral to now (a shutdown putting
// a job back) and a later one (RetryAfter, a suspended target) are
// covered.
func TestParityDeferSuperseded(t *testing.T) {
	runParity(t, func(t *testing.T, h *parityHarness) {
		ctx := context.Background()
		for i, delay := range []time.Duration{0, time.Minute} {
			key := fmt.Sprint("k", i)
			h.add(t, queue.Job[queuetest.Payload]{Key: key, Payload: queuetest.Payload{N: 1}})
			j := h.claim(t)
			if a := h.add(t, queue.Job[queuetest.Payload]{Key: key, Payload: queuetest.Payload{N: 2}}); !a.Coalesced {
				t.Fatalf("Add of a running key: %+v, want Coalesced", a)
			}
			err := h.Store.Defer(ctx, j, h.Clock.Now().Add(delay), errors.New("retry in"))
			if !errors.Is(err, queue.ErrSuperseded) {
				t.Fatalf("Defer (by %v) with a waiting rerun = %v, want ErrSuperseded", delay, err)
			}
			if st := h.stats(t); st.Ready != 1 || st.Scheduled != 0 || st.Waiting != 0 || st.PendingKeys != 1 {
				t.Fatalf("after a superseded Defer: %+v; want the rerun ready, nothing scheduled or waiting, one key", st)
			}
			r := h.claim(t)
			if r.Key != key || r.Payload.N != 2 || r.Attempt != 1 {
				t.Fatalf("claimed %+v; want the rerun (payload 2) at attempt 1", r)
			}
			if err := h.Store.Complete(ctx, r); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			h.Clock.Advance(2 * delay)
			h.promote(t)
			h.noClaim(t)                                     // the deferred job is gone for good
			h.add(t, queue.Job[queuetest.Payload]{Key: key}) // and its key is free
			j = h.claim(t)
			if err := h.Store.Complete(ctx, j); err != nil {
				t.Fatalf("Complete: %v", err)
			}
		}
	})
}

// TestParityGroupHeldOnlyByAddedJob: a group holds the one scheduled job
// Enqueue accepted for it, until that job is due; a retried or deferred
// job, and a coalesced rerun, do not take the group. Redis used to let
// each of them take a free group, so that a later scheduled job of the
// group was refused as a duplicate.
func TestParityGroupHeldOnlyByAddedJob(t *testing.T) {
	runParity(t, func(t *testing.T, h *parityHarness) {
		ctx := context.Background()
		later := h.Clock.Now().Add(time.Minute)
		type job = queue.Job[queuetest.Payload]
		// A retry and a deferral of jobs of groups g1 and g2.
		h.add(t, job{Key: "r", Group: "g1"})
		h.add(t, job{Key: "d", Group: "g2"})
		j := h.claim(t)
		if err := h.Store.Retry(ctx, j, later, errors.New("boom")); err != nil {
			t.Fatalf("Retry: %v", err)
		}
		j = h.claim(t)
		if err := h.Store.Defer(ctx, j, later, nil); err != nil {
			t.Fatalf("Defer: %v", err)
		}
		// A rerun of group g3, scheduled once its running key ends.
		h.add(t, job{Key: "c"})
		j = h.claim(t)
		if a := h.add(t, job{Key: "c", Group: "g3", RunAt: later}); !a.Coalesced {
			t.Fatalf("Add of a running key: %+v, want coalesced", a)
		}
		if err := h.Store.Complete(ctx, j); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if st := h.stats(t); st.Scheduled != 3 {
			t.Fatalf("Stats = %+v; want the retry, the deferral and the rerun scheduled", st)
		}
		for _, g := range []string{"g1", "g2", "g3"} {
			if a := h.add(t, job{Key: "new-" + g, Group: g, RunAt: later}); !a.Scheduled {
				t.Fatalf("Add of a scheduled job of group %s: %+v, want scheduled", g, a)
			}
		}
		// The groups are held now, by the jobs Add scheduled.
		for _, g := range []string{"g1", "g2", "g3"} {
			if _, err := h.Store.Add(ctx, job{Key: "dup-" + g, Group: g, RunAt: later}); !errors.Is(err, queue.ErrDuplicate) {
				t.Fatalf("a second scheduled job of group %s = %v, want ErrDuplicate", g, err)
			}
		}
	})
}

// TestParityGroupFreedWhenDue: a scheduled job gives its group up when it
// is due, even when it finds the ready jobs at capacity and waits another
// RequeueDelay. Redis kept the group until the job reached its ready list.
func TestParityGroupFreedWhenDue(t *testing.T) {
	runParity(t, func(t *testing.T, h *parityHarness) {
		h.add(t, queue.Job[queuetest.Payload]{Payload: queuetest.Payload{N: 1}}) // fills the capacity
		h.add(t, queue.Job[queuetest.Payload]{Key: "s", Group: "g", RunAt: h.Clock.Now().Add(time.Second)})
		h.Clock.Advance(time.Second)
		h.promote(t)
		if h.Events.Count(queue.EventRequeued) != 1 {
			t.Fatal("the due job that did not fit was not requeued")
		}
		if a := h.add(t, queue.Job[queuetest.Payload]{Key: "t", Group: "g", RunAt: h.Clock.Now().Add(time.Minute)}); !a.Scheduled {
			t.Fatalf("Add of a scheduled job of the requeued job's group: %+v, want scheduled", a)
		}
	}, func(c *queue.StoreConfig) { c.Capacity = 1 })
}
