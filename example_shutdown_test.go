package queue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/queuekit/queue"
)

// drain stops q after a signal. Stop runs every job accepted so far and
// returns nil once the queue has stopped; if that takes longer than
// grace, Shutdown cancels the handlers still running (their jobs are put
// back without using an attempt) and waits up to 5 s for them to return.
// With the in-memory store, jobs still ready or scheduled then are lost
// when the process exits; a durable store keeps them for the next start.
func drain[T any](q *queue.Queue[T], grace time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := q.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return q.Shutdown(ctx)
}

// Ctrl-C drains the queue: the running job finishes and the jobs waiting
// behind it run before the program exits. The signal context is not the
// one passed to Start: cancelling Start's context is a hard shutdown (as
// Shutdown), which would cancel the running handler and leave the others
// unrun.
func Example_shutdownOnSignal() {
	// A program gets sig from
	//	signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// Here ctrlC stands for the signal.
	sig, ctrlC := context.WithCancel(context.Background())
	started := make(chan struct{}, 3)
	q, err := queue.New(func(ctx context.Context, job queue.Job[string]) error {
		started <- struct{}{}
		<-sig.Done() // the work outlasts the Ctrl-C
		if err := ctx.Err(); err != nil {
			fmt.Println(job.Payload, "interrupted:", err)
			return err
		}
		fmt.Println(job.Payload, "done")
		return nil
	}, queue.WithWorkers(1, 1)) // one worker: the output comes in order
	if err != nil {
		panic(err)
	}
	if err := q.Start(context.Background()); err != nil { // not sig
		panic(err)
	}
	for _, p := range []string{"announce a", "announce b", "announce c"} {
		if err := q.Enqueue(context.Background(), queue.Job[string]{Payload: p}); err != nil {
			panic(err)
		}
	}
	<-started // "announce a" is running; b and c wait for the worker

	fmt.Println("^C")
	ctrlC()
	<-sig.Done()
	if err := drain(q, 30*time.Second); err != nil {
		fmt.Println("drain:", err)
	}
	st := q.Stats()
	fmt.Println("accepted:", st.Enqueued, "done:", st.Done, "state:", st.State)
	// Output:
	// ^C
	// announce a done
	// announce b done
	// announce c done
	// accepted: 3 done: 3 state: stopped
}
