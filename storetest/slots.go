package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue"
)

// testSlots checks a store's concurrency slots (queue.SlotStore): at most
// limit holders of a target at once, counted per target, even when many
// ask at the same moment; a release frees a slot and is announced; a
// renewal keeps a lease and names the holders that lost theirs; a lease
// expires by the store's clock; bad arguments are refused. The expiry is
// awaited with the fake clock advanced and, for a store that keeps its own
// clock (a server's), in real time, polling, for at most 10 s.
func testSlots(t *testing.T, h *harness) {
	ss, ok := h.Store.(queue.SlotStore)
	if !ok {
		t.Skip("the store keeps no concurrency slots (queue.SlotStore); each process counts its own")
	}
	ctx := context.Background()
	acquire := func(target, holder string, limit int, ttl time.Duration) bool {
		t.Helper()
		ok, err := ss.AcquireSlot(ctx, target, holder, limit, ttl)
		if err != nil {
			t.Fatalf("AcquireSlot(%q, %q, %d, %s): %v", target, holder, limit, ttl, err)
		}
		return ok
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

	// A release frees a slot, and is announced.
	if err := ss.ReleaseSlot(ctx, "x", "a"); err != nil {
		t.Fatalf("ReleaseSlot: %v", err)
	}
	awaitReleased(t, h, "x")
	if !acquire("x", "c", 2, time.Hour) {
		t.Fatal("the released slot was not granted")
	}
	if err := ss.ReleaseSlot(ctx, "x", "nobody"); err != nil {
		t.Fatalf("ReleaseSlot of a holder without a slot: %v", err)
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
			ok, err := ss.AcquireSlot(ctx, "many", fmt.Sprint("h", i), 3, time.Hour)
			if err != nil {
				t.Errorf("AcquireSlot: %v", err)
			}
			if ok {
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

	for _, bad := range []struct {
		target, holder string
		limit          int
		ttl            time.Duration
	}{{"", "h", 1, time.Second}, {"t", "", 1, time.Second}, {"t", "h", 0, time.Second}, {"t", "h", 1, 0}} {
		if _, err := ss.AcquireSlot(ctx, bad.target, bad.holder, bad.limit, bad.ttl); err == nil {
			t.Errorf("AcquireSlot(%q, %q, %d, %s) returned no error", bad.target, bad.holder, bad.limit, bad.ttl)
		}
	}
	if _, err := ss.RenewSlots(ctx, "x", []string{"b"}, 0); err == nil {
		t.Error("RenewSlots with a zero ttl returned no error")
	}
}

// awaitReleased waits, at most 10 s, for the store to announce a release
// of target.
func awaitReleased(t *testing.T, h *harness, target string) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case got := <-h.Released:
			if got == target {
				return
			}
		case <-timeout.C:
			t.Fatalf("no release of %q announced to WatchSlots within 10 s", target)
		}
	}
}
