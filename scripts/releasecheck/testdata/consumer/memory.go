// A user's first program on the in-memory queue: enqueue a job, let the
// handler run it, stop. It exits 0 only if the job ran.
package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/queuekit/queue"
)

type Greeting struct {
	Name string `json:"name"`
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ran := make(chan string, 1)
	handle := queue.Handler[Greeting](func(ctx context.Context, j queue.Job[Greeting]) error {
		ran <- j.Payload.Name
		return nil
	})
	q, err := queue.New(handle)
	if err != nil {
		log.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		log.Fatal(err)
	}
	if err := q.Enqueue(ctx, queue.Job[Greeting]{Key: "hello", Payload: Greeting{Name: "memory"}}); err != nil {
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
