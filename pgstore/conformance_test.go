package pgstore_test

import (
	"testing"
	"time"

	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// TestConformance runs the Store contract every store passes, unchanged,
// each subtest in a schema of its own.
func TestConformance(t *testing.T) {
	requirePG(t)
	t.Parallel()
	pool := newPool(t, pgURL(), 8)
	storetest.Run(t, storetest.Features{Capacity: true, LeaseTTL: pgstore.DefaultLeaseTTL},
		func(t *testing.T) storekit.Store[storetest.Payload] {
			s, err := pgstore.New[storetest.Payload](pool, pgstore.WithSchema(newSchema(t, pool)),
				// The suite steps the fake clock and calls RescueExpired
				// itself: keep the leader's janitor out of its way.
				pgstore.WithJanitorInterval(time.Hour))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return settledStore{s}
		})
}

// settledStore is the store, with the method by which the suite waits for
// the claim an outcome's write makes ahead for the worker it expects back
// (storetest.Settler).
type settledStore struct {
	*pgstore.Store[storetest.Payload]
}

func (s settledStore) Settled() bool { return pgstore.AheadClaimed(s.Store) }

// TestAdminConformance runs the admin API's section of the suite, through
// a queue over the store (q.Admin), each subtest in a schema of its own.
func TestAdminConformance(t *testing.T) {
	requirePG(t)
	t.Parallel()
	pool := newPool(t, pgURL(), 8)
	storetest.RunAdmin(t, func(t *testing.T) storekit.Store[storetest.Payload] {
		s, err := pgstore.New[storetest.Payload](pool, pgstore.WithSchema(newSchema(t, pool)))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	})
}
