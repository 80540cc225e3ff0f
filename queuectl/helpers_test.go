package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// The tests run against a real PostgreSQL (QUEUE_PG_URL) and Redis
// (QUEUE_REDIS_ADDR). Without them they skip, except in CI (CI=true),
// where they fail.
func pgURL() string {
	if u := os.Getenv("QUEUE_PG_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func redisAddr() string {
	if a := os.Getenv("QUEUE_REDIS_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:6379"
}

var (
	pgOnce, redisOnce sync.Once
	pgErr, redisErr   error
)

func skipOrFail(tb testing.TB, what string, err error) {
	tb.Helper()
	msg := fmt.Sprintf("%s not reachable: %v\nThe queuectl tests need the real servers: set QUEUE_PG_URL and QUEUE_REDIS_ADDR, or start them on 127.0.0.1.", what, err)
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg)
	}
	tb.Skip(msg)
}

func requirePG(tb testing.TB) {
	tb.Helper()
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pgURL())
		if err != nil {
			pgErr = err
			return
		}
		defer conn.Close(ctx)
		pgErr = conn.Ping(ctx)
	})
	if pgErr != nil {
		skipOrFail(tb, "PostgreSQL at "+pgURL(), pgErr)
	}
}

func requireRedis(tb testing.TB) {
	tb.Helper()
	redisOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		c := redis.NewClient(&redis.Options{Addr: redisAddr()})
		defer c.Close()
		redisErr = c.Ping(ctx).Err()
	})
	if redisErr != nil {
		skipOrFail(tb, "Redis at "+redisAddr(), redisErr)
	}
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// newPool returns a pool on the test server, closed when the test ends.
func newPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	requirePG(tb)
	cfg, err := pgxpool.ParseConfig(pgURL())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// freshSchema returns the name of a schema no other test uses, dropped
// when the test ends. It is not created.
func freshSchema(tb testing.TB, pool *pgxpool.Pool) string {
	tb.Helper()
	schema := randomName("qctl_")
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	return schema
}

// newRedis returns a client on the test server and a fresh key prefix,
// whose keys are deleted when the test ends.
func newRedis(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	requireRedis(tb)
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	prefix := randomName("qctl")
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, "{"+prefix+":*", 500).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		_ = c.Close()
	})
	return c, prefix
}

// result is one run of queuectl.
type result struct {
	code           int
	stdout, stderr string
}

// ctl runs queuectl in process with args and stdin.
func ctl(tb testing.TB, stdin string, args ...string) result {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// deadPort returns a 127.0.0.1 port nothing listens on.
func deadPort(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}
