//go:build sqlitestore && pgstore

package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	"github.com/riverqueue/river/rivermigrate"
	"maragu.dev/goqite"
	_ "modernc.org/sqlite" // river's and goqite's driver: the one sqlitestore uses

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
	"github.com/queuekit/queue/storekit"
)

// TestSQLiteCompare puts sqlitestore beside river on its SQLite driver
// (riversqlite) and goqite, each on a new file in WAL mode with
// synchronous=FULL (an accepted job survives a power loss), and pgstore on
// the PostgreSQL at QUEUE_PG_URL, in one run:
//
//	QBENCH_SQLITE=1 go test -tags sqlitestore,pgstore -run TestSQLiteCompare -v -timeout 30m ./bench
//
// Cases: the burn-down of SQLITE_BURN_N (default 100 000) no-op jobs
// enqueued beforehand, with 100 workers (goqite: 100 goroutines
// receiving and deleting); one producer enqueueing SQLITE_INSERT_N
// (default 1 000) jobs one call at a time, each durable on return; and
// sqlitestore's EnqueueMany in batches of 1 000. SQLITE_CASES, a
// comma-separated list of insert, many, burn-sqlitestore, burn-river,
// burn-goqite and burn-pgstore, runs only those (so that the cases can be
// measured in separate quiet windows); all when unset.
func TestSQLiteCompare(t *testing.T) {
	if os.Getenv("QBENCH_SQLITE") == "" {
		t.Skip("set QBENCH_SQLITE=1 to run the SQLite comparison")
	}
	ctx := context.Background()
	burnN, insertN := envInt("SQLITE_BURN_N", 100000), envInt("SQLITE_INSERT_N", 1000)
	const workers = 100
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name+".db") }
	var results []DurableResult
	add := func(r DurableResult, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s %s: %v", r.System, r.Case, err)
		}
		results = append(results, r)
		t.Logf("%-12s %-22s %-16s %8d jobs %9.2fs %10.0f jobs/s", r.System, r.Case, r.Setting, r.Jobs, r.Elapsed.Seconds(), r.Rate)
	}
	runs := func(kase string) bool {
		cases := os.Getenv("SQLITE_CASES")
		return cases == "" || slices.Contains(strings.Split(cases, ","), kase)
	}
	if runs("insert") {
		for _, sync := range []sqlitestore.Synchronous{sqlitestore.SyncFull, sqlitestore.SyncNormal} {
			add(sqliteInsert(ctx, file("sqi"+sync.String()), insertN, sync))
		}
		add(riverSQLiteInsert(ctx, file("rvi"), insertN))
		add(goqiteInsert(ctx, file("gqi"), insertN))
	}
	if runs("many") {
		add(sqliteMany(ctx, file("sqm"), burnN))
	}
	if runs("burn-sqlitestore") {
		for _, sync := range []sqlitestore.Synchronous{sqlitestore.SyncFull, sqlitestore.SyncNormal} {
			add(sqliteBurn(ctx, file("sqb"+sync.String()), burnN, workers, sync))
		}
	}
	if runs("burn-river") {
		add(riverSQLiteBurn(ctx, file("rvb"), burnN, workers))
	}
	if runs("burn-goqite") {
		add(goqiteBurn(ctx, file("gqb"), burnN, workers))
	}
	if runs("burn-pgstore") {
		add(pgstoreBurn(ctx, burnN, workers))
	}
	_ = results
}

func envInt(name string, def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv(name), &n); err == nil && n > 0 {
		return n
	}
	return def
}

// openSQL opens path as river and goqite are told to: WAL, FULL, a busy
// timeout, and one connection (river's advice, against SQLITE_BUSY).
func openSQL(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, db.Ping()
}

func openSQLiteStore(ctx context.Context, path string, sync sqlitestore.Synchronous) (*sqlitestore.DB, *sqlitestore.Store[int], error) {
	db, err := sqlitestore.Open(path, sqlitestore.WithSynchronous(sync))
	if err != nil {
		return nil, nil, err
	}
	if err := sqlitestore.Migrate(ctx, db); err != nil {
		db.Close()
		return nil, nil, err
	}
	s, err := sqlitestore.New[int](db, sqlitestore.WithCapacityCheck(false))
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, s, nil
}

func sqliteInsert(ctx context.Context, path string, n int, sync sqlitestore.Synchronous) (DurableResult, error) {
	r := DurableResult{System: "sqlitestore", Case: "insert, 1 producer", Setting: "sync " + sync.String()}
	db, s, err := openSQLiteStore(ctx, path, sync)
	if err != nil {
		return r, err
	}
	defer db.Close()
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(1<<20, 0))
	if err != nil {
		return r, err
	}
	start := time.Now()
	for i := range n {
		if err := q.Enqueue(ctx, queue.Job[int]{Payload: i}); err != nil {
			return r, err
		}
	}
	return durableResult(r.System, r.Case, r.Setting, n, time.Since(start)), nil
}

func sqliteMany(ctx context.Context, path string, n int) (DurableResult, error) {
	r := DurableResult{System: "sqlitestore", Case: "EnqueueMany of 1000", Setting: "sync FULL"}
	db, s, err := openSQLiteStore(ctx, path, sqlitestore.SyncFull)
	if err != nil {
		return r, err
	}
	defer db.Close()
	if _, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }); err != nil {
		return r, err
	}
	start := time.Now()
	if err := fillMany(ctx, s, n); err != nil {
		return r, err
	}
	return durableResult(r.System, r.Case, r.Setting, n, time.Since(start)), nil
}

type manyStore interface {
	EnqueueMany(ctx context.Context, jobs []queue.Job[int]) ([]storekit.Added, error)
}

func fillMany(ctx context.Context, s manyStore, n int) error {
	batch := make([]queue.Job[int], 0, 1000)
	for i := range n {
		batch = append(batch, queue.Job[int]{Payload: i})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := s.EnqueueMany(ctx, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// burnStore enqueues n jobs into s, then runs them with workers and
// times the run from Start to the last job.
func burnStore(ctx context.Context, s storekit.Store[int], n, workers int) (time.Duration, error) {
	var done atomic.Int64
	finished := make(chan struct{})
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error {
		if done.Add(1) == int64(n) {
			close(finished)
		}
		return nil
	}, queue.WithWorkers(workers, workers), queue.WithCapacity(n+1, 0))
	if err != nil {
		return 0, err
	}
	if err := fillMany(ctx, s.(manyStore), n); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := q.Start(ctx); err != nil {
		return 0, err
	}
	select {
	case <-finished:
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("burn-down: %d of %d jobs in 10 minutes", done.Load(), n)
	}
	took := time.Since(start)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return took, q.Shutdown(sctx)
}

func sqliteBurn(ctx context.Context, path string, n, workers int, sync sqlitestore.Synchronous) (DurableResult, error) {
	r := DurableResult{System: "sqlitestore", Case: "burn-down", Setting: fmt.Sprintf("workers=%d, sync %s", workers, sync)}
	db, s, err := openSQLiteStore(ctx, path, sync)
	if err != nil {
		return r, err
	}
	defer db.Close()
	took, err := burnStore(ctx, s, n, workers)
	return durableResult(r.System, r.Case, r.Setting, n, took), err
}

func pgstoreBurn(ctx context.Context, n, workers int) (DurableResult, error) {
	r := DurableResult{System: "pgstore", Case: "burn-down", Setting: fmt.Sprintf("workers=%d", workers)}
	env := DurableEnv{PostgresURL: DefaultDurable().PostgresURL, Schema: fmt.Sprintf("qbench_sqlcmp_%d", os.Getpid())}
	if u := os.Getenv("QUEUE_PG_URL"); u != "" {
		env.PostgresURL = u
	}
	s, closeFn, err := openPGStore(ctx, env)
	if err != nil {
		return r, err
	}
	defer closeFn()
	took, err := burnStore(ctx, s, n, workers)
	return durableResult(r.System, r.Case, r.Setting, n, took), err
}

func newRiverSQLite(ctx context.Context, path string, workers int, count func()) (*river.Client[*sql.Tx], *sql.DB, error) {
	db, err := openSQL(path)
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
		return nil, nil, err
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{count: count})
	cfg := &river.Config{Logger: quietLogger(), Workers: ws, FetchCooldown: 2 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond}
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

func riverSQLiteInsert(ctx context.Context, path string, n int) (DurableResult, error) {
	r := DurableResult{System: "river-sqlite", Case: "insert, 1 producer", Setting: "sync FULL"}
	c, db, err := newRiverSQLite(ctx, path, 0, nil)
	if err != nil {
		return r, err
	}
	defer db.Close()
	start := time.Now()
	for range n {
		if _, err := c.Insert(ctx, noopArgs{}, nil); err != nil {
			return r, err
		}
	}
	return durableResult(r.System, r.Case, r.Setting, n, time.Since(start)), nil
}

func riverSQLiteBurn(ctx context.Context, path string, n, workers int) (DurableResult, error) {
	r := DurableResult{System: "river-sqlite", Case: "burn-down", Setting: fmt.Sprintf("workers=%d, sync FULL", workers)}
	var done atomic.Int64
	finished := make(chan struct{})
	c, db, err := newRiverSQLite(ctx, path, workers, func() {
		if done.Add(1) == int64(n) {
			close(finished)
		}
	})
	if err != nil {
		return r, err
	}
	defer db.Close()
	params := make([]river.InsertManyParams, 0, 1000)
	for i := range n {
		params = append(params, river.InsertManyParams{Args: noopArgs{}})
		if len(params) == cap(params) || i == n-1 {
			if _, err := c.InsertMany(ctx, params); err != nil {
				return r, err
			}
			params = params[:0]
		}
	}
	start := time.Now()
	if err := c.Start(ctx); err != nil {
		return r, err
	}
	select {
	case <-finished:
	case <-time.After(10 * time.Minute):
		r.Note = fmt.Sprintf("%d of %d jobs in 10 minutes", done.Load(), n)
	}
	took := time.Since(start)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = c.Stop(sctx)
	res := durableResult(r.System, r.Case, r.Setting, int(done.Load()), took)
	res.Note = r.Note
	return res, nil
}

func newGoqite(ctx context.Context, path string) (*goqite.Queue, *sql.DB, error) {
	db, err := openSQL(path)
	if err != nil {
		return nil, nil, err
	}
	if _, err := db.ExecContext(ctx, goqiteSchema); err != nil {
		db.Close()
		return nil, nil, err
	}
	return goqite.New(goqite.NewOpts{DB: db, Name: "bench"}), db, nil
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

func goqiteInsert(ctx context.Context, path string, n int) (DurableResult, error) {
	r := DurableResult{System: "goqite", Case: "insert, 1 producer", Setting: "sync FULL"}
	q, db, err := newGoqite(ctx, path)
	if err != nil {
		return r, err
	}
	defer db.Close()
	start := time.Now()
	for range n {
		if err := q.Send(ctx, goqite.Message{Body: []byte("{}")}); err != nil {
			return r, err
		}
	}
	return durableResult(r.System, r.Case, r.Setting, n, time.Since(start)), nil
}

func goqiteBurn(ctx context.Context, path string, n, workers int) (DurableResult, error) {
	r := DurableResult{System: "goqite", Case: "burn-down", Setting: fmt.Sprintf("goroutines=%d, sync FULL", workers)}
	q, db, err := newGoqite(ctx, path)
	if err != nil {
		return r, err
	}
	defer db.Close()
	for i := 0; i < n; i += 1000 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return r, err
		}
		for j := i; j < min(i+1000, n); j++ {
			if err := q.SendTx(ctx, tx, goqite.Message{Body: []byte("{}")}); err != nil {
				_ = tx.Rollback()
				return r, err
			}
		}
		if err := tx.Commit(); err != nil {
			return r, err
		}
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for done.Load() < int64(n) {
				m, err := q.Receive(ctx)
				if err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if m == nil {
					time.Sleep(time.Millisecond) // goqite's ReceiveAndWait polls likewise
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
	if p := firstErr.Load(); p != nil {
		return r, errors.Join(*p)
	}
	return durableResult(r.System, r.Case, r.Setting, n, time.Since(start)), nil
}
