package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The writer: every write of every store on a DB goes through one
// goroutine, which takes the write operations queued meanwhile and runs
// them in one transaction (BEGIN IMMEDIATE … COMMIT), each in a savepoint
// of its own so that one refused operation does not undo the others: one
// commit, and under SyncFull one fsync, per batch (group commit). A caller
// returns after its batch committed, with its own result.

// maxBatch bounds the operations of one write transaction.
const maxBatch = 1000

// ErrClosed is returned for a write queued when the DB is closed.
var errDBClosed = errors.New("sqlitestore: the DB is closed")

// op is one write: fn runs inside the batch's transaction; its error is
// the caller's. fn must keep its effects in the transaction (and in
// variables the caller reads after done), because a batch that meets
// SQLITE_BUSY is rolled back and run again.
type op struct {
	ctx  context.Context
	fn   func(tx *wtx) error
	done chan error
}

// write runs fn in the writer's next batch and returns its error once the
// batch committed (or failed).
func (db *DB) write(ctx context.Context, fn func(tx *wtx) error) error {
	o := &op{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case db.ops <- o:
	case <-ctx.Done():
		return ctx.Err()
	}
	// Once queued the write is not abandoned: its caller learns whether
	// it committed.
	return <-o.done
}

// wtx is the writer's transaction as an operation sees it: statements
// run without the operation's context: an interrupt would roll back the whole batch.
type wtx struct {
	db    *DB
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

// maxKept bounds the statements the writer keeps prepared across
// batches (DB.kept); queries beyond it are parsed in each batch that runs
// them.
const maxKept = 256

// stmt returns q prepared in the batch's transaction: a statement that
// several operations of the batch run (EnqueueMany's insert, the
// outcomes of many workers) is parsed once. A statement the writer kept
// from an earlier batch is not parsed again: parsing the job insert,
// with the table's partial indexes to plan, costs about as much CPU as
// running it (a fifth of a lone producer's Enqueue before it was kept).
func (t *wtx) stmt(q string) (*sql.Stmt, error) {
	if st, ok := t.stmts[q]; ok {
		return st, nil
	}
	var st *sql.Stmt
	if kept, ok := t.db.kept[q]; ok {
		st = t.tx.Stmt(kept) // the writer's one connection: its prepared statement, reused
	} else {
		var err error
		if st, err = t.tx.Prepare(q); err != nil {
			return nil, err
		}
		if len(t.db.kept)+len(t.db.toKeep) < maxKept && !slices.Contains(t.db.toKeep, q) {
			t.db.toKeep = append(t.db.toKeep, q)
		}
	}
	if t.stmts == nil {
		t.stmts = map[string]*sql.Stmt{}
	}
	t.stmts[q] = st
	return st, nil
}

// keep prepares, on the writer's connection outside any transaction, the
// statements the last batch met for the first time, so that later
// batches reuse them (wtx.stmt). The writer goroutine calls it between
// batches, after the callers have their answers; a statement that fails
// to prepare here is parsed per batch as before.
func (db *DB) keep() {
	for _, q := range db.toKeep {
		if _, ok := db.kept[q]; ok {
			continue
		}
		if st, err := db.w.Prepare(q); err == nil {
			db.kept[q] = st
		}
	}
	db.toKeep = db.toKeep[:0]
}

// closeKept closes the statements the writer kept; the writer goroutine
// has stopped.
func (db *DB) closeKept() error {
	var errs []error
	for q, st := range db.kept {
		errs = append(errs, st.Close())
		delete(db.kept, q)
	}
	return errors.Join(errs...)
}

// close closes the batch's prepared statements.
func (t *wtx) close() {
	for _, st := range t.stmts {
		_ = st.Close()
	}
}

// ExecContext runs a statement in the batch's transaction.
func (t *wtx) ExecContext(_ context.Context, q string, args ...any) (sql.Result, error) {
	st, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

// QueryContext runs a query in the batch's transaction.
func (t *wtx) QueryContext(_ context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := t.stmt(q)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}

// QueryRowContext runs a one-row query in the batch's transaction.
func (t *wtx) QueryRowContext(_ context.Context, q string, args ...any) *sql.Row {
	st, err := t.stmt(q)
	if err != nil {
		return t.tx.QueryRow(q, args...) // a Row that carries the error
	}
	return st.QueryRow(args...)
}

// dbtx is what the statements need of a transaction: the writer's, or a
// caller's *sql.Tx (EnqueueTx).
type dbtx interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

var (
	_ dbtx = (*wtx)(nil)
	_ dbtx = (*sql.Tx)(nil)
)

func (db *DB) writeLoop(ctx context.Context) {
	batch := make([]*op, 0, maxBatch)
	for {
		select {
		case <-ctx.Done():
			for {
				select {
				case o := <-db.ops:
					o.done <- errDBClosed
				default:
					return
				}
			}
		case o := <-db.ops:
			batch = append(batch[:0], o)
		}
	fill:
		for len(batch) < maxBatch {
			select {
			case o := <-db.ops:
				batch = append(batch, o)
			default:
				break fill
			}
		}
		db.runBatch(batch)
	}
}

// runBatch runs a batch until it commits, retrying it while SQLite says
// the database is busy (another process holds the write lock longer than
// the busy timeout) and some caller still waits.
func (db *DB) runBatch(batch []*op) {
	errs := make([]error, len(batch))
	backoff := time.Millisecond
	for {
		err := db.tryBatch(batch, errs)
		if err == nil {
			for i, o := range batch {
				o.done <- errs[i]
			}
			db.keep()
			return
		}
		live := batch[:0]
		for _, o := range batch {
			if isBusy(err) && o.ctx.Err() == nil {
				live = append(live, o)
				continue
			}
			if isBusy(err) {
				o.done <- fmt.Errorf("sqlitestore: the database stayed locked by another process: %w", o.ctx.Err())
			} else {
				o.done <- err
			}
		}
		if len(live) == 0 {
			return
		}
		batch, errs = live, errs[:len(live)]
		time.Sleep(backoff)
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// tryBatch runs batch in one transaction; errs receives each operation's
// own error. The error returned is the transaction's: the batch did not
// commit.
func (db *DB) tryBatch(batch []*op, errs []error) error {
	db.lock.lock()
	defer db.lock.unlock()
	tx, err := db.w.BeginTx(context.Background(), nil)
	if err != nil {
		return err
	}
	t := &wtx{db: db, tx: tx}
	defer t.close()
	single := len(batch) == 1
	for i, o := range batch {
		if !single {
			if _, err := t.ExecContext(context.Background(), "SAVEPOINT op"); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		err := o.fn(t)
		if isBusy(err) {
			_ = tx.Rollback()
			return err
		}
		errs[i] = err
		if single {
			if err != nil {
				_ = tx.Rollback()
				return nil
			}
			continue
		}
		if err != nil {
			if _, err := t.ExecContext(context.Background(), "ROLLBACK TO op"); err != nil {
				_ = tx.Rollback()
				return err
			}
		}
		if _, err := t.ExecContext(context.Background(), "RELEASE op"); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}
