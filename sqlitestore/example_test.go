package sqlitestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

type Announce struct {
	InfoHash string `json:"info_hash"`
	Peer     string `json:"peer"`
}

// A queue whose jobs live in a SQLite file: they survive a crash or a
// restart of the process, and other processes on the machine may open the
// same file to share the queue.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "jobs.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := sqlitestore.Migrate(ctx, db); err != nil { // idempotent, safe to race
		log.Fatal(err)
	}
	store, err := sqlitestore.New[Announce](db)
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	q, err := queue.NewWithStore(store, func(ctx context.Context, j queue.Job[Announce]) error {
		fmt.Println("forwarding", j.Payload.InfoHash, "for", j.Payload.Peer)
		close(done)
		return nil
	}, queue.WithName("announces"))
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// Enqueue returns once the job is in the file, on disk.
	err = q.Enqueue(ctx, queue.Job[Announce]{Key: "abc:peer1", Payload: Announce{InfoHash: "abc", Peer: "peer1"}})
	if err != nil {
		log.Fatal(err)
	}
	<-done
	if err := q.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: forwarding abc for peer1
}

// A job that exists only if the program's own transaction commits, in the
// same file as its data.
func ExampleStore_EnqueueTx() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := sqlitestore.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	store, err := sqlitestore.New[Announce](db)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := queue.NewWithStore(store, func(context.Context, queue.Job[Announce]) error { return nil }); err != nil {
		log.Fatal(err)
	}
	if _, err := db.SQL().ExecContext(ctx, "CREATE TABLE torrents (info_hash TEXT PRIMARY KEY, seen INTEGER)"); err != nil {
		log.Fatal(err)
	}
	tx, err := db.SQL().BeginTx(ctx, nil) // BEGIN IMMEDIATE: waits for other writers
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO torrents VALUES (?, unixepoch())", "abc"); err != nil {
		log.Fatal(err)
	}
	added, err := store.EnqueueTx(ctx, tx, queue.Job[Announce]{Key: "abc:peer1", Payload: Announce{InfoHash: "abc", Peer: "peer1"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("job", added.ID, "committed with the torrent")
	// Output: job 1 committed with the torrent
}
