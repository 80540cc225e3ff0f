package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// These tests run against a real Redis, never a mock. The address comes
// from QUEUE_REDIS_ADDR (default 127.0.0.1:6379); every test works under
// its own key prefix and deletes its keys when it ends, so the server may
// be shared. Without a reachable Redis the tests skip, except under CI=true,
// where they fail.

func redisAddr() string {
	if a := os.Getenv("QUEUE_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

var (
	probeOnce sync.Once
	probeErr  error
)

// needRedis returns a client of the test Redis, closed when t ends. Whether
// Redis answers is checked once per test binary.
func needRedis(t testing.TB) *redis.Client {
	t.Helper()
	probeOnce.Do(func() {
		c := redis.NewClient(&redis.Options{Addr: redisAddr(), DialTimeout: time.Second, MaxRetries: -1})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		probeErr = c.Ping(ctx).Err()
	})
	if probeErr != nil {
		msg := "redis not reachable at " + redisAddr() + " (" + probeErr.Error() + "); start one (redis-server) " +
			"or point QUEUE_REDIS_ADDR=host:port at one to run the redisstore tests"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// testPrefix returns a key prefix of the test's own and deletes every key
// under it when the test ends.
func testPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.Map(func(r rune) rune {
		if r == '{' || r == '}' || r == ' ' || r == '/' || r < ' ' {
			return '_'
		}
		return r
	}, t.Name())
	p := "t_" + name + "_" + hex.EncodeToString(b[:])
	t.Cleanup(func() { deleteKeys(c, "{"+p+":*") })
	return p
}

// deleteKeys deletes the keys matching match; on a Cluster, on every
// master (a SCAN sees one node's keys).
func deleteKeys(c redis.UniversalClient, match string) {
	ctx := context.Background()
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
			deleteKeys(n, match)
			return nil
		})
		return
	}
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// Polling: a condition that lives in Redis (a leader key's TTL, the
// server answering again, counts kept by the scripts) has no event to
// wait on; the tests poll for it with require.Eventually(WithT) at
// pollTick.
const pollTick = 10 * time.Millisecond
