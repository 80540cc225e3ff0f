package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

func init() {
	RegisterDurable(DurableSystem{Name: "asynq", Engine: "redis", Module: "github.com/hibiken/asynq", Run: runAsynq})
}

const asynqTaskType = "qbench:noop"

func runAsynq(ctx context.Context, cfg DurableConfig, env DurableEnv) ([]DurableResult, error) {
	opt := asynq.RedisClientOpt{Addr: env.RedisAddr, DB: env.RedisDB, PoolSize: 2 * max(10, maxOf(cfg.Producers))}
	if err := flushAsynq(ctx, env); err != nil {
		return nil, err
	}
	client := asynq.NewClient(opt)
	defer client.Close()
	enqueue := func(ctx context.Context) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask(asynqTaskType, nil))
		return err
	}

	var out []DurableResult
	for _, g := range cfg.Producers {
		if err := flushAsynq(ctx, env); err != nil {
			return out, err
		}
		el, err := insertConcurrently(ctx, cfg.InsertN, g, enqueue)
		if err != nil {
			return out, fmt.Errorf("enqueue: %w", err)
		}
		out = append(out, durableResult("asynq", "insert", fmt.Sprintf("producers=%d", g), cfg.InsertN, el))
	}

	if err := flushAsynq(ctx, env); err != nil {
		return out, err
	}
	if _, err := insertConcurrently(ctx, cfg.BurnN, 10, enqueue); err != nil {
		return out, fmt.Errorf("burn-down setup: %w", err)
	}
	counter := newBurnCounter(cfg.BurnN)
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency: cfg.RedisConcurrency,
		LogLevel:    asynq.FatalLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc(asynqTaskType, func(context.Context, *asynq.Task) error {
		counter.inc()
		return nil
	})
	start := time.Now()
	if err := srv.Start(mux); err != nil {
		return out, err
	}
	jobs, all := counter.wait(cfg.BurnLimit)
	elapsed := time.Since(start)
	srv.Shutdown()
	r := durableResult("asynq", "burn-down", fmt.Sprintf("concurrency=%d", cfg.RedisConcurrency), jobs, elapsed)
	if !all {
		r.Note = fmt.Sprintf("capped at %s: %d of %d jobs", cfg.BurnLimit, jobs, cfg.BurnN)
	}
	out = append(out, r)
	return out, flushAsynq(ctx, env)
}

// flushAsynq deletes asynq's keys (and nothing else) from env's database.
func flushAsynq(ctx context.Context, env DurableEnv) error {
	rdb := redis.NewClient(&redis.Options{Addr: env.RedisAddr, DB: env.RedisDB})
	defer rdb.Close()
	return deleteKeys(ctx, rdb, "asynq:*")
}

// deleteKeys unlinks every key matching pattern.
func deleteKeys(ctx context.Context, rdb *redis.Client, pattern string) error {
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 1000 {
			if err := rdb.Unlink(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return rdb.Unlink(ctx, batch...).Err()
	}
	return nil
}

func maxOf(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
