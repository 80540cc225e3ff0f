// Package storeflag turns an example's -store flag into a storekit.Store:
// "memory" (the default), a postgres:// URL (pgstore; the schema is
// migrated first), a redis:// URL (redisstore) or a sqlite:// URL
// (sqlitestore: sqlite:///var/lib/app/jobs.db is the file
// /var/lib/app/jobs.db, created and migrated if needed).
package storeflag

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/redisstore"
	"github.com/queuekit/queue/sqlitestore"
	"github.com/queuekit/queue/storekit"
)

// Usage describes the flag's values, for its help text.
const Usage = `where jobs live: "memory", postgres://user@host:5432/db, redis://host:6379/0 or sqlite:///path/to/jobs.db`

// Open returns the store url names and a function that releases its
// connections once the queue has stopped. For "memory" or "" it returns a
// nil store: the queue's default.
func Open[T any](ctx context.Context, url string) (storekit.Store[T], func(), error) {
	switch {
	case url == "" || url == "memory":
		return nil, func() {}, nil
	case strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://"):
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, nil, fmt.Errorf("-store: %w", err)
		}
		if err := pgstore.Migrate(ctx, pool); err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("-store: migrating: %w", err)
		}
		s, err := pgstore.New[T](pool)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		return s, pool.Close, nil
	case strings.HasPrefix(url, "redis://") || strings.HasPrefix(url, "rediss://"):
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, fmt.Errorf("-store: %w", err)
		}
		c := redis.NewClient(opt)
		s, err := redisstore.New[T](c)
		if err != nil {
			c.Close()
			return nil, nil, err
		}
		return s, func() { c.Close() }, nil
	case strings.HasPrefix(url, "sqlite://"):
		path := strings.TrimPrefix(url, "sqlite://")
		if path == "" {
			return nil, nil, fmt.Errorf("-store %q: no file (sqlite:///path/to/jobs.db)", url)
		}
		db, err := sqlitestore.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("-store: %w", err)
		}
		if err := sqlitestore.Migrate(ctx, db); err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("-store: migrating: %w", err)
		}
		s, err := sqlitestore.New[T](db)
		if err != nil {
			db.Close()
			return nil, nil, err
		}
		return s, func() { db.Close() }, nil
	default:
		return nil, nil, fmt.Errorf("-store %q: want memory, postgres://…, redis://… or sqlite://…", url)
	}
}
