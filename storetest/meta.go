package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// testMeta: a job's metadata is kept with it and handed back unchanged at
// every claim: the first run, a retry, a deferral, a hold, a rescue after
// a lost lease, a coalesced rerun (which carries the rerun's own
// metadata) and a scheduled job's run. A job without metadata comes back
// with none.
func testMeta(t *testing.T, h *harness, ttl time.Duration) {
	meta := func(pairs ...string) queue.Meta {
		var m queue.Meta
		for i := 0; i < len(pairs); i += 2 {
			m.Set(pairs[i], pairs[i+1])
		}
		return m
	}
	trace := meta("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"tenant", "ÿ-ümlaut-日本",
		"odd", "quote\" backslash\\ newline\n tab\t <script>&amp;",
		"empty", "")
	// A Meta at the limit: the whole MaxMetaSize, in two pairs.
	var big queue.Meta
	big.Set("a", strings.Repeat("x", 2000))
	big.Set(strings.Repeat("k", 128), strings.Repeat("y", 4096-2000-1-128))
	if big.Size() != 4096 || big.Check() != nil {
		t.Fatalf("test setup: big Meta is %d bytes, Check %v", big.Size(), big.Check())
	}
	same := func(what string, got, want queue.Meta) {
		t.Helper()
		if got != want {
			gb, _ := got.MarshalJSON()
			wb, _ := want.MarshalJSON()
			t.Fatalf("%s: Meta %.200s, want %.200s", what, gb, wb)
		}
	}

	// The first run, with and without metadata.
	add(t, h, queue.Job[Payload]{Key: "m1", Meta: trace, Payload: Payload{N: 1}})
	add(t, h, queue.Job[Payload]{Key: "m2", Meta: big, Payload: Payload{N: 2}})
	add(t, h, queue.Job[Payload]{Key: "m3", Payload: Payload{N: 3}})
	got := map[int]queue.Job[Payload]{}
	for range 3 {
		j := claim(t, h)
		got[j.Payload.N] = j
	}
	same("first claim of a job with metadata", got[1].Meta, trace)
	same("first claim of a job with MaxMetaSize of metadata", got[2].Meta, big)
	same("claim of a job without metadata", got[3].Meta, queue.Meta{})

	// A retry, a deferral and a run after them.
	must(t, "Retry", h.Store.Retry(bg, got[1], h.Clock.Now().Add(time.Second), errors.New("boom")))
	must(t, "Defer", h.Store.Defer(bg, got[2], h.Clock.Now(), nil))
	must(t, "Complete", h.Store.Complete(bg, got[3]))
	h.Clock.Advance(time.Second)
	promote(t, h)
	for range 2 {
		j := claim(t, h)
		switch j.Payload.N {
		case 1:
			if j.Attempt != 2 {
				t.Fatalf("retried job: attempt %d, want 2", j.Attempt)
			}
			same("claim after Retry", j.Meta, trace)
		case 2:
			same("claim after Defer", j.Meta, big)
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}

	// A coalesced rerun carries the metadata of the Add that asked for it.
	add(t, h, queue.Job[Payload]{Key: "c", Meta: meta("run", "first"), Payload: Payload{N: 4}})
	j := claim(t, h)
	if a := add(t, h, queue.Job[Payload]{Key: "c", Meta: meta("run", "second"), Payload: Payload{N: 5}}); a.Coalesced {
		must(t, "Complete", h.Store.Complete(bg, j))
		r := claim(t, h)
		same("claim of a coalesced rerun", r.Meta, meta("run", "second"))
		must(t, "Complete", h.Store.Complete(bg, r))
	} else {
		must(t, "Complete", h.Store.Complete(bg, j))
		r := claim(t, h)
		same("claim of a second job for a running key", r.Meta, meta("run", "second"))
		must(t, "Complete", h.Store.Complete(bg, r))
	}

	// A scheduled job.
	add(t, h, queue.Job[Payload]{Key: "s", RunAt: h.Clock.Now().Add(time.Minute), Meta: trace, Payload: Payload{N: 6}})
	noClaim(t, h)
	h.Clock.Advance(time.Minute)
	promote(t, h)
	j = claim(t, h)
	same("claim of a scheduled job", j.Meta, trace)
	must(t, "Complete", h.Store.Complete(bg, j))

	// A hold (stores that hold jobs for a target).
	if hs, ok := h.Store.(storekit.HoldStore[Payload]); ok {
		add(t, h, queue.Job[Payload]{Key: "h", Target: "api", Meta: trace, Payload: Payload{N: 7}})
		j := claim(t, h)
		must(t, "Hold", hs.Hold(bg, j, h.Clock.Now().Add(time.Hour)))
		if _, err := hs.ReleaseHeld(bg, "api"); err != nil {
			t.Fatalf("ReleaseHeld: %v", err)
		}
		promote(t, h)
		j = claim(t, h)
		same("claim after Hold and ReleaseHeld", j.Meta, trace)
		must(t, "Complete", h.Store.Complete(bg, j))
	}

	// A rescue after a lost lease (stores that lease jobs).
	if l, ok := h.Store.(storekit.Leaser); ok && ttl > 0 {
		add(t, h, queue.Job[Payload]{Key: "r", Meta: trace, Payload: Payload{N: 8}})
		j := claim(t, h)
		h.Clock.Advance(ttl + time.Second)
		if _, err := l.RescueExpired(bg); err != nil {
			t.Fatalf("RescueExpired: %v", err)
		}
		promote(t, h)
		r := claim(t, h)
		if r.ID != j.ID {
			t.Fatalf("claimed job %d after the rescue, want %d", r.ID, j.ID)
		}
		same("claim after a rescue", r.Meta, trace)
		must(t, "Complete", h.Store.Complete(bg, r))
	}
	noClaim(t, h)
}

// batchEnqueuer is implemented by stores with a batch enqueue of their own
// (pgstore, redisstore, sqlitestore).
type batchEnqueuer interface {
	EnqueueMany(ctx context.Context, jobs []queue.Job[Payload]) ([]storekit.Added, error)
}

// hookForBatch is the queue's enqueue hook as the BatchEnqueueHook section
// installs it (storekit.Config.EnqueueHook): it records the job's key and
// priority in its Meta, and refuses a job whose key is "refuse".
func hookForBatch(_ context.Context, j *storekit.HookJob) error {
	if j.Key == "refuse" {
		return errors.New("hook says no")
	}
	j.Meta.Set("hooked", j.Key+"/"+j.Priority)
	return nil
}

// testBatchEnqueueHook: a store's own batch enqueue runs the queue's
// enqueue hooks (storekit.Config.EnqueueHook) for every job before it
// stores any: each job is stored with the Meta its hook left, the
// caller's slice is not changed, and a job the hook refuses refuses the
// whole batch, with an error naming it, and stores nothing.
func testBatchEnqueueHook(t *testing.T, h *harness) {
	b, ok := h.Store.(batchEnqueuer)
	if !ok {
		t.Skip("store has no EnqueueMany")
	}
	var kept queue.Meta
	kept.Set("caller", "x")
	jobs := []queue.Job[Payload]{
		{Key: "b1", Payload: Payload{N: 1}},
		{Key: "b2", Meta: kept, Payload: Payload{N: 2}},
		{Payload: Payload{N: 3}},
	}
	added, err := b.EnqueueMany(bg, jobs)
	must(t, "EnqueueMany", err)
	if len(added) != len(jobs) {
		t.Fatalf("EnqueueMany returned %d results for %d jobs", len(added), len(jobs))
	}
	if !jobs[0].Meta.IsZero() || jobs[1].Meta != kept {
		t.Fatal("EnqueueMany changed the caller's jobs")
	}
	want := map[int]map[string]string{
		1: {"hooked": "b1/"},
		2: {"caller": "x", "hooked": "b2/"},
		3: {"hooked": "/"},
	}
	for range len(jobs) {
		j := claim(t, h)
		w := want[j.Payload.N]
		if j.Meta.Len() != len(w) {
			t.Fatalf("job %d: %d Meta pairs, want %v", j.Payload.N, j.Meta.Len(), w)
		}
		for k, v := range w {
			if got := j.Meta.Get(k); got != v {
				t.Fatalf("job %d: Meta %q = %q, want %q", j.Payload.N, k, got, v)
			}
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}

	// A refused job refuses the batch: nothing is stored.
	_, err = b.EnqueueMany(bg, []queue.Job[Payload]{{Key: "b4", Payload: Payload{N: 4}}, {Key: "refuse", Payload: Payload{N: 5}}})
	if err == nil || !strings.Contains(err.Error(), "job 1") || !strings.Contains(err.Error(), "hook says no") {
		t.Fatalf("EnqueueMany with a refused job: %v, want an error naming job 1 and the hook's", err)
	}
	if st := stats(t, h); st.Ready != 0 || st.Scheduled != 0 || st.PendingKeys != 0 {
		t.Fatalf("after a refused batch: %d ready, %d scheduled, %d keys; want nothing stored", st.Ready, st.Scheduled, st.PendingKeys)
	}
}
