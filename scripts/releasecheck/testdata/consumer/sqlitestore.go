// A user's first program on sqlitestore: enqueue a job in a SQLite file
// (in a temporary directory), let the handler run it, stop. It exits 0
// only if the job ran.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

type Greeting struct {
	Name string `json:"name"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir, err := os.MkdirTemp("", "sqlitestore")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlitestore.Open(filepath.Join(dir, "jobs.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := sqlitestore.Migrate(ctx, db); err != nil {
		log.Fatal(err)
	}
	store, err := sqlitestore.New[Greeting](db)
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan string, 1)
	handle := queue.Handler[Greeting](func(ctx context.Context, j queue.Job[Greeting]) error {
		ran <- j.Payload.Name
		return nil
	})
	q, err := queue.NewWithStore(store, handle)
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if err := q.Enqueue(ctx, queue.Job[Greeting]{Key: "hello", Payload: Greeting{Name: "sqlitestore"}}); err != nil {
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
