package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// Adding and claiming: IDs, priority order, capacity, counts, Drain and
// concurrent claimers.

func testAddClaim(t *testing.T, h *harness) {
	var ids []int64
	for i := range 3 {
		a := add(t, h, queue.Job[Payload]{Payload: Payload{N: i, Note: "n"}, Target: "t1"})
		if a.Scheduled || a.Coalesced {
			t.Fatalf("Add: %+v, want ready", a)
		}
		ids = append(ids, a.ID)
	}
	if ids[0] == ids[1] || ids[1] == ids[2] {
		t.Fatalf("IDs not distinct: %v", ids)
	}
	for i := range 3 {
		j := claim(t, h)
		if j.Payload.N != i || j.Payload.Note != "n" || j.ID != ids[i] || j.Attempt != 1 || j.Target != "t1" || j.Priority != "normal" {
			t.Fatalf("claim %d: got %+v", i, j)
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}
	noClaim(t, h)
}

func testPriority(t *testing.T, h *harness) {
	for i, p := range []string{"low", "normal", "high", "low", "", "high"} {
		add(t, h, queue.Job[Payload]{Priority: p, Payload: Payload{N: i}})
	}
	var got []int
	for range 6 {
		j := claim(t, h)
		got = append(got, j.Payload.N)
		must(t, "Complete", h.Store.Complete(bg, j))
	}
	want := []int{2, 5, 1, 4, 0, 3}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claim order %v, want %v (high first, FIFO within a priority)", got, want)
	}
}

func testUnknownPriority(t *testing.T, h *harness) {
	addErr(t, h, queue.Job[Payload]{Priority: "urgent"}, queue.ErrUnknownPriority)
	// Every store words it alike, naming the label and the valid ones.
	_, err := h.Store.Add(bg, queue.Job[Payload]{Priority: "urgent"})
	want := fmt.Sprintf("%v %q (the queue's priorities: high, normal, low)", queue.ErrUnknownPriority, "urgent")
	if err == nil || err.Error() != want {
		t.Fatalf("Add with an unknown priority = %v, want the error %q", err, want)
	}
	noClaim(t, h)
}

// testDoneContext: an Add whose ctx is already done is refused with an
// error matching ctx.Err(), stores nothing and takes no key.
func testDoneContext(t *testing.T, h *harness) {
	ctx, cancel := context.WithCancel(bg)
	cancel()
	if _, err := h.Store.Add(ctx, queue.Job[Payload]{Key: "k"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Add with a cancelled ctx = %v, want an error matching context.Canceled", err)
	}
	noClaim(t, h)
	add(t, h, queue.Job[Payload]{Key: "k"})
}

func testFull(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "a"})
	add(t, h, queue.Job[Payload]{})
	addErr(t, h, queue.Job[Payload]{Key: "c"}, queue.ErrQueueFull)
	// A refused job leaves no key behind.
	j := claim(t, h)
	must(t, "Complete", h.Store.Complete(bg, j))
	add(t, h, queue.Job[Payload]{Key: "c"})
	// Scheduled jobs do not count against the ready capacity.
	add(t, h, queue.Job[Payload]{RunAt: h.Clock.Now().Add(time.Hour)})
}

func testStats(t *testing.T, h *harness) {
	add(t, h, queue.Job[Payload]{Key: "r1", Priority: "high"})
	add(t, h, queue.Job[Payload]{Key: "r2"})
	add(t, h, queue.Job[Payload]{Key: "s2", RunAt: h.Clock.Now().Add(2 * time.Minute)})
	add(t, h, queue.Job[Payload]{Key: "s1", Target: "t", RunAt: h.Clock.Now().Add(time.Minute)})
	j := claim(t, h)
	st, err := h.Store.Stats(bg)
	must(t, "Stats", err)
	if st.Ready != 1 || st.Scheduled != 2 || st.Running != 1 || st.PendingKeys != 4 || st.Backend == "" {
		t.Fatalf("Stats = %+v; want ready 1, scheduled 2, running 1, pending keys 4, a backend name", st)
	}
	if h.Store.Len() != 1 {
		t.Fatalf("Len = %d, want 1", h.Store.Len())
	}
	next, err := h.Store.Scheduled(bg, 10)
	must(t, "Scheduled", err)
	if len(next) != 2 || next[0].Key != "s1" || next[1].Key != "s2" || next[0].Target != "t" ||
		!next[0].RunAt.Equal(epoch.Add(time.Minute)) {
		t.Fatalf("Scheduled = %+v; want s1 then s2", next)
	}
	must(t, "Complete", h.Store.Complete(bg, j))
}

func testDrain(t *testing.T, h *harness, drainsReady bool) {
	add(t, h, queue.Job[Payload]{Payload: Payload{N: 1}})
	h.Store.Drain()
	h.Store.Drain() // idempotent
	if drainsReady {
		j := claim(t, h)
		must(t, "Complete", h.Store.Complete(bg, j))
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if _, err := h.Store.Claim(ctx); !errors.Is(err, storekit.ErrDrained) {
		t.Fatalf("Claim after Drain = %v, want ErrDrained", err)
	}
}

func testConcurrent(t *testing.T, h *harness) {
	const jobs, claimers = 60, 6
	for i := range jobs {
		add(t, h, queue.Job[Payload]{Key: fmt.Sprint("k", i), Payload: Payload{N: i}})
	}
	var mu sync.Mutex
	seen := map[int]int{}
	var wg sync.WaitGroup
	for range claimers {
		wg.Go(func() {
			for {
				ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
				j, err := h.Store.Claim(ctx)
				cancel()
				if err != nil {
					return
				}
				mu.Lock()
				seen[j.Payload.N]++
				mu.Unlock()
				if err := h.Store.Complete(bg, j); err != nil {
					t.Errorf("Complete: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != jobs {
		t.Fatalf("claimed %d distinct jobs, want %d", len(seen), jobs)
	}
	for n, c := range seen {
		if c != 1 {
			t.Fatalf("job %d claimed %d times", n, c)
		}
	}
}

// testInitTwice checks that a store bound to a queue refuses a second
// Init (a store value passed to two queue.New calls) and is unchanged by
// it: the refused configuration's capacity of 1 and other name must not
// take effect.
func testInitTwice(t *testing.T, h *harness) {
	cfg := Config("conf_other", 1, h.Clock, h.Events.Report)
	if err := h.Store.Init(cfg); err == nil {
		t.Fatal("a second Init succeeded: a store value passed to two queues must be refused by the second")
	}
	for i := range 2 {
		add(t, h, queue.Job[Payload]{Payload: Payload{N: i}})
	}
	for i := range 2 {
		j := claim(t, h)
		if j.Payload.N != i {
			t.Fatalf("claim %d after the refused Init: got %+v", i, j)
		}
		must(t, "Complete", h.Store.Complete(bg, j))
	}
}

// Weighted gives Config's priorities the shares 6:3:1 (weighted
// dispatch) and room for the jobs the share tests keep ready.
func weighted(c *storekit.Config) {
	c.Priorities = []queue.Priority{{Name: "high", Weight: 0, Share: 6}, {Name: "normal", Weight: 5, Share: 3}, {Name: "low", Weight: 10, Share: 1}}
	c.Capacity = 1000
}

// roomy leaves Config's strict priorities and makes room for the jobs the
// share tests keep ready.
func roomy(c *storekit.Config) { c.Capacity = 1000 }

// claimShares keeps ten jobs of each priority ready, claims n jobs (each
// claimed job completed and replaced by one of its priority) and counts
// the claims per priority.
func claimShares(t *testing.T, h *harness, n int) map[string]int {
	t.Helper()
	for i := range 10 {
		for _, p := range []string{"high", "normal", "low"} {
			add(t, h, queue.Job[Payload]{Priority: p, Payload: Payload{N: i}})
		}
	}
	got := map[string]int{}
	for range n {
		j := claim(t, h)
		got[j.Priority]++
		must(t, "Complete", h.Store.Complete(bg, j))
		add(t, h, queue.Job[Payload]{Priority: j.Priority})
	}
	return got
}

// With shares 6:3:1 and every priority ready, claims go 600:300:100 over
// 1000 claims (within 1.5 %: durable stores claim ahead in batches).
func testWeightedShares(t *testing.T, h *harness) {
	got := claimShares(t, h, 1000)
	t.Logf("claims by priority: %v", got)
	for p, want := range map[string]int{"high": 600, "normal": 300, "low": 100} {
		if d := got[p] - want; d < -15 || d > 15 {
			t.Fatalf("claims by priority %v, want about high:600 normal:300 low:100", got)
		}
	}
}

// With strict priorities (every share 0) the highest priority with ready
// jobs takes every claim.
func testStrictStarves(t *testing.T, h *harness) {
	if got := claimShares(t, h, 300); got["high"] != 300 {
		t.Fatalf("claims by priority %v, want high:300 (strict)", got)
	}
}

// A priority that had no ready jobs saves up no claims: after 50 claims
// of high jobs alone, low jobs that arrive get their share (one claim in
// ten with 6:3:1), not a burst of every claim until they catch up.
func testWeightedNoBurst(t *testing.T, h *harness) {
	for i := range 20 {
		add(t, h, queue.Job[Payload]{Priority: "high", Payload: Payload{N: i}})
	}
	for range 50 {
		j := claim(t, h)
		must(t, "Complete", h.Store.Complete(bg, j))
		add(t, h, queue.Job[Payload]{Priority: "high"})
	}
	for range 10 {
		add(t, h, queue.Job[Payload]{Priority: "low"})
	}
	low := 0
	for range 20 {
		j := claim(t, h)
		if j.Priority == "low" {
			low++
		}
		must(t, "Complete", h.Store.Complete(bg, j))
		add(t, h, queue.Job[Payload]{Priority: j.Priority})
	}
	if low < 1 || low > 3 {
		t.Fatalf("%d of 20 claims went to low after it had been idle, want 2 (its share; 1..3 allowed)", low)
	}
}
