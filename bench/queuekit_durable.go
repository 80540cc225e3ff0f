package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// StoreFactory opens a fresh, empty durable store of this library for the
// durable comparison: under env.Schema on PostgreSQL, under a key prefix of
// its own in env's Redis database, in a new file (env.SQLiteFile) on
// SQLite. closeFn releases what it opened.
type StoreFactory func(ctx context.Context, env DurableEnv) (store storekit.Store[int], closeFn func(), err error)

// BatchAdder is implemented by stores that can accept many jobs in one
// round trip (pgstore's EnqueueMany); the batch-insert case uses it when
// present.
type BatchAdder interface {
	EnqueueMany(ctx context.Context, jobs []queue.Job[int]) ([]storekit.Added, error)
}

// RegisterStore enters one of this library's durable stores in the
// durable comparison. name is "pgstore", "redisstore" or "sqlitestore",
// engine "postgres", "redis" or "sqlite"; the store's side runs the same
// cases as its peers (river, asynq; river-sqlite and goqite) against the
// same server, or on SQLite files with the same settings. options describes non-default store
// options open sets, for the report. A file per store, in this package,
// calls it from init once the store's module is required.
func RegisterStore(name, engine, module, options string, open StoreFactory) {
	RegisterDurable(DurableSystem{
		Name:   name,
		Engine: engine,
		Module: module,
		Run: func(ctx context.Context, cfg DurableConfig, env DurableEnv) ([]DurableResult, error) {
			rows, err := runStoreSuite(ctx, name, engine, open, cfg, env)
			for i := range rows {
				rows[i].Setting = joinSetting(rows[i].Setting, options)
			}
			return rows, err
		},
	})
}

func runStoreSuite(ctx context.Context, name, engine string, open StoreFactory, cfg DurableConfig, env DurableEnv) ([]DurableResult, error) {
	var out []DurableResult
	insertWord := "producers=%d"
	if engine == "postgres" {
		insertWord = "goroutines=%d"
	}
	for _, g := range cfg.Producers {
		if !cfg.Runs("insert") {
			break
		}
		el, err := withStoreQueue(ctx, open, env, 1, cfg.InsertN, nil, func(q *queue.Queue[int], _ storekit.Store[int]) (time.Duration, error) {
			return enqueueConcurrently(ctx, q, cfg.InsertN, g)
		})
		if err != nil {
			return out, fmt.Errorf("insert: %w", err)
		}
		out = append(out, durableResult(name, "insert", fmt.Sprintf(insertWord, g), cfg.InsertN, el))
	}

	// Every store has EnqueueMany: pgstore's one INSERT per batch,
	// redisstore's one pipeline of add scripts, sqlitestore's multi-row
	// INSERTs in one transaction.
	// With cfg.BatchSize, also in calls of that many jobs each.
	for _, size := range cfg.batchSizes() {
		if !cfg.Runs("batch") {
			break
		}
		setting := "EnqueueMany"
		el, err := withStoreQueue(ctx, open, env, 1, cfg.BatchN, nil, func(q *queue.Queue[int], st storekit.Store[int]) (time.Duration, error) {
			ba, ok := st.(BatchAdder)
			if !ok {
				setting = "no batch API: Enqueue from 10 goroutines"
				return enqueueConcurrently(ctx, q, cfg.BatchN, 10)
			}
			jobs := make([]queue.Job[int], cfg.BatchN)
			for i := range jobs {
				jobs[i].Payload = i
			}
			done := 0
			return chunked(cfg.BatchN, size, func(n int) error {
				_, err := ba.EnqueueMany(ctx, jobs[done:done+n])
				done += n
				return err
			})
		})
		if err != nil {
			return out, fmt.Errorf("batch insert: %w", err)
		}
		out = append(out, durableResult(name, "batch insert", batchSetting(setting, size), cfg.BatchN, el))
		if setting != "EnqueueMany" {
			break
		}
	}

	burnWorkers := cfg.BurnWorkers
	switch engine {
	case "redis":
		burnWorkers = []int{cfg.RedisConcurrency}
	case "sqlite":
		burnWorkers = []int{cfg.SQLiteWorkers}
	}
	for _, w := range burnWorkers {
		if !cfg.Runs("burn") {
			break
		}
		counter := newBurnCounter(cfg.BurnN)
		var (
			jobs int
			all  bool
		)
		el, err := withStoreQueue(ctx, open, env, w, cfg.BurnN, counter.inc, func(q *queue.Queue[int], st storekit.Store[int]) (time.Duration, error) {
			if err := fill(ctx, q, st, cfg.BurnN); err != nil {
				return 0, err
			}
			start := time.Now()
			if err := q.Start(ctx); err != nil {
				return 0, err
			}
			jobs, all = counter.wait(cfg.BurnLimit)
			if engine == "redis" {
				return time.Since(start), nil
			}
			// As river's (on PostgreSQL and SQLite), until Stop returns:
			// the outcomes of the last jobs are committed by then. (asynq's Shutdown takes most of
			// a second whatever the work, so neither Redis side is timed
			// to its stop; both record a job's end before the worker
			// takes the next.)
			stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			err := q.Stop(stopCtx)
			return time.Since(start), err
		})
		if err != nil {
			return out, fmt.Errorf("burn-down: %w", err)
		}
		r := durableResult(name, "burn-down", fmt.Sprintf("workers=%d", w), jobs, el)
		if !all {
			r.Note = fmt.Sprintf("capped at %s: %d of %d jobs", cfg.BurnLimit, jobs, cfg.BurnN)
		}
		out = append(out, r)
	}
	return out, nil
}

// withStoreQueue opens a fresh store, builds a queue on it with w workers
// and room for n ready jobs, runs body, and stops and closes both.
func withStoreQueue(ctx context.Context, open StoreFactory, env DurableEnv, w, n int, count func(), body func(*queue.Queue[int], storekit.Store[int]) (time.Duration, error)) (time.Duration, error) {
	st, closeFn, err := open(ctx, env)
	if err != nil {
		return 0, fmt.Errorf("open store: %w", err)
	}
	defer closeFn()
	q, err := queue.NewWithStore(st, func(context.Context, queue.Job[int]) error {
		if count != nil {
			count()
		}
		return nil
	}, queue.WithCapacity(max(n, 1), 0), queue.WithWorkers(w, w))
	if err != nil {
		return 0, err
	}
	el, err := body(q, st)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if serr := q.Stop(stopCtx); err == nil {
		err = serr
	}
	return el, err
}

// fill queues n jobs for a burn-down, untimed: in one batch where the store
// can, else from 10 goroutines.
func fill(ctx context.Context, q *queue.Queue[int], st storekit.Store[int], n int) error {
	if ba, ok := st.(BatchAdder); ok {
		jobs := make([]queue.Job[int], n)
		_, err := ba.EnqueueMany(ctx, jobs)
		return err
	}
	_, err := enqueueConcurrently(ctx, q, n, 10)
	return err
}

func enqueueConcurrently(ctx context.Context, q *queue.Queue[int], n, g int) (time.Duration, error) {
	return insertConcurrently(ctx, n, g, func(ctx context.Context) error {
		return q.Enqueue(ctx, queue.Job[int]{Payload: 1})
	})
}
