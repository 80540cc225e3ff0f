package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bareSchema returns the name of a schema the test may create, not
// migrated, and drops it when the test ends.
func bareSchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "qt_" + hex.EncodeToString(b[:]) + "_bare"
	t.Cleanup(func() {
		_, _ = pool.Exec(bg, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	return schema
}

// startQueue builds a queue on a store in schema and starts it; the queue
// is shut down when the test ends.
func startQueue(t *testing.T, pool *pgxpool.Pool, schema string, ran chan<- struct{}) (*queue.Queue[P], error) {
	t.Helper()
	s, err := pgstore.New[P](pool, pgstore.WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[P]) error {
		ran <- struct{}{}
		return nil
	}, queue.WithName("migrated"), queue.WithLogger(quietLogger()))
	if err != nil {
		t.Fatalf("queue.New: %v", err)
	}
	t.Cleanup(func() { _ = q.Shutdown(bg) })
	return q, q.Start(bg)
}

// wantNotMigrated checks that err refuses the schema, naming it, what is
// wrong with it and Migrate.
func wantNotMigrated(t *testing.T, err error, schema string, says ...string) {
	t.Helper()
	if !errors.Is(err, pgstore.ErrNotMigrated) {
		t.Fatalf("on a schema not migrated: %v; want pgstore.ErrNotMigrated", err)
	}
	var nm *pgstore.NotMigratedError
	if !errors.As(err, &nm) || nm.Schema != schema {
		t.Fatalf("%v; want a *NotMigratedError for schema %q", err, schema)
	}
	for _, s := range append([]string{`schema "` + schema + `"`, "pgstore.Migrate"}, says...) {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%q; want it to say %q", err, s)
		}
	}
}

// TestStartRefusesUnmigratedSchema: a queue on a schema that Migrate has
// not brought up to date does not start: Start names the schema, what is
// missing and Migrate (it used to start, say healthy, and fail every
// claim). Once migrated, the same queue starts and runs jobs. A schema
// migrated with another tool from the same files (no queuekit_migrations
// table) is accepted.
func TestStartRefusesUnmigratedSchema(t *testing.T) {
	t.Parallel()
	requirePG(t)
	pool := newPool(t, pgURL(), 4)

	t.Run("no schema", func(t *testing.T) {
		schema := bareSchema(t, pool)
		ran := make(chan struct{}, 1)
		q, err := startQueue(t, pool, schema, ran)
		wantNotMigrated(t, err, schema, "queuekit_jobs", "missing")
		// Refused, the queue can start once the schema is migrated.
		if err := pgstore.Migrate(bg, pool, pgstore.WithSchema(schema)); err != nil {
			t.Fatal(err)
		}
		if err := q.Start(bg); err != nil {
			t.Fatalf("Start after Migrate: %v", err)
		}
		if err := q.Enqueue(bg, queue.Job[P]{Payload: P{N: 7}}); err != nil {
			t.Fatal(err)
		}
		queuetest.Await(t, ran, 10*time.Second, "the job to run after Migrate")
	})

	t.Run("empty schema", func(t *testing.T) {
		schema := bareSchema(t, pool)
		if _, err := pool.Exec(bg, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		q, err := startQueue(t, pool, schema, nil)
		wantNotMigrated(t, err, schema, "queuekit_jobs", "missing")
		// Add works before Start, and says the same.
		err = q.Enqueue(bg, queue.Job[P]{})
		wantNotMigrated(t, err, schema, "queuekit_jobs", "missing")
	})

	t.Run("older version", func(t *testing.T) {
		schema := bareSchema(t, pool)
		if err := pgstore.Migrate(bg, pool, pgstore.WithSchema(schema)); err != nil {
			t.Fatal(err)
		}
		// A schema migrated by an older release: its last migration is
		// not recorded.
		ms := pgstore.Migrations()
		last := ms[len(ms)-1].Version
		if _, err := pool.Exec(bg, "DELETE FROM "+schema+".queuekit_migrations WHERE version = $1", last); err != nil {
			t.Fatal(err)
		}
		_, err := startQueue(t, pool, schema, nil)
		var nm *pgstore.NotMigratedError
		wantNotMigrated(t, err, schema, "version")
		prev := ms[len(ms)-2].Version // versions may skip numbers
		if errors.As(err, &nm); nm.Version != prev || nm.Want != last {
			t.Fatalf("NotMigratedError %+v; want Version %d, Want %d", nm, prev, last)
		}
	})

	t.Run("other migration tool", func(t *testing.T) {
		schema := bareSchema(t, pool)
		// The files applied as another tool would: search_path set to the
		// schema, no record of the versions.
		err := pgx.BeginFunc(bg, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(bg, "CREATE SCHEMA "+schema+"; SET LOCAL search_path TO "+schema); err != nil {
				return err
			}
			for _, m := range pgstore.Migrations() {
				if _, err := tx.Exec(bg, m.SQL); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan struct{}, 1)
		q, err := startQueue(t, pool, schema, ran)
		if err != nil {
			t.Fatalf("Start on a schema migrated with another tool: %v", err)
		}
		if err := q.Enqueue(bg, queue.Job[P]{Payload: P{N: 1}}); err != nil {
			t.Fatal(err)
		}
		queuetest.Await(t, ran, 10*time.Second, "the job to run")
	})
}

// TestUnmigratedSchemaFoundLater: a store started while the database was
// unreachable (Start cannot check the schema then, and does not fail)
// finds out when the database answers: Stats reports it unhealthy,
// naming Migrate, and returns ErrNotMigrated, rather than healthy while
// every claim fails.
func TestUnmigratedSchemaFoundLater(t *testing.T) {
	t.Parallel()
	requirePG(t)
	pool := newPool(t, pgURL(), 4)
	schema := bareSchema(t, pool)
	p := storetest.NewProxy(t, pgHostPort(t))
	p.Down()
	s, err := pgstore.New[P](proxiedPool(t, p, 4), pgstore.WithSchema(schema), pgstore.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	bind(t, s, "later", nil)
	p.Up()
	// Whether the server answers again is the pool's reconnection's
	// business, with no event: polled.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := s.Stats(bg)
		assert.ErrorIs(c, err, pgstore.ErrNotMigrated)
		assert.False(c, st.Healthy, "Stats %+v", st)
		assert.Contains(c, st.Detail, "pgstore.Migrate")
		assert.Contains(c, st.Detail, `schema "`+schema+`"`)
	}, 10*time.Second, pollTick, "Stats to report the schema not migrated")
}
