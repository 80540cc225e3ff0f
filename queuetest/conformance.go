package queuetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// Payload is the job payload the conformance suite uses. It survives JSON.
type Payload struct {
	N    int    `json:"n"`
	Note string `json:"note,omitempty"`
}

// StoreFeatures tells RunStoreTests which optional behaviours a store has.
type StoreFeatures struct {
	// Capacity: Add returns ErrQueueFull beyond StoreConfig.Capacity and
	// PromoteDue requeues due jobs that do not fit.
	Capacity bool
	// Drains: after Drain, Claim keeps returning ready jobs until none is
	// left (the in-memory store). Without it Claim may return ErrDrained
	// at once (durable stores, whose backlog other processes share).
	DrainsReady bool
	// LeaseTTL is the lease a Leaser store grants; the suite advances the
	// fake clock past it to test RescueExpired. Zero skips that test.
	LeaseTTL time.Duration
}

// StoreHarness is a store under test with the fake clock it was given.
type StoreHarness struct {
	Store  queue.Store[Payload]
	Clock  *FakeClock
	Events *EventLog
}

// EventLog records the events a store reports through StoreConfig.Report.
type EventLog struct {
	mu     sync.Mutex
	events []queue.Event
}

// Report appends ev; it is a StoreConfig.Report function.
func (l *EventLog) Report(ev queue.Event) {
	l.mu.Lock()
	l.events = append(l.events, ev)
	l.mu.Unlock()
}

// Count returns how many events of kind were reported.
func (l *EventLog) Count(kind queue.EventKind) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ev := range l.events {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

// StoreConfig returns the configuration the suite binds stores to:
// priorities high/normal/low, the given capacity, a 10 s requeue delay,
// coalescing on, 3 attempts, the given clock.
func StoreConfig(name string, capacity int, clk queue.Clock, report func(queue.Event)) queue.StoreConfig {
	return queue.StoreConfig{
		Name:            name,
		Priorities:      queue.DefaultPriorities,
		DefaultPriority: "normal",
		Capacity:        capacity,
		RequeueDelay:    10 * time.Second,
		Coalesce:        true,
		MaxAttempts:     3,
		Clock:           clk,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		Report:          report,
	}
}

// epoch is the suite's fake start time; whole seconds keep durable
// stores' timestamp precision out of the way.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// RunStoreTests runs the Store contract against the stores newStore makes.
// newStore must return a new, empty, un-initialised store each call,
// isolated from every other (its own schema or key prefix); the suite
// calls Init with a FakeClock, Start, and Close at the end of each subtest.
func RunStoreTests(t *testing.T, f StoreFeatures, newStore func(t *testing.T) queue.Store[Payload]) {
	open := func(t *testing.T, mutate ...func(*queue.StoreConfig)) *StoreHarness {
		t.Helper()
		h := &StoreHarness{Store: newStore(t), Clock: NewFakeClock(epoch), Events: &EventLog{}}
		cfg := StoreConfig(fmt.Sprintf("conf_%d", time.Now().UnixNano()%1e9), 100, h.Clock, h.Events.Report)
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
		return h
	}
	for _, c := range []struct {
		name string
		run  func(t *testing.T, h *StoreHarness)
		cfg  []func(*queue.StoreConfig)
		skip bool
	}{
		{name: "AddClaimComplete", run: testAddClaim},
		{name: "InitTwiceRefused", run: testInitTwice},
		{name: "PriorityOrder", run: testPriority},
		{name: "UnknownPriority", run: testUnknownPriority},
		{name: "Schedule", run: testSchedule},
		{name: "DuplicateKey", run: testDuplicate},
		{name: "Coalesce", run: testCoalesce},
		{name: "CoalesceOff", run: testCoalesceOff, cfg: []func(*queue.StoreConfig){func(c *queue.StoreConfig) { c.Coalesce = false }}},
		{name: "GroupDedupe", run: testGroup},
		{name: "Retry", run: testRetry},
		{name: "RetrySuperseded", run: testSuperseded},
		{name: "Defer", run: testDefer},
		{name: "DeferSuperseded", run: testDeferSuperseded},
		{name: "GroupHeldOnlyByAddedJob", run: testGroupHeldOnlyByAddedJob},
		{name: "GroupFreedWhenDue", run: testGroupFreedWhenDue, skip: !f.Capacity, cfg: []func(*queue.StoreConfig){func(c *queue.StoreConfig) { c.Capacity = 1 }}},
		{name: "Dead", run: testDead},
		{name: "Cancel", run: testCancel},
		{name: "CancelMatch", run: testCancelMatch},
		{name: "QueueFull", run: testFull, skip: !f.Capacity, cfg: []func(*queue.StoreConfig){func(c *queue.StoreConfig) { c.Capacity = 2 }}},
		{name: "PromoteFullRequeues", run: testPromoteFull, skip: !f.Capacity, cfg: []func(*queue.StoreConfig){func(c *queue.StoreConfig) { c.Capacity = 1 }}},
		{name: "StatsAndScheduled", run: testStats},
		{name: "Purge", run: testPurge},
		{name: "Drain", run: func(t *testing.T, h *StoreHarness) { testDrain(t, h, f.DrainsReady) }},
		{name: "ConcurrentClaims", run: testConcurrent},
		{name: "Leases", run: func(t *testing.T, h *StoreHarness) { testLeases(t, h, f.LeaseTTL) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.skip {
				t.Skip("store does not have this feature (StoreFeatures)")
			}
			c.run(t, open(t, c.cfg...))
		})
	}
}

var bg = context.Background()

func add(t *testing.T, h *StoreHarness, j queue.Job[Payload]) queue.Added {
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

func addErr(t *testing.T, h *StoreHarness, j queue.Job[Payload], want error) {
	t.Helper()
	if _, err := h.Store.Add(bg, j); !errors.Is(err, want) {
		t.Fatalf("Add(%+v) = %v, want %v", j, err, want)
	}
}

// claim claims one job, failing the test if none comes within 5 s.
func claim(t *testing.T, h *StoreHarness) queue.Job[Payload] {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	j, err := h.Store.Claim(ctx)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return j
}

// noClaim checks that no job is ready.
func noClaim(t *testing.T, h *StoreHarness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, 150*time.Millisecond)
	defer cancel()
	if j, err := h.Store.Claim(ctx); err == nil {
		t.Fatalf("Claim returned job %d (key %q, payload %+v); want none ready", j.ID, j.Key, j.Payload)
	}
}

func promote(t *testing.T, h *StoreHarness) int {
	t.Helper()
	n, err := h.Store.PromoteDue(bg)
	if err != nil {
		t.Fatalf("PromoteDue: %v", err)
	}
	return n
}

func stats(t *testing.T, h *StoreHarness) queue.StoreStats {
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

func testAddClaim(t *testing.T, h *StoreHarness) {
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

// testInitTwice checks that a store bound to a queue refuses a second
// Init (a store value passed to two queue.New calls) and is unchanged by
// it: the refused configuration's capacity of 1 and other name must not
// take effect.
func testInitTwice(t *testing.T, h *StoreHarness) {
	cfg := StoreConfig("conf_other", 1, h.Clock, h.Events.Report)
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

func testPriority(t *testing.T, h *StoreHarness) {
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

func testUnknownPriority(t *testing.T, h *StoreHarness) {
	addErr(t, h, queue.Job[Payload]{Priority: "urgent"}, queue.ErrUnknownPriority)
	noClaim(t, h)
}

func testSchedule(t *testing.T, h *StoreHarness) {
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

func testDuplicate(t *testing.T, h *StoreHarness) {
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 1}})
	addErr(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 2}}, queue.ErrDuplicate)
	addErr(t, h, queue.Job[Payload]{Key: "k", RunAt: h.Clock.Now().Add(time.Minute)}, queue.ErrDuplicate)
	j := claim(t, h)
	if j.Key != "k" || j.Payload.N != 1 {
		t.Fatalf("got %+v", j)
	}
	must(t, "Complete", h.Store.Complete(bg, j))
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 3}})
	if j := claim(t, h); j.Payload.N != 3 {
		t.Fatalf("got %+v, want the re-added job", j)
	}
}

func testCoalesce(t *testing.T, h *StoreHarness) {
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 1}})
	j := claim(t, h)
	a := add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 2}})
	if !a.Coalesced {
		t.Fatalf("Add of a running key: %+v, want Coalesced", a)
	}
	addErr(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 3}}, queue.ErrDuplicate)
	noClaim(t, h) // the rerun waits for the running job
	must(t, "Complete", h.Store.Complete(bg, j))
	r := claim(t, h)
	if r.Payload.N != 2 || r.Key != "k" || r.Attempt != 1 {
		t.Fatalf("rerun: got %+v", r)
	}
	must(t, "Complete", h.Store.Complete(bg, r))
	noClaim(t, h)
}

func testCoalesceOff(t *testing.T, h *StoreHarness) {
	add(t, h, queue.Job[Payload]{Key: "k"})
	j := claim(t, h)
	addErr(t, h, queue.Job[Payload]{Key: "k"}, queue.ErrDuplicate)
	must(t, "Complete", h.Store.Complete(bg, j))
	add(t, h, queue.Job[Payload]{Key: "k"})
}

func testGroup(t *testing.T, h *StoreHarness) {
	later := h.Clock.Now().Add(time.Minute)
	add(t, h, queue.Job[Payload]{Key: "h:f:p1", Group: "h:f", RunAt: later})
	addErr(t, h, queue.Job[Payload]{Key: "h:f:p2", Group: "h:f", RunAt: later}, queue.ErrDuplicate)
	add(t, h, queue.Job[Payload]{Key: "h:f:p3", Group: "h:f"}) // ready jobs are not grouped
	add(t, h, queue.Job[Payload]{Key: "h:g:p1", Group: "h:g", RunAt: later})
	h.Clock.Advance(time.Minute)
	promote(t, h)
	// Once promoted, the group is free again.
	add(t, h, queue.Job[Payload]{Key: "h:f:p4", Group: "h:f", RunAt: later.Add(time.Minute)})
}

func testRetry(t *testing.T, h *StoreHarness) {
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

func testSuperseded(t *testing.T, h *StoreHarness) {
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 1}})
	j := claim(t, h)
	add(t, h, queue.Job[Payload]{Key: "k", Payload: Payload{N: 2}})
	if err := h.Store.Retry(bg, j, h.Clock.Now().Add(time.Minute), errors.New("boom")); !errors.Is(err, queue.ErrSuperseded) {
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

func testDefer(t *testing.T, h *StoreHarness) {
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

func testDead(t *testing.T, h *StoreHarness) {
	add(t, h, queue.Job[Payload]{Key: "k"})
	j := claim(t, h)
	must(t, "Dead", h.Store.Dead(bg, j, errors.New("fatal")))
	add(t, h, queue.Job[Payload]{Key: "k"}) // the key is free again
}

func testCancel(t *testing.T, h *StoreHarness) {
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

func testCancelMatch(t *testing.T, h *StoreHarness) {
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

func testFull(t *testing.T, h *StoreHarness) {
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

func testPromoteFull(t *testing.T, h *StoreHarness) {
	add(t, h, queue.Job[Payload]{Payload: Payload{N: 1}})
	add(t, h, queue.Job[Payload]{Key: "s", Payload: Payload{N: 2}, RunAt: h.Clock.Now().Add(time.Second)})
	h.Clock.Advance(time.Second)
	promote(t, h)
	if h.Events.Count(queue.EventRequeued) == 0 {
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

func testStats(t *testing.T, h *StoreHarness) {
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

func testPurge(t *testing.T, h *StoreHarness) {
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

func testDrain(t *testing.T, h *StoreHarness, drainsReady bool) {
	add(t, h, queue.Job[Payload]{Payload: Payload{N: 1}})
	h.Store.Drain()
	h.Store.Drain() // idempotent
	if drainsReady {
		j := claim(t, h)
		must(t, "Complete", h.Store.Complete(bg, j))
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Second)
	defer cancel()
	if _, err := h.Store.Claim(ctx); !errors.Is(err, queue.ErrDrained) {
		t.Fatalf("Claim after Drain = %v, want ErrDrained", err)
	}
}

func testConcurrent(t *testing.T, h *StoreHarness) {
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

func testLeases(t *testing.T, h *StoreHarness, ttl time.Duration) {
	l, ok := h.Store.(queue.Leaser)
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
	h.Clock.Advance(ttl/2 + time.Second)
	n, err := l.RescueExpired(bg)
	if err != nil || n != 1 {
		t.Fatalf("RescueExpired = %d, %v; want 1", n, err)
	}
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
	if n, err := l.RescueExpired(bg); err != nil || n != 1 {
		t.Fatalf("RescueExpired = %d, %v; want 1", n, err)
	}
	if n, err := h.Store.Cancel(bg, "c"); err != nil || n != 2 {
		t.Fatalf("Cancel of a key holding a rescued job and its rerun = %d, %v; want 2", n, err)
	}
	if err := h.Store.Complete(bg, jc); !errors.Is(err, queue.ErrLeaseLost) {
		t.Fatalf("Complete of a run whose lease was lost = %v, want an error matching queue.ErrLeaseLost", err)
	}
	promote(t, h)
	noClaim(t, h)
}

// testDeferSuperseded: a coalesced rerun waiting for its key supersedes a
// Defer of the running job, as it does a Retry: the deferred job is
// dropped (ErrSuperseded, which the queue counts as cancelled) and the
// rerun, the newer job, becomes ready at once. Both a deferral to now (a
// shutdown putting a job back) and a later one (RetryAfter, a suspended
// target) are covered.
func testDeferSuperseded(t *testing.T, h *StoreHarness) {
	ctx := bg
	for i, delay := range []time.Duration{0, time.Minute} {
		key := fmt.Sprint("k", i)
		add(t, h, queue.Job[Payload]{Key: key, Payload: Payload{N: 1}})
		j := claim(t, h)
		if a := add(t, h, queue.Job[Payload]{Key: key, Payload: Payload{N: 2}}); !a.Coalesced {
			t.Fatalf("Add of a running key: %+v, want Coalesced", a)
		}
		err := h.Store.Defer(ctx, j, h.Clock.Now().Add(delay), errors.New("retry in"))
		if !errors.Is(err, queue.ErrSuperseded) {
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

// testGroupHeldOnlyByAddedJob: a group holds the one scheduled job
// Enqueue accepted for it, until that job is due; a retried or deferred
// job, and a coalesced rerun, do not take the group, so a later
// scheduled job of the group is accepted.
func testGroupHeldOnlyByAddedJob(t *testing.T, h *StoreHarness) {
	ctx := bg
	later := h.Clock.Now().Add(time.Minute)
	type job = queue.Job[Payload]
	// A retry and a deferral of jobs of groups g1 and g2.
	add(t, h, job{Key: "r", Group: "g1"})
	add(t, h, job{Key: "d", Group: "g2"})
	j := claim(t, h)
	if err := h.Store.Retry(ctx, j, later, errors.New("boom")); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	j = claim(t, h)
	if err := h.Store.Defer(ctx, j, later, nil); err != nil {
		t.Fatalf("Defer: %v", err)
	}
	// A rerun of group g3, scheduled once its running key ends.
	add(t, h, job{Key: "c"})
	j = claim(t, h)
	if a := add(t, h, job{Key: "c", Group: "g3", RunAt: later}); !a.Coalesced {
		t.Fatalf("Add of a running key: %+v, want coalesced", a)
	}
	if err := h.Store.Complete(ctx, j); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if st := stats(t, h); st.Scheduled != 3 {
		t.Fatalf("Stats = %+v; want the retry, the deferral and the rerun scheduled", st)
	}
	for _, g := range []string{"g1", "g2", "g3"} {
		if a := add(t, h, job{Key: "new-" + g, Group: g, RunAt: later}); !a.Scheduled {
			t.Fatalf("Add of a scheduled job of group %s: %+v, want scheduled", g, a)
		}
	}
	// The groups are held now, by the jobs Add scheduled.
	for _, g := range []string{"g1", "g2", "g3"} {
		if _, err := h.Store.Add(ctx, job{Key: "dup-" + g, Group: g, RunAt: later}); !errors.Is(err, queue.ErrDuplicate) {
			t.Fatalf("a second scheduled job of group %s = %v, want ErrDuplicate", g, err)
		}
	}
}

// testGroupFreedWhenDue: a scheduled job gives its group up when it
// is due, even when it finds the ready jobs at capacity and waits another
// RequeueDelay.
func testGroupFreedWhenDue(t *testing.T, h *StoreHarness) {
	add(t, h, queue.Job[Payload]{Payload: Payload{N: 1}}) // fills the capacity
	add(t, h, queue.Job[Payload]{Key: "s", Group: "g", RunAt: h.Clock.Now().Add(time.Second)})
	h.Clock.Advance(time.Second)
	promote(t, h)
	if h.Events.Count(queue.EventRequeued) != 1 {
		t.Fatal("the due job that did not fit was not requeued")
	}
	if a := add(t, h, queue.Job[Payload]{Key: "t", Group: "g", RunAt: h.Clock.Now().Add(time.Minute)}); !a.Scheduled {
		t.Fatalf("Add of a scheduled job of the requeued job's group: %+v, want scheduled", a)
	}
}
