// Command survive shows a job surviving kill -9 with sqlitestore: a first
// process enqueues a job into a SQLite file and starts running it; the
// command kills that process with SIGKILL in the middle of the run; a
// second process opens the same file, finds the job (its lease expires
// a second later) and runs it to the end. Nothing but the file is shared.
//
//	go run ./examples/survive
//
// Output (times vary):
//
//	first:  enqueued report-42 into /tmp/survive…/jobs.db
//	first:  running report-42 (attempt 1)…
//	parent: killed the first process with SIGKILL
//	second: ran report-42 to the end (attempt 2)
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

type report struct{ ID int }

func main() {
	role := flag.String("role", "", "first or second (set by the command itself)")
	path := flag.String("db", "", "the SQLite file (set by the command itself)")
	flag.Parse()
	var err error
	switch *role {
	case "":
		err = parent()
	case "first", "second":
		err = child(*role, *path)
	default:
		err = fmt.Errorf("unknown -role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// parent runs the first process, kills it once its job runs, and runs the
// second.
func parent() error {
	dir, err := os.MkdirTemp("", "survive")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "jobs.db")

	first := exec.Command(os.Args[0], "-role=first", "-db="+path)
	out, err := first.StdoutPipe()
	if err != nil {
		return err
	}
	first.Stderr = os.Stderr
	if err := first.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		fmt.Println(sc.Text())
		if strings.Contains(sc.Text(), "running") {
			break
		}
	}
	if err := first.Process.Kill(); err != nil { // SIGKILL: no shutdown, no outcome written
		return err
	}
	_ = first.Wait()
	fmt.Println("parent: killed the first process with SIGKILL")

	second := exec.Command(os.Args[0], "-role=second", "-db="+path)
	second.Stdout, second.Stderr = os.Stdout, os.Stderr
	return second.Run()
}

// child opens the file and runs the queue: the first enqueues the job and
// hangs in it; the second runs it to the end and exits.
func child(role, path string) error {
	ctx := context.Background()
	db, err := sqlitestore.Open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := sqlitestore.Migrate(ctx, db); err != nil {
		return err
	}
	// A short lease, so that the second process takes the job over a
	// second after the first died (default 30 s).
	store, err := sqlitestore.New[report](db, sqlitestore.WithLeaseTTL(time.Second),
		sqlitestore.WithJanitorInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	done := make(chan struct{})
	q, err := queue.NewWithStore(store, func(ctx context.Context, j queue.Job[report]) error {
		if role == "first" {
			fmt.Printf("first:  running %s (attempt %d)…\n", j.Key, j.Attempt)
			<-ctx.Done() // a long job, cut by the kill
			return ctx.Err()
		}
		fmt.Printf("second: ran %s to the end (attempt %d)\n", j.Key, j.Attempt)
		close(done)
		return nil
	}, queue.WithName("reports"))
	if err != nil {
		return err
	}
	if role == "first" {
		// Enqueue returns once the job is in the file, synced to disk.
		if err := q.Enqueue(ctx, queue.Job[report]{Key: "report-42", Payload: report{ID: 42}}); err != nil {
			return err
		}
		fmt.Printf("first:  enqueued report-42 into %s\n", path)
	}
	if err := q.Start(ctx); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s: the job did not run within 30 s", role)
	}
	return q.Shutdown(ctx)
}
