//go:build redisstore

package bench

import (
	"context"

	"github.com/queuekit/queue/redisstore"
	"github.com/queuekit/queue/storekit"
	"github.com/redis/go-redis/v9"
)

// Built with -tags redisstore, the durable comparison includes redisstore
// on the same Redis as asynq.
func init() {
	RegisterStore("redisstore", "redis", "github.com/queuekit/queue/redisstore", "", openRedisStore)
}

const redisstorePrefix = "qbench"

// openRedisStore gives redisstore an empty key space under its own prefix.
func openRedisStore(ctx context.Context, env DurableEnv) (storekit.Store[int], func(), error) {
	rdb := redis.NewClient(&redis.Options{Addr: env.RedisAddr, DB: env.RedisDB, PoolSize: 200})
	if err := deleteKeys(ctx, rdb, "{"+redisstorePrefix+":*"); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	st, err := redisstore.New[int](rdb, redisstore.WithPrefix(redisstorePrefix))
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return st, func() {
		_ = deleteKeys(context.Background(), rdb, "{"+redisstorePrefix+":*")
		rdb.Close()
	}, nil
}
