package admin_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// A job fails for good; the admin API lists it among the dead jobs and
// runs it again.
func Example() {
	ctx := context.Background()
	dead := make(chan struct{})
	done := make(chan string)
	failed := false
	q, _ := queue.New(func(_ context.Context, j queue.Job[string]) error {
		if !failed {
			failed = true
			return queue.Permanent(errors.New("downstream said no"))
		}
		done <- j.Payload
		return nil
	}, queue.WithWorkers(1, 1))
	q.OnDead(func(context.Context, queue.Job[string], error) { close(dead) })
	_ = q.Start(ctx)
	defer q.Stop(ctx)

	_ = q.Enqueue(ctx, queue.Job[string]{Key: "invoice/42", Payload: "hello"})
	<-dead

	a := q.Admin()
	page, _ := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Dead, KeyPrefix: "invoice/"}})
	for _, j := range page.Jobs {
		fmt.Printf("%s %s: %s\n", j.State, j.Key, j.LastError)
		_ = a.Retry(ctx, j.ID)
	}
	fmt.Println("ran again:", <-done)
	// Output:
	// dead invoice/42: permanent: downstream said no
	// ran again: hello
}
