package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

func init() {
	RegisterDurable(DurableSystem{Name: "river", Engine: "postgres", Module: "github.com/riverqueue/river", Run: runRiver})
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "qbench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	count func()
}

func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	if w.count != nil {
		w.count()
	}
	return nil
}

// riverFetch is one of river's fetch settings.
type riverFetch struct {
	name     string
	kase     string // its name in DurableConfig.Cases
	cooldown time.Duration
	poll     time.Duration
}

var riverFetches = []riverFetch{
	{"cooldown 2ms / poll 20ms (river's benchmark settings)", "burn", 2 * time.Millisecond, 20 * time.Millisecond},
	{"defaults (cooldown 100ms / poll 1s)", "burn-defaults", river.FetchCooldownDefault, river.FetchPollIntervalDefault},
}

// openPG opens a pool on url and gives schema a fresh, empty start.
func openPG(ctx context.Context, url, schema string, conns int) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = int32(conns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE; CREATE SCHEMA "+ident); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

func runRiver(ctx context.Context, cfg DurableConfig, env DurableEnv) ([]DurableResult, error) {
	pool, err := openPG(ctx, env.PostgresURL, env.Schema, cfg.PoolConns)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	mig, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: env.Schema, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	truncate := func() error {
		_, err := pool.Exec(ctx, "TRUNCATE "+pgx.Identifier{env.Schema, "river_job"}.Sanitize())
		return err
	}

	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	inserter, err := river.NewClient(driver, &river.Config{Schema: env.Schema, Workers: workers, Logger: quietLogger()})
	if err != nil {
		return nil, err
	}

	var out []DurableResult
	for _, g := range cfg.Producers {
		if !cfg.Runs("insert") {
			break
		}
		if err := truncate(); err != nil {
			return out, err
		}
		el, err := insertConcurrently(ctx, cfg.InsertN, g, func(ctx context.Context) error {
			_, err := inserter.Insert(ctx, noopArgs{}, nil)
			return err
		})
		if err != nil {
			return out, fmt.Errorf("insert: %w", err)
		}
		out = append(out, durableResult("river", "insert", fmt.Sprintf("goroutines=%d", g), cfg.InsertN, el))
	}

	params := make([]river.InsertManyParams, cfg.BatchN)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	batches := []struct {
		name   string
		size   int
		insert func(n int) error
	}{
		{"InsertMany (multi-row INSERT)", 0, func(n int) error { _, err := inserter.InsertMany(ctx, params[:n]); return err }},
		{"InsertManyFast (COPY)", 0, func(n int) error { _, err := inserter.InsertManyFast(ctx, params[:n]); return err }},
	}
	if cfg.inCalls() {
		batches = append(batches, batches[1])
		batches[2].size = cfg.BatchSize
	}
	for _, batch := range batches {
		if !cfg.Runs("batch") {
			break
		}
		if err := truncate(); err != nil {
			return out, err
		}
		el, err := chunked(cfg.BatchN, batch.size, batch.insert)
		if err != nil {
			return out, fmt.Errorf("batch insert: %w", err)
		}
		out = append(out, durableResult("river", "batch insert", batchSetting(batch.name, batch.size), cfg.BatchN, el))
	}

	burnParams := params
	if len(burnParams) != cfg.BurnN {
		burnParams = make([]river.InsertManyParams, cfg.BurnN)
		for i := range burnParams {
			burnParams[i] = river.InsertManyParams{Args: noopArgs{}}
		}
	}
	for _, f := range riverFetches {
		if !cfg.Runs(f.kase) {
			continue
		}
		for _, w := range cfg.BurnWorkers {
			if err := truncate(); err != nil {
				return out, err
			}
			if _, err := inserter.InsertManyFast(ctx, burnParams); err != nil {
				return out, fmt.Errorf("burn-down setup: %w", err)
			}
			r, err := riverBurn(ctx, driver, env.Schema, cfg, f, w)
			if err != nil {
				return out, fmt.Errorf("burn-down: %w", err)
			}
			out = append(out, r)
		}
	}
	return out, truncate()
}

// riverBurn works off the queued jobs with w workers and times it up to
// client.Stop returning, by which time river's completer has recorded
// every finished job.
func riverBurn(ctx context.Context, driver *riverpgxv5.Driver, schema string, cfg DurableConfig, f riverFetch, w int) (DurableResult, error) {
	counter := newBurnCounter(cfg.BurnN)
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{count: counter.inc})
	client, err := river.NewClient(driver, &river.Config{
		Schema:            schema,
		Workers:           workers,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: w}},
		FetchCooldown:     f.cooldown,
		FetchPollInterval: f.poll,
		Logger:            quietLogger(),
	})
	if err != nil {
		return DurableResult{}, err
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return DurableResult{}, err
	}
	jobs, all := counter.wait(cfg.BurnLimit)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return DurableResult{}, err
	}
	r := durableResult("river", "burn-down", fmt.Sprintf("workers=%d, %s", w, f.name), jobs, time.Since(start))
	if !all {
		r.Note = fmt.Sprintf("capped at %s: %d of %d jobs", cfg.BurnLimit, jobs, cfg.BurnN)
	}
	return r, nil
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
