//go:build sqlitestore

package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"maragu.dev/goqite"
	_ "modernc.org/sqlite" // river's and goqite's driver: the one sqlitestore uses

	"github.com/queuekit/queue/sqlitestore"
	"github.com/queuekit/queue/storekit"
)

// Built with -tags sqlitestore, the durable comparison includes
// sqlitestore beside river on its SQLite driver (riversqlite) and goqite,
// each on new files in WAL mode with the same synchronous setting, through
// the same driver (modernc.org/sqlite). The tag keeps modernc out of the
// bench's default build.
func init() {
	RegisterDurable(DurableSystem{Name: "river-sqlite", Engine: "sqlite", Module: "github.com/riverqueue/river/riverdriver/riversqlite", Run: runRiverSQLite})
	RegisterDurable(DurableSystem{Name: "goqite", Engine: "sqlite", Module: "maragu.dev/goqite", Run: runGoqite})
	RegisterStore("sqlitestore", "sqlite", "github.com/queuekit/queue/sqlitestore", "WithCapacityCheck(false)", openSQLiteStore)
}

// openSQLiteStore gives sqlitestore a new file, migrated.
func openSQLiteStore(ctx context.Context, env DurableEnv) (storekit.Store[int], func(), error) {
	sync := sqlitestore.SyncFull
	if env.SQLiteSync == "NORMAL" {
		sync = sqlitestore.SyncNormal
	}
	db, err := sqlitestore.Open(env.SQLiteFile("sqlitestore"), sqlitestore.WithSynchronous(sync))
	if err != nil {
		return nil, nil, err
	}
	if err := sqlitestore.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, nil, err
	}
	// As pgstore's: the bench's backlog is unbounded, like river's.
	st, err := sqlitestore.New[int](db, sqlitestore.WithCapacityCheck(false))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return st, func() { _ = db.Close() }, nil
}

// openSQL opens a new file at path as river and goqite are told to: WAL,
// env's synchronous setting, a 5 s busy timeout, and one connection
// (river's advice, against SQLITE_BUSY).
func openSQL(env DurableEnv, path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous("+env.SQLiteSync+")&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// newRiverSQLite opens a new file, migrates river's tables into it and
// returns a client on it at river's benchmark fetch settings (cooldown
// 2 ms, poll 20 ms) with workers workers (none: an insert-only client)
// whose jobs call count.
func newRiverSQLite(ctx context.Context, env DurableEnv, workers int, count func()) (*river.Client[*sql.Tx], *sql.DB, error) {
	db, err := openSQL(env, env.SQLiteFile("river"))
	if err != nil {
		return nil, nil, err
	}
	driver := riversqlite.New(db)
	mig, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quietLogger()})
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	if _, err := mig.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{count: count})
	cfg := &river.Config{Logger: quietLogger(), Workers: ws, FetchCooldown: riverFetches[0].cooldown, FetchPollInterval: riverFetches[0].poll}
	if workers > 0 {
		cfg.Queues = map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}}
	}
	c, err := river.NewClient(driver, cfg)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return c, db, nil
}

func runRiverSQLite(ctx context.Context, cfg DurableConfig, env DurableEnv) ([]DurableResult, error) {
	const name = "river-sqlite"
	var out []DurableResult
	for _, g := range cfg.Producers {
		if !cfg.Runs("insert") {
			break
		}
		c, db, err := newRiverSQLite(ctx, env, 0, nil)
		if err != nil {
			return out, err
		}
		el, err := insertConcurrently(ctx, cfg.InsertN, g, func(ctx context.Context) error {
			_, err := c.Insert(ctx, noopArgs{}, nil)
			return err
		})
		db.Close()
		if err != nil {
			return out, fmt.Errorf("insert: %w", err)
		}
		out = append(out, durableResult(name, "insert", fmt.Sprintf("producers=%d", g), cfg.InsertN, el))
	}

	params := make([]river.InsertManyParams, max(cfg.BatchN, cfg.BurnN))
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	for _, size := range cfg.batchSizes() {
		if !cfg.Runs("batch") {
			break
		}
		c, db, err := newRiverSQLite(ctx, env, 0, nil)
		if err != nil {
			return out, err
		}
		done := 0
		el, err := chunked(cfg.BatchN, size, func(n int) error {
			_, err := c.InsertMany(ctx, params[done:done+n])
			done += n
			return err
		})
		db.Close()
		if err != nil {
			return out, fmt.Errorf("batch insert: %w", err)
		}
		out = append(out, durableResult(name, "batch insert", batchSetting("InsertMany", size), cfg.BatchN, el))
	}

	if cfg.Runs("burn") {
		r, err := riverSQLiteBurn(ctx, cfg, env, params[:cfg.BurnN])
		if err != nil {
			return out, fmt.Errorf("burn-down: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// riverSQLiteBurn queues the burn-down's jobs (InsertMany in calls of
// 1 000, untimed), then works them off with cfg.SQLiteWorkers workers,
// timed until Client.Stop returns, by which time river's completer has
// recorded every finished job.
func riverSQLiteBurn(ctx context.Context, cfg DurableConfig, env DurableEnv, params []river.InsertManyParams) (DurableResult, error) {
	w := cfg.SQLiteWorkers
	counter := newBurnCounter(cfg.BurnN)
	c, db, err := newRiverSQLite(ctx, env, w, counter.inc)
	if err != nil {
		return DurableResult{}, err
	}
	defer db.Close()
	for i := 0; i < len(params); i += 1000 {
		if _, err := c.InsertMany(ctx, params[i:min(i+1000, len(params))]); err != nil {
			return DurableResult{}, fmt.Errorf("setup: %w", err)
		}
	}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return DurableResult{}, err
	}
	jobs, all := counter.wait(cfg.BurnLimit)
	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		return DurableResult{}, err
	}
	r := durableResult("river-sqlite", "burn-down", fmt.Sprintf("workers=%d, %s", w, riverFetches[0].name), jobs, time.Since(start))
	if !all {
		r.Note = fmt.Sprintf("capped at %s: %d of %d jobs", cfg.BurnLimit, jobs, cfg.BurnN)
	}
	return r, nil
}

// goqiteSchema is goqite v0.4.0's schema_sqlite.sql, which goqite asks
// its users to apply.
const goqiteSchema = `create table goqite (
  id text primary key default ('m_' || lower(hex(randomblob(16)))),
  created text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  updated text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  queue text not null,
  body blob not null,
  timeout text not null default (strftime('%Y-%m-%dT%H:%M:%fZ')),
  received integer not null default 0,
  priority integer not null default 0
) strict;

create trigger goqite_updated_timestamp after update on goqite begin
  update goqite set updated = strftime('%Y-%m-%dT%H:%M:%fZ') where id = old.id;
end;

create index goqite_queue_priority_created_idx on goqite (queue, priority desc, created);`

// newGoqite opens a new file with goqite's schema and a queue on it.
func newGoqite(ctx context.Context, env DurableEnv) (*goqite.Queue, *sql.DB, error) {
	db, err := openSQL(env, env.SQLiteFile("goqite"))
	if err != nil {
		return nil, nil, err
	}
	if _, err := db.ExecContext(ctx, goqiteSchema); err != nil {
		db.Close()
		return nil, nil, err
	}
	return goqite.New(goqite.NewOpts{DB: db, Name: "bench"}), db, nil
}

// runGoqite runs goqite's side: Send from 1 and 10 goroutines, and the
// burn-down. goqite has no batch API (a caller may Send in its own
// transaction, SendTx), so it has no batch-insert case.
func runGoqite(ctx context.Context, cfg DurableConfig, env DurableEnv) ([]DurableResult, error) {
	const name = "goqite"
	var out []DurableResult
	for _, g := range cfg.Producers {
		if !cfg.Runs("insert") {
			break
		}
		q, db, err := newGoqite(ctx, env)
		if err != nil {
			return out, err
		}
		el, err := insertConcurrently(ctx, cfg.InsertN, g, func(ctx context.Context) error {
			return q.Send(ctx, goqite.Message{Body: []byte("{}")})
		})
		db.Close()
		if err != nil {
			return out, fmt.Errorf("insert: %w", err)
		}
		out = append(out, durableResult(name, "insert", fmt.Sprintf("producers=%d", g), cfg.InsertN, el))
	}
	if cfg.Runs("burn") {
		r, err := goqiteBurn(ctx, cfg, env)
		if err != nil {
			return out, fmt.Errorf("burn-down: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// goqiteBurn queues the burn-down's jobs (SendTx, 1 000 a transaction,
// untimed), then has cfg.SQLiteWorkers goroutines Receive and Delete
// until all are done, polling every millisecond when Receive finds none
// (as goqite's ReceiveAndWait does), timed until the last Delete returned.
func goqiteBurn(ctx context.Context, cfg DurableConfig, env DurableEnv) (DurableResult, error) {
	n, w := cfg.BurnN, cfg.SQLiteWorkers
	q, db, err := newGoqite(ctx, env)
	if err != nil {
		return DurableResult{}, err
	}
	defer db.Close()
	for i := 0; i < n; i += 1000 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return DurableResult{}, err
		}
		for j := i; j < min(i+1000, n); j++ {
			if err := q.SendTx(ctx, tx, goqite.Message{Body: []byte("{}")}); err != nil {
				_ = tx.Rollback()
				return DurableResult{}, err
			}
		}
		if err := tx.Commit(); err != nil {
			return DurableResult{}, err
		}
	}
	var (
		done     atomic.Int64
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
	)
	deadline := time.Now().Add(cfg.BurnLimit)
	start := time.Now()
	for range w {
		wg.Go(func() {
			for done.Load() < int64(n) && time.Now().Before(deadline) {
				m, err := q.Receive(ctx)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if m == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				if err := q.Delete(ctx, m.ID); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if p := firstErr.Load(); p != nil {
		return DurableResult{}, errors.Join(*p)
	}
	jobs := int(done.Load())
	r := durableResult("goqite", "burn-down", fmt.Sprintf("goroutines=%d", w), jobs, el)
	if jobs < n {
		r.Note = fmt.Sprintf("capped at %s: %d of %d jobs", cfg.BurnLimit, jobs, n)
	}
	return r, nil
}
