package sqlitestore_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

// BenchmarkEnqueueMany: EnqueueMany of 1 000 jobs, one write transaction
// (synchronous=FULL); jobs/s is the figure.
func BenchmarkEnqueueMany(b *testing.B) {
	for _, sync := range []sqlitestore.Synchronous{sqlitestore.SyncFull, sqlitestore.SyncNormal} {
		b.Run("sync="+sync.String(), func(b *testing.B) { benchEnqueueMany(b, sync) })
	}
}

func benchEnqueueMany(b *testing.B, sync sqlitestore.Synchronous) {
	db := openDB(b, sqlitestore.WithSynchronous(sync))
	s, err := sqlitestore.New[int](db)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }); err != nil {
		b.Fatal(err)
	}
	jobs := make([]queue.Job[int], 1000)
	for i := range jobs {
		jobs[i].Payload = i
	}
	ctx := context.Background()
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.EnqueueMany(ctx, jobs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(jobs))/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkEnqueueOne: one producer, one job per Enqueue, each durable
// on return, as qbench's insert case with one producer; ns/op is the
// time a job takes. Under FULL most of it is the commit's fsync (see
// BenchmarkBareInsertFull); NORMAL shows the rest, the store's own cost.
func BenchmarkEnqueueOne(b *testing.B) {
	for _, sync := range []sqlitestore.Synchronous{sqlitestore.SyncFull, sqlitestore.SyncNormal} {
		b.Run("sync="+sync.String(), func(b *testing.B) { benchEnqueueOne(b, sync) })
	}
}

func benchEnqueueOne(b *testing.B, sync sqlitestore.Synchronous) {
	db := openDB(b, sqlitestore.WithSynchronous(sync))
	s, err := sqlitestore.New[int](db, sqlitestore.WithCapacityCheck(false))
	if err != nil {
		b.Fatal(err)
	}
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(1<<20, 0))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if err := q.Enqueue(ctx, queue.Job[int]{Payload: i}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBareInsertFull is the floor under BenchmarkEnqueueOne: one
// row inserted and committed per op (an autocommit INSERT of a small
// blob) on one connection of the same driver, WAL, synchronous=FULL. It
// is what a commit that survives a power loss costs on this disk.
func BenchmarkBareInsertFull(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bare.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)")
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec("CREATE TABLE t (id INTEGER PRIMARY KEY, payload BLOB NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	st, err := db.Prepare("INSERT INTO t (payload) VALUES (?)")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	payload := []byte("1")
	b.ResetTimer()
	for b.Loop() {
		if _, err := st.Exec(payload); err != nil {
			b.Fatal(err)
		}
	}
}
