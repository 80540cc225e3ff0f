package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/queuekit/queue/storekit"
)

// testAdmission checks a store's shared admission bucket (storekit.Admitter):
// a bucket never used is full, a take gets at most what the bucket holds,
// an empty bucket gives nothing and says how long until a token, and bad
// arguments are refused. The rate is negligible (a token in 1000 s), so
// the store's clock does not matter.
func testAdmission(t *testing.T, h *harness) {
	ad, ok := h.Store.(storekit.Admitter)
	if !ok {
		t.Skip("the store keeps no shared admission bucket (storekit.Admitter); the queue's own bucket is used")
	}
	ctx := context.Background()
	const rate, burst = 1e-3, 10
	take := func(n, want int) time.Duration {
		t.Helper()
		got, wait, err := ad.TakeTokens(ctx, rate, burst, n)
		if err != nil {
			t.Fatalf("TakeTokens(%d): %v", n, err)
		}
		if got != want {
			t.Fatalf("TakeTokens(%d) took %d tokens, want %d", n, got, want)
		}
		return wait
	}
	take(4, 4)
	take(10, 6) // the rest of the burst
	if wait := take(1, 0); wait < 100*time.Second || wait > 1001*time.Second {
		t.Errorf("an empty bucket refilling a token in 1000 s says wait %v", wait)
	}
	for _, bad := range []struct {
		rate     float64
		burst, n int
	}{{0, 10, 1}, {-1, 10, 1}, {1, 0, 1}, {1, 10, 0}} {
		if _, _, err := ad.TakeTokens(ctx, bad.rate, bad.burst, bad.n); err == nil {
			t.Errorf("TakeTokens(%v, %d, %d) returned no error", bad.rate, bad.burst, bad.n)
		}
	}
}

// testFleetSize checks storekit.FleetSizer: a started store counts at least
// itself.
func testFleetSize(t *testing.T, h *harness) {
	fs, ok := h.Store.(storekit.FleetSizer)
	if !ok {
		t.Skip("the store does not count the queue's processes (storekit.FleetSizer)")
	}
	if n := fs.Processes(); n < 1 {
		t.Errorf("Processes() = %d, want >= 1", n)
	}
}
