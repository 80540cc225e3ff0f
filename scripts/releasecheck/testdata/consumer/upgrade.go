// A program that uses both stores at v1.0.0 with a later core: it must
// build and vet; it is not run.
package main

import (
	"context"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/redisstore"
	"github.com/redis/go-redis/v9"
)

type Greeting struct {
	Name string `json:"name"`
}

func handle(ctx context.Context, j queue.Job[Greeting]) error { return nil }

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("QUEUE_PG_URL"))
	if err != nil {
		log.Fatal(err)
	}
	pg, err := pgstore.New[Greeting](pool)
	if err != nil {
		log.Fatal(err)
	}
	rs, err := redisstore.New[Greeting](redis.NewClient(&redis.Options{Addr: os.Getenv("QUEUE_REDIS_ADDR")}))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := queue.NewWithStore(pg, handle); err != nil {
		log.Fatal(err)
	}
	if _, err := queue.NewWithStore(rs, handle); err != nil {
		log.Fatal(err)
	}
}
