// Command periodic runs jobs on schedules: a cron expression parsed by
// github.com/robfig/cron/v3 (its parsed schedules are queue.Schedules as
// they are) and the built-in queue.Every. It prints each run and, at the
// end, the periodic jobs' status.
//
// With a durable store, start it in two terminals at once
// (-store postgres://… or redis://…): every process runs the schedules,
// and each period still runs once, in one of them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/examples/internal/storeflag"
)

// task names what a periodic run does.
type task struct{ Name string }

func main() {
	storeURL := flag.String("store", "memory", storeflag.Usage)
	runFor := flag.Duration("for", 7*time.Second, "how long to run")
	flag.Parse()
	if err := run(*storeURL, *runFor); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(storeURL string, runFor time.Duration) error {
	ctx := context.Background()
	store, closeStore, err := storeflag.Open[task](ctx, storeURL)
	if err != nil {
		return err
	}
	defer closeStore()

	pid := os.Getpid()
	handler := func(ctx context.Context, j queue.Job[task]) error {
		fmt.Printf("%s  pid %d  run %-8s key %s attempt %d\n", time.Now().Format("15:04:05.000"), pid, j.Payload.Name, j.Key, j.Attempt)
		if j.Payload.Name == "flaky" && j.Attempt == 1 {
			return errors.New("first attempt fails; retried like any job")
		}
		return nil
	}
	opts := []queue.Option{queue.WithRetry(3, 500*time.Millisecond, time.Second)}
	var q *queue.Queue[task]
	if store != nil {
		// One name for the whole fleet: the processes share the queue.
		q, err = queue.NewWithStore(store, handler, append(opts, queue.WithName("periodic_example"))...)
	} else {
		q, err = queue.New(handler, opts...)
	}
	if err != nil {
		return err
	}

	jobs, err := schedules()
	if err != nil {
		return err
	}
	for _, p := range jobs {
		if err := q.Periodic(p.name, p.s, queue.Job[task]{Payload: task{p.name}}, p.opts); err != nil {
			return err
		}
	}
	if err := q.Start(ctx); err != nil {
		return err
	}
	time.Sleep(runFor)

	fmt.Println("\nperiodic jobs (as this process saw them):")
	for _, p := range q.Stats().Periodic {
		last := "none"
		if !p.Last.IsZero() {
			last = p.Last.Format("15:04:05")
		}
		fmt.Printf("  %-8s next %s  last %-8s  outcome %-9q runs here %d\n", p.Name,
			p.Next.Format(time.DateTime), last, p.LastOutcome, p.Runs)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return q.Stop(stopCtx)
}

// periodicJob is one schedule the example registers.
type periodicJob struct {
	name string
	s    queue.Schedule
	opts queue.PeriodicOptions
}

// schedules returns the example's periodic jobs: two robfig/cron
// expressions and a queue.Every.
func schedules() ([]periodicJob, error) {
	// Every two seconds, in cron's six-field form (seconds first).
	everyTwo, err := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow).
		Parse("*/2 * * * * *")
	if err != nil {
		return nil, err
	}
	// At 03:00 every day (standard five fields); it does not fire during
	// the demo, but Stats shows when it will.
	nightly, err := cron.ParseStandard("0 3 * * *")
	if err != nil {
		return nil, err
	}
	return []periodicJob{
		{"tick", everyTwo, queue.PeriodicOptions{}},
		{"flaky", queue.Every(3 * time.Second), queue.PeriodicOptions{Jitter: 500 * time.Millisecond}},
		{"nightly", nightly, queue.PeriodicOptions{}},
	}, nil
}
