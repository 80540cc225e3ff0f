package pgstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
)

type Announce struct {
	InfoHash string `json:"info_hash"`
	Peer     string `json:"peer"`
}

// A queue whose jobs live in PostgreSQL. Run it in as many processes as
// you like: they share the queue.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil { // idempotent, safe to race
		log.Fatal(err)
	}
	store, err := pgstore.New[Announce](pool)
	if err != nil {
		log.Fatal(err)
	}
	q, err := queue.NewWithStore(store, func(ctx context.Context, j queue.Job[Announce]) error {
		fmt.Println("forwarding", j.Payload.InfoHash, "for", j.Payload.Peer)
		return nil
	}, queue.WithName("announces"))
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer q.Stop(ctx)
	err = q.Enqueue(ctx, queue.Job[Announce]{Key: "abc:peer1", Payload: Announce{InfoHash: "abc", Peer: "peer1"}})
	if err != nil {
		log.Fatal(err)
	}
}

// A job that exists only if the host's transaction commits.
func ExampleStore_EnqueueTx() {
	ctx := context.Background()
	var (
		pool  *pgxpool.Pool            // the host's pool
		store *pgstore.Store[Announce] // passed to queue.New
	)
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE torrents SET seen = now() WHERE info_hash = $1", "abc"); err != nil {
			return err
		}
		_, err := store.EnqueueTx(ctx, tx, queue.Job[Announce]{Key: "abc:peer1", Payload: Announce{InfoHash: "abc", Peer: "peer1"}})
		return err
	})
	if err != nil {
		log.Print(err)
	}
}
