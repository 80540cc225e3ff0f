// A user's first program on pgstore: enqueue a job in PostgreSQL
// (QUEUE_PG_URL), let the handler run it, stop. The queue's name is the
// first argument. It exits 0 only if the job ran.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
)

type Greeting struct {
	Name string `json:"name"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("QUEUE_PG_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.Migrate(ctx, pool); err != nil {
		log.Fatal(err)
	}
	store, err := pgstore.New[Greeting](pool)
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan string, 1)
	handle := queue.Handler[Greeting](func(ctx context.Context, j queue.Job[Greeting]) error {
		ran <- j.Payload.Name
		return nil
	})
	q, err := queue.NewWithStore(store, handle, queue.WithName(os.Args[1]))
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if err := q.Enqueue(ctx, queue.Job[Greeting]{Key: "hello", Payload: Greeting{Name: "pgstore"}}); err != nil {
		log.Fatal(err)
	}
	select {
	case name := <-ran:
		fmt.Println("job ran:", name)
	case <-ctx.Done():
		log.Fatal("the job did not run within 30s")
	}
	if err := q.Stop(ctx); err != nil {
		log.Fatal(err)
	}
}
