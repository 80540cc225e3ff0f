package storetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
)

// Payload is the job payload the suite stores. It survives JSON, so a
// store with a codec passes it through unchanged.
type Payload struct {
	N    int    `json:"n"`              // tells the suite's jobs apart
	Note string `json:"note,omitempty"` // free text, to check strings survive the store
}

// Features tells Run which optional behaviours a store has; the subtests
// of a behaviour the store lacks are skipped.
type Features struct {
	// Capacity: Add returns ErrQueueFull beyond storekit.Config.Capacity and
	// PromoteDue requeues due jobs that do not fit.
	Capacity bool
	// DrainsReady: after Drain, Claim keeps returning ready jobs until none is
	// left (the in-memory store). Without it Claim may return ErrDrained
	// at once (durable stores, whose backlog other processes share).
	DrainsReady bool
	// LeaseTTL is the lease a Leaser store grants; the suite advances the
	// fake clock past it to test RescueExpired. Zero skips that test.
	LeaseTTL time.Duration
}

// Settler is implemented by a store under test that claims ahead:
// pgstore, as it writes an outcome, claims the next job for the worker it
// expects back and holds it for that worker's next Claim. Settled reports
// that no such claim is pending. Where a test adds jobs after an outcome
// and expects them ready, the suite waits for Settled first: a pending
// claim would take one. A store's own conformance test gives its store
// the method by embedding it in a type of its own (pgstore's does); a
// store that claims only when asked needs none.
type Settler interface {
	// Settled reports that no claim made ahead for a worker expected
	// back from an outcome is pending or running.
	Settled() bool
}

// harness is a store under test with the fake clock it was given.
type harness struct {
	Store  storekit.Store[Payload] // the store, initialised with Clock and Events
	Clock  *queuetest.FakeClock    // the clock the store was given; the suite advances it
	Events *EventLog               // what the store reported through storekit.Config.Report
	// Watched receives what a storekit.TargetStore announces to
	// WatchTargets (registered before Start); nil for other stores.
	Watched chan storekit.TargetState
	// Slots receives what a storekit.SlotStore announces to WatchSlots
	// (registered before Start): releases and refusals; nil for other
	// stores.
	Slots chan slotNote
	// settled is Store's Settled (see Settler); nil for other stores.
	settled func() bool
}

// Config returns the configuration the suite binds stores to, for a
// store's own tests to bind the same way: queue name name, priorities
// high, normal (the default) and low, strict (no shares; the suite's
// WeightedShares subtest gives them shares 6:3:1), the given ready capacity, a 10 s
// requeue delay, coalescing on, 3 attempts, the given clock, a logger that
// discards, and report as storekit.Config.Report (nil is allowed where the
// store accepts it).
func Config(name string, capacity int, clk queue.Clock, report func(queue.Event)) storekit.Config {
	return storekit.Config{
		Name:            name,
		Priorities:      []queue.Priority{{Name: "high", Weight: 0}, {Name: "normal", Weight: 5}, {Name: "low", Weight: 10}},
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

// Run checks the storekit.Store contract, one subtest per behaviour, against
// the stores newStore makes. newStore must return a new, empty,
// un-initialised store each call, isolated from every other (its own
// schema or key prefix); each subtest calls Init with Config and a
// queuetest.FakeClock it advances, then Start, and Close when it ends.
// Features says which optional behaviours to check.
func Run(t *testing.T, f Features, newStore func(t *testing.T) storekit.Store[Payload]) {
	open := func(t *testing.T, mutate ...func(*storekit.Config)) *harness {
		t.Helper()
		h := &harness{Store: newStore(t), Clock: queuetest.NewFakeClock(epoch), Events: &EventLog{}}
		if st, ok := h.Store.(Settler); ok {
			h.settled = st.Settled
		}
		cfg := Config(fmt.Sprintf("conf_%d", time.Now().UnixNano()%1e9), 100, h.Clock, h.Events.Report)
		for _, m := range mutate {
			m(&cfg)
		}
		if err := h.Store.Init(cfg); err != nil {
			t.Fatalf("Init: %v", err)
		}
		if ts, ok := h.Store.(storekit.TargetStore); ok {
			h.Watched = make(chan storekit.TargetState, 1024)
			ts.WatchTargets(func(st storekit.TargetState) { h.Watched <- st })
		}
		if ss, ok := h.Store.(storekit.SlotStore); ok {
			h.Slots = make(chan slotNote, 1024)
			ss.WatchSlots(func(target, waiter string) { h.Slots <- slotNote{target: target, waiter: waiter} })
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
		run  func(t *testing.T, h *harness)
		cfg  []func(*storekit.Config)
		skip bool
	}{
		{name: "AddClaimComplete", run: testAddClaim},
		{name: "InitTwiceRefused", run: testInitTwice},
		{name: "PriorityOrder", run: testPriority},
		{name: "UnknownPriority", run: testUnknownPriority},
		{name: "DoneContext", run: testDoneContext},
		{name: "WeightedShares", run: testWeightedShares, cfg: []func(*storekit.Config){weighted}},
		{name: "WeightedNoBurst", run: testWeightedNoBurst, cfg: []func(*storekit.Config){weighted}},
		{name: "StrictStarves", run: testStrictStarves, cfg: []func(*storekit.Config){roomy}},
		{name: "Schedule", run: testSchedule},
		{name: "NeverEarly", run: testNeverEarly},
		{name: "DuplicateKey", run: testDuplicate},
		{name: "Coalesce", run: testCoalesce},
		{name: "CoalesceOff", run: testCoalesceOff, cfg: []func(*storekit.Config){func(c *storekit.Config) { c.Coalesce = false }}},
		{name: "GroupDedupe", run: testGroup},
		{name: "UniqueWindow", run: testUniqueWindow},
		{name: "Retry", run: testRetry},
		{name: "RetrySuperseded", run: testSuperseded},
		{name: "Defer", run: testDefer},
		{name: "DeferSuperseded", run: testDeferSuperseded},
		{name: "HeldReleased", run: testHeld},
		{name: "GroupHeldOnlyByAddedJob", run: testGroupHeldOnlyByAddedJob},
		{name: "GroupFreedWhenDue", run: testGroupFreedWhenDue, skip: !f.Capacity, cfg: []func(*storekit.Config){func(c *storekit.Config) { c.Capacity = 1 }}},
		{name: "Dead", run: testDead},
		{name: "Cancel", run: testCancel},
		{name: "CancelMatch", run: testCancelMatch},
		{name: "QueueFull", run: testFull, skip: !f.Capacity, cfg: []func(*storekit.Config){func(c *storekit.Config) { c.Capacity = 2 }}},
		{name: "PromoteFullRequeues", run: testPromoteFull, skip: !f.Capacity, cfg: []func(*storekit.Config){func(c *storekit.Config) { c.Capacity = 1 }}},
		{name: "StatsAndScheduled", run: testStats},
		{name: "Purge", run: testPurge},
		{name: "Drain", run: func(t *testing.T, h *harness) { testDrain(t, h, f.DrainsReady) }},
		{name: "ConcurrentClaims", run: testConcurrent},
		{name: "Leases", run: func(t *testing.T, h *harness) { testLeases(t, h, f.LeaseTTL) }},
		{name: "TargetState", run: testTargetState},
		{name: "Admission", run: testAdmission},
		{name: "FleetSize", run: testFleetSize},
		{name: "Slots", run: testSlots},
		{name: "ErrorText", run: func(t *testing.T, h *harness) { testErrorText(t, h, f.LeaseTTL) }},
		{name: "RunAtKept", run: testRunAtKept},
		{name: "OddKeys", run: testOddKeys},
		{name: "Meta", run: func(t *testing.T, h *harness) { testMeta(t, h, f.LeaseTTL) }},
		{name: "BatchEnqueueHook", run: testBatchEnqueueHook, cfg: []func(*storekit.Config){func(c *storekit.Config) { c.EnqueueHook = hookForBatch }}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.skip {
				t.Skip("store does not have this feature (Features)")
			}
			c.run(t, open(t, c.cfg...))
		})
	}
}
