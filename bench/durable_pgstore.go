//go:build pgstore

package bench

import (
	"context"

	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storekit"
)

// Built with -tags pgstore, the durable comparison includes pgstore on the
// same database as river.
func init() {
	RegisterStore("pgstore", "postgres", "github.com/queuekit/queue/pgstore", "WithCapacityCheck(false)", openPGStore)
}

// openPGStore gives pgstore a freshly created schema of its own, migrated.
func openPGStore(ctx context.Context, env DurableEnv) (storekit.Store[int], func(), error) {
	pool, err := openPG(ctx, env.PostgresURL, env.Schema, DefaultDurable().PoolConns)
	if err != nil {
		return nil, nil, err
	}
	if err := pgstore.Migrate(ctx, pool, pgstore.WithSchema(env.Schema)); err != nil {
		pool.Close()
		return nil, nil, err
	}
	// The capacity check counts available rows in every insert, up to the
	// capacity; like river, the bench's backlog is unbounded, so it is off
	// (pgstore's advice for bulk producers).
	st, err := pgstore.New[int](pool, pgstore.WithSchema(env.Schema), pgstore.WithCapacityCheck(false))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return st, pool.Close, nil
}
