// A user's first program on redisstore: enqueue a job in Redis
// (QUEUE_REDIS_ADDR), let the handler run it, stop. The queue's name is
// the first argument. It exits 0 only if the job ran.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/redisstore"
	"github.com/redis/go-redis/v9"
)

type Greeting struct {
	Name string `json:"name"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("QUEUE_REDIS_ADDR")})
	defer rdb.Close()
	store, err := redisstore.New[Greeting](rdb, redisstore.WithPrefix("releasecheck"))
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
	if err := q.Enqueue(ctx, queue.Job[Greeting]{Key: "hello", Payload: Greeting{Name: "redisstore"}}); err != nil {
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
