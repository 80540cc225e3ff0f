package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/queuekit/queue/sqlitestore"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// openDB opens and migrates a new database file in a test's temporary
// directory, closed when the test ends.
func openDB(t testing.TB, opts ...sqlitestore.OpenOption) *sqlitestore.DB {
	t.Helper()
	db, err := sqlitestore.Open(filepath.Join(t.TempDir(), "queue.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := sqlitestore.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestConformance runs the Store contract every store passes, unchanged,
// each subtest on a file of its own.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Features{Capacity: true, LeaseTTL: sqlitestore.DefaultLeaseTTL},
		func(t *testing.T) storekit.Store[storetest.Payload] {
			// SyncNormal: the suite checks behaviour, not power loss; a
			// commit without fsync keeps its thousands of writes quick.
			s, err := sqlitestore.New[storetest.Payload](openDB(t, sqlitestore.WithSynchronous(sqlitestore.SyncNormal)),
				// The suite steps the fake clock and calls RescueExpired
				// itself: keep the janitor out of its way.
				sqlitestore.WithJanitorInterval(time.Hour))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			return s
		})
}

// TestAdminConformance runs the admin API's section of the suite, through
// a queue over the store (q.Admin), each subtest on a file of its own.
func TestAdminConformance(t *testing.T) {
	t.Parallel()
	storetest.RunAdmin(t, func(t *testing.T) storekit.Store[storetest.Payload] {
		s, err := sqlitestore.New[storetest.Payload](openDB(t, sqlitestore.WithSynchronous(sqlitestore.SyncNormal)))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	})
}
