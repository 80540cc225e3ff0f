package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/queuekit/queue"
)

// The forwarder's queue settings come from flags and environment
// variables in one call each, and turn into queue options.
func ExampleQueueConfig() {
	os.Setenv("FORWARDER_QUEUE_SIZE", "5000") // as a deployment would
	defer os.Unsetenv("FORWARDER_QUEUE_SIZE")

	cfg := DefaultQueueConfig()
	if err := cfg.FromEnv(""); err != nil {
		fmt.Println(err)
		return
	}
	fs := flag.NewFlagSet("tracker", flag.ContinueOnError)
	cfg.RegisterFlags(fs) // -Q, -w, -W, --queue-throttle-top, --forwarder-suspend, ...
	if err := fs.Parse([]string{"-w", "4", "--queue-throttle-top", "8", "--forwarder-suspend", "2m"}); err != nil {
		fmt.Println(err)
		return
	}

	opts, err := cfg.Options()
	if err != nil {
		fmt.Println(err)
		return
	}
	q, err := queue.New(func(ctx context.Context, j queue.Job[string]) error { return nil }, opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	st := q.Stats()
	fmt.Println("capacity:", st.Capacity)
	fmt.Println("workers:", st.BaseWorkers, "to", st.MaxWorkers)
	fmt.Println("throttle top:", cfg.ThrottleTopN, "suspend:", cfg.SuspendSeconds, "s")

	// A malformed variable is an error naming it.
	os.Setenv("QUEUE_THROTTLE_TOP", "twenty")
	defer os.Unsetenv("QUEUE_THROTTLE_TOP")
	fmt.Println(cfg.FromEnv(""))
	// Output:
	// capacity: 5000
	// workers: 4 to 8
	// throttle top: 8 suspend: 120 s
	// forwarder: environment variable QUEUE_THROTTLE_TOP="twenty": not an integer
}
