package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue/storekit"
)

// slotNote is what a SlotStore announced to WatchSlots: a release of a
// slot of target (waiter "") or a refusal that put waiter in its line.
type slotNote struct{ target, waiter string }

// testSlots checks a store's concurrency slots (storekit.SlotStore): at most
// limit holders of a target at once, counted per target, even when many
// ask at the same moment; a release frees a slot and is announced; a
// renewal keeps a lease and names the holders that lost theirs; a lease
// expires by the store's clock; bad arguments are refused; and the line
// (testSlotLine). The expiry is awaited with the fake clock advanced and,
// for a store that keeps its own clock (a server's), in real time,
// polling, for at most 10 s. Each holder here asks as a process of its
// own, of the same name.
func testSlots(t *testing.T, h *harness) {
	ss, ok := h.Store.(storekit.SlotStore)
	if !ok {
		t.Skip("the store keeps no concurrency slots (storekit.SlotStore); each process counts its own")
	}
	ctx := context.Background()
	acquire := func(target, holder string, limit int, ttl time.Duration) bool {
		t.Helper()
		ans, err := ss.AcquireSlot(ctx, storekit.SlotRequest{Target: target, Holder: holder, Process: holder, Limit: limit, TTL: ttl, Line: time.Hour})
		if err != nil {
			t.Fatalf("AcquireSlot(%q, %q, %d, %s): %v", target, holder, limit, ttl, err)
		}
		return ans.Granted
	}
	if !acquire("x", "a", 2, time.Hour) || !acquire("x", "b", 2, time.Hour) {
		t.Fatal("a target's first two slots of 2 were refused")
	}
	if acquire("x", "c", 2, time.Hour) {
		t.Fatal("a third slot of 2 was granted")
	}
	if !acquire("y", "c", 1, time.Hour) {
		t.Fatal("another target's slot was refused: slots are counted per target")
	}

	// A release frees a slot, and is announced; c, refused, waits in
	// the line, which the release counts.
	if waiting, err := ss.ReleaseSlot(ctx, "x", "a", "a"); err != nil || waiting != 1 {
		t.Fatalf("ReleaseSlot: %d waiting, %v; want 1 (c)", waiting, err)
	}
	awaitSlotNote(t, h, slotNote{target: "x"})
	if !acquire("x", "c", 2, time.Hour) {
		t.Fatal("the released slot was not granted")
	}
	if waiting, err := ss.ReleaseSlot(ctx, "x", "nobody", "nobody"); err != nil || waiting != 0 {
		t.Fatalf("ReleaseSlot of a holder without a slot: %d waiting, %v; want 0 (c was granted and left the line)", waiting, err)
	}

	// A renewal names the holders without a slot.
	lost, err := ss.RenewSlots(ctx, "x", []string{"b", "a", "c"}, time.Hour)
	if err != nil {
		t.Fatalf("RenewSlots: %v", err)
	}
	if !slices.Equal(lost, []string{"a"}) {
		t.Errorf("RenewSlots lost %q, want [a] (released)", lost)
	}

	// Many at once: exactly the limit get one.
	var granted atomic.Int32
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			h := fmt.Sprint("h", i)
			ans, err := ss.AcquireSlot(ctx, storekit.SlotRequest{Target: "many", Holder: h, Process: h, Limit: 3, TTL: time.Hour, Line: time.Hour})
			if err != nil {
				t.Errorf("AcquireSlot: %v", err)
			}
			if ans.Granted {
				granted.Add(1)
			}
		})
	}
	wg.Wait()
	if g := granted.Load(); g != 3 {
		t.Errorf("20 holders asking at once for 3 slots got %d", g)
	}

	// A lease expires by the store's clock, and its slot goes to another.
	if !acquire("z", "old", 1, 200*time.Millisecond) {
		t.Fatal("the slot was refused")
	}
	if acquire("z", "new", 1, time.Hour) {
		t.Fatal("a slot held (for 200 ms) was granted")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !acquire("z", "new", 1, time.Hour) {
		if time.Now().After(deadline) {
			t.Fatal("a lease of 200 ms had not expired 10 s later")
		}
		h.Clock.Advance(100 * time.Millisecond)
		time.Sleep(20 * time.Millisecond) // polling a server's clock
	}
	if lost, err := ss.RenewSlots(ctx, "z", []string{"old", "new"}, time.Hour); err != nil || !slices.Equal(lost, []string{"old"}) {
		t.Errorf("RenewSlots after the expiry: lost %q, %v; want [old]", lost, err)
	}

	good := storekit.SlotRequest{Target: "t", Holder: "h", Process: "p", Limit: 1, TTL: time.Second, Line: time.Second}
	for _, bad := range []func(r *storekit.SlotRequest){
		func(r *storekit.SlotRequest) { r.Target = "" },
		func(r *storekit.SlotRequest) { r.Holder = "" },
		func(r *storekit.SlotRequest) { r.Process = "" },
		func(r *storekit.SlotRequest) { r.Limit = 0 },
		func(r *storekit.SlotRequest) { r.TTL = 0 },
		func(r *storekit.SlotRequest) { r.Line = 0 },
		func(r *storekit.SlotRequest) { r.Waited = -time.Second },
	} {
		req := good
		bad(&req)
		if _, err := ss.AcquireSlot(ctx, req); err == nil {
			t.Errorf("AcquireSlot(%+v) returned no error", req)
		}
	}
	if _, err := ss.RenewSlots(ctx, "x", []string{"b"}, 0); err == nil {
		t.Error("RenewSlots with a zero ttl returned no error")
	}
	testSlotLine(t, h, ss)
}

// testSlotLine checks the line of the processes waiting for a target's
// slot: a refused process takes its place and the refusal is announced;
// a freed slot goes to the first in the line, not to a process that was
// not waiting nor to one behind; a granted process leaves the line; the
// answers count the others waiting; Waited keeps a place across asks;
// LeaveSlotLine and an expired place (by the store's clock) let the
// others by.
func testSlotLine(t *testing.T, h *harness, ss storekit.SlotStore) {
	ctx := context.Background()
	ask := func(proc, holder string, waited, line time.Duration) storekit.SlotAnswer {
		t.Helper()
		ans, err := ss.AcquireSlot(ctx, storekit.SlotRequest{Target: "line", Holder: holder, Process: proc, Limit: 1,
			TTL: time.Hour, Waited: waited, Line: line})
		if err != nil {
			t.Fatalf("AcquireSlot(%s, %s): %v", proc, holder, err)
		}
		return ans
	}
	release := func(holder, proc string) int {
		t.Helper()
		waiting, err := ss.ReleaseSlot(ctx, "line", holder, proc)
		if err != nil {
			t.Fatalf("ReleaseSlot(%s): %v", holder, err)
		}
		return waiting
	}
	drainSlotNotes(h)
	if ans := ask("A", "a1", 0, time.Hour); !ans.Granted || ans.Waiting != 0 {
		t.Fatalf("the free slot: %+v, want granted, none waiting", ans)
	}
	// B, then C, are refused and wait, in that order; each refusal is
	// announced, and counts the others.
	if ans := ask("B", "b1", 0, time.Hour); ans.Granted || ans.Waiting != 0 {
		t.Fatalf("B: %+v, want refused, no other waiting", ans)
	}
	awaitSlotNote(t, h, slotNote{target: "line", waiter: "B"})
	if ans := ask("C", "c1", 0, time.Hour); ans.Granted || ans.Waiting != 1 {
		t.Fatalf("C: %+v, want refused, 1 other waiting (B)", ans)
	}
	awaitSlotNote(t, h, slotNote{target: "line", waiter: "C"})
	// B asks again, as its waiter does, with how long it has waited:
	// its place is kept.
	if ans := ask("B", "b2", time.Minute, time.Hour); ans.Granted || ans.Waiting != 1 {
		t.Fatalf("B again: %+v, want refused, 1 other waiting (C)", ans)
	}
	if waiting := release("a1", "A"); waiting != 2 {
		t.Fatalf("A's release counts %d waiting, want 2 (B, C)", waiting)
	}
	// The freed slot is B's: not A's (it joins the line, behind B), nor
	// C's (behind B). The places are told apart by Waited, as a fake
	// clock does not move between the asks.
	if ans := ask("A", "a2", 10*time.Second, time.Hour); ans.Granted || ans.Waiting != 2 {
		t.Fatalf("A, not waiting, asking before B and C: %+v, want refused, 2 waiting", ans)
	}
	if ans := ask("C", "c2", time.Minute/2, time.Hour); ans.Granted {
		t.Fatalf("C, behind B, was granted the slot: %+v", ans)
	}
	if ans := ask("B", "b3", time.Minute, time.Hour); !ans.Granted || ans.Waiting != 2 {
		t.Fatalf("B, first in line: %+v, want granted, 2 others waiting (C, A)", ans)
	}
	// B left the line: C is first, then A, and C leaving lets A by.
	if waiting := release("b3", "B"); waiting != 2 {
		t.Fatalf("B's release counts %d waiting, want 2 (C, A)", waiting)
	}
	if err := ss.LeaveSlotLine(ctx, "line", "C"); err != nil {
		t.Fatalf("LeaveSlotLine: %v", err)
	}
	if err := ss.LeaveSlotLine(ctx, "line", "nobody"); err != nil {
		t.Fatalf("LeaveSlotLine of a process not waiting: %v", err)
	}
	if ans := ask("D", "d1", 0, time.Hour); ans.Granted || ans.Waiting != 1 {
		t.Fatalf("D, behind A: %+v, want refused, 1 other waiting (A)", ans)
	}
	if ans := ask("A", "a3", time.Minute/4, time.Hour); !ans.Granted || ans.Waiting != 1 {
		t.Fatalf("A, first once C left: %+v, want granted, 1 other waiting (D)", ans)
	}
	// E's place expires by the store's clock (200 ms): D, behind it,
	// gets the next slot then.
	if ans := ask("E", "e1", time.Hour, 200*time.Millisecond); ans.Granted {
		t.Fatalf("E: %+v, want refused", ans)
	}
	release("a3", "A")
	if ans := ask("D", "d2", 0, time.Hour); ans.Granted {
		t.Fatalf("D, behind E, was granted: %+v", ans)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !ask("D", "d3", time.Second, time.Hour).Granted {
		if time.Now().After(deadline) {
			t.Fatal("E's place in the line, kept for 200 ms, had not expired 10 s later")
		}
		h.Clock.Advance(100 * time.Millisecond)
		time.Sleep(20 * time.Millisecond) // polling a server's clock
	}
	if waiting := release("d3", "D"); waiting != 0 {
		t.Fatalf("D's release counts %d waiting, want 0", waiting)
	}
}

// drainSlotNotes drops the announcements received so far.
func drainSlotNotes(h *harness) {
	for {
		select {
		case <-h.Slots:
		default:
			return
		}
	}
}

// awaitSlotNote waits, at most 10 s, for the store to announce want.
func awaitSlotNote(t *testing.T, h *harness, want slotNote) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case got := <-h.Slots:
			if got == want {
				return
			}
		case <-timeout.C:
			t.Fatalf("%+v not announced to WatchSlots within 10 s", want)
		}
	}
}
