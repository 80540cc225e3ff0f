package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"modernc.org/sqlite"
)

// Synchronous is how far a commit waits for the disk (SQLite's
// PRAGMA synchronous, in WAL mode).
type Synchronous int

const (
	// SyncFull (the default) makes every commit wait for the write-ahead
	// log to reach the disk (fsync): a job whose Enqueue returned, or an
	// outcome that returned, survives a power loss or an operating-system
	// crash, not only the process's death.
	SyncFull Synchronous = iota
	// SyncNormal lets commits return once the write-ahead log is written
	// (not synced); it is synced at each checkpoint. A process that dies,
	// even by SIGKILL, loses nothing, but a power loss or an
	// operating-system crash may forget the last commits before it: jobs
	// accepted then are lost and outcomes recorded then run again. The
	// database is never corrupted. Commits are about ten times cheaper.
	SyncNormal
)

func (s Synchronous) String() string {
	if s == SyncNormal {
		return "NORMAL"
	}
	return "FULL"
}

// OpenOption configures Open.
type OpenOption func(*openOptions) error

type openOptions struct {
	sync        Synchronous
	busyTimeout time.Duration
	readers     int
	wake        time.Duration
}

// WithSynchronous sets how far each commit waits for the disk (default
// SyncFull; see Synchronous).
func WithSynchronous(s Synchronous) OpenOption {
	return func(o *openOptions) error {
		if s != SyncFull && s != SyncNormal {
			return fmt.Errorf("sqlitestore: WithSynchronous(%d): not SyncFull or SyncNormal", int(s))
		}
		o.sync = s
		return nil
	}
}

// WithBusyTimeout sets how long a write waits for another process's write
// to end before it is retried (default 5s; at least 1ms). A write is
// retried until its caller's context ends, so SQLITE_BUSY never reaches a
// caller; the timeout only bounds one wait inside SQLite.
func WithBusyTimeout(d time.Duration) OpenOption {
	return func(o *openOptions) error {
		if d < time.Millisecond {
			return fmt.Errorf("sqlitestore: WithBusyTimeout(%v): must be >= 1ms", d)
		}
		o.busyTimeout = d
		return nil
	}
}

// WithWakeInterval sets how often each process looks whether another
// process changed the file (default 2ms; at least 100µs): the latency
// with which a job added, or made due, by another process is seen. The
// look is PRAGMA data_version, a read of the shared-memory index with no
// I/O. A process's own writes wake it at once.
func WithWakeInterval(d time.Duration) OpenOption {
	return func(o *openOptions) error {
		if d < 100*time.Microsecond {
			return fmt.Errorf("sqlitestore: WithWakeInterval(%v): must be >= 100µs", d)
		}
		o.wake = d
		return nil
	}
}

// DefaultWakeInterval is WithWakeInterval's default.
const DefaultWakeInterval = 2 * time.Millisecond

// DB is one SQLite database file, opened for the queues kept in it: it
// holds the writer connection and its goroutine, which every queue of the
// process on the file shares, the readers' connections, and the watch for
// other processes' changes. Open one DB per file per process; give it to
// New for each queue. All methods are safe for concurrent use.
type DB struct {
	path string
	o    openOptions
	w    *sql.DB // the writer goroutine's one connection
	r    *sql.DB // readers
	app  *sql.DB // SQL(): the program's own statements and EnqueueTx

	ops  chan *op
	lock *fileLock
	// kept are the statements prepared on the writer's connection and
	// reused across batches, and toKeep the queries the current batch
	// met for the first time; only the writer goroutine touches them.
	kept   map[string]*sql.Stmt
	toKeep []string

	mu       sync.Mutex
	watchers map[*watcher]struct{}

	stop    context.CancelFunc
	wg      sync.WaitGroup
	closeMu sync.Once
}

// watcher is told when another connection changed the file.
type watcher struct{ fn func() }

// Open opens (creating it if needed) the SQLite database file at path,
// in WAL mode, for the queues kept in it. The file is not migrated: call
// Migrate. Close it after the stores that use it.
func Open(path string, opts ...OpenOption) (*DB, error) {
	o := openOptions{busyTimeout: 5 * time.Second, readers: 4, wake: DefaultWakeInterval}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if path == "" {
		return nil, errors.New("sqlitestore: Open: empty path")
	}
	db := &DB{path: path, o: o, ops: make(chan *op, 4096), watchers: map[*watcher]struct{}{}, kept: map[string]*sql.Stmt{}}
	var err error
	if db.lock, err = openLock(path); err != nil {
		return nil, fmt.Errorf("sqlitestore: Open %s: the writers' lock file: %w", path, err)
	}
	if db.w, err = db.open(1, "immediate"); err != nil {
		return nil, err
	}
	// WAL must be set before the readers open; it is a property of the
	// file, kept across opens.
	if _, err := db.w.Exec("PRAGMA journal_mode=WAL"); err != nil {
		_ = db.w.Close()
		return nil, fmt.Errorf("sqlitestore: Open %s: setting WAL mode: %w", path, err)
	}
	if db.r, err = db.open(o.readers, "deferred"); err != nil {
		_ = db.w.Close()
		return nil, err
	}
	if db.app, err = db.open(0, "immediate"); err != nil {
		_ = db.w.Close()
		_ = db.r.Close()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	db.stop = stop
	db.wg.Add(2)
	go func() {
		defer db.wg.Done()
		db.writeLoop(ctx)
	}()
	go func() {
		defer db.wg.Done()
		db.watchLoop(ctx)
	}()
	return db, nil
}

// open opens a pool of n connections (0: no bound) to the file with the
// store's pragmas; txlock is how BEGIN takes locks.
func (db *DB) open(n int, txlock string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", db.o.busyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous("+db.o.sync.String()+")")
	q.Add("_pragma", "foreign_keys(0)")
	q.Set("_txlock", txlock)
	d, err := sql.Open("sqlite", "file:"+db.path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: Open %s: %w", db.path, err)
	}
	if n > 0 {
		d.SetMaxOpenConns(n)
		d.SetMaxIdleConns(n)
	}
	d.SetConnMaxIdleTime(0)
	d.SetConnMaxLifetime(0)
	if err := d.Ping(); err != nil {
		_ = d.Close()
		return nil, fmt.Errorf("sqlitestore: Open %s: %w", db.path, err)
	}
	return d, nil
}

// SQL returns a pool of connections to the file for the program's own
// data: its transactions (BeginTx) take the write lock at once (BEGIN
// IMMEDIATE), so that they wait for other writers instead of failing
// with SQLITE_BUSY, and are what EnqueueTx takes. Do not close it.
func (db *DB) SQL() *sql.DB { return db.app }

// Path returns the file's path as given to Open.
func (db *DB) Path() string { return db.path }

// Close stops the writer and the watch and closes the connections. Close
// the stores that use the DB first.
func (db *DB) Close() error {
	var err error
	db.closeMu.Do(func() {
		db.stop()
		db.wg.Wait()
		err = errors.Join(db.closeKept(), db.w.Close(), db.r.Close(), db.app.Close(), db.lock.close())
	})
	return err
}

func (db *DB) addWatcher(fn func()) *watcher {
	w := &watcher{fn: fn}
	db.mu.Lock()
	db.watchers[w] = struct{}{}
	db.mu.Unlock()
	return w
}

func (db *DB) removeWatcher(w *watcher) {
	db.mu.Lock()
	delete(db.watchers, w)
	db.mu.Unlock()
}

// watchLoop polls PRAGMA data_version on a connection of its own every
// wake interval and tells the watchers when the file changed: another
// connection (another process, or this process's writer) committed.
func (db *DB) watchLoop(ctx context.Context) {
	var conn *sql.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close()
		}
	}()
	t := time.NewTicker(db.o.wake)
	defer t.Stop()
	var last int64 = -1
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if conn == nil {
			c, err := db.r.Conn(ctx)
			if err != nil {
				continue
			}
			conn = c
		}
		var v int64
		if err := conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&v); err != nil {
			_ = conn.Close()
			conn = nil
			continue
		}
		if v == last {
			continue
		}
		changed := last >= 0
		last = v
		if !changed {
			continue
		}
		db.mu.Lock()
		ws := make([]*watcher, 0, len(db.watchers))
		for w := range db.watchers {
			ws = append(ws, w)
		}
		db.mu.Unlock()
		for _, w := range ws {
			w.fn()
		}
	}
}

// isBusy reports whether err is SQLite's "database is locked" (or
// "table is locked"): another connection holds the lock longer than the
// busy timeout, or a snapshot went stale.
func isBusy(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		c := se.Code() & 0xff
		return c == 5 || c == 6 // SQLITE_BUSY, SQLITE_LOCKED
	}
	return false
}
