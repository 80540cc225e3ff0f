package pgstore_test

import (
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
)

// TestConformance runs the Store contract every store passes, unchanged,
// each subtest in a schema of its own.
func TestConformance(t *testing.T) {
	requirePG(t)
	t.Parallel()
	pool := newPool(t, pgURL(), 8)
	queuetest.RunStoreTests(t, queuetest.StoreFeatures{Capacity: true, LeaseTTL: pgstore.DefaultLeaseTTL},
		func(t *testing.T) queue.Store[queuetest.Payload] {
			s, err := pgstore.New[queuetest.Payload](pool, pgstore.WithSchema(newSchema(t, pool)),
				// The suite steps the fake clock and calls RescueExpired
				// itself: keep the leader's janitor out of its way.
				pgstore.WithJanitorInterval(time.Hour))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return s
		})
}
