package sqlitestore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
	"github.com/queuekit/queue/storetest/fleettest"
)

// The kill -9 test: two processes work one queue on one file; one is
// killed with SIGKILL while it runs jobs, and started again. Every job
// runs to completion (none lost), and a job runs twice only if it was
// running in the killed process at the kill.

const killWorkers = 4

// killJobs is the number of jobs of the kill test; fewer under -race.
var killJobs = map[bool]int{false: 1500, true: 300}[raceSlow]

// TestKillHelper is a process of the kill test (run by TestKillNineTwoProcesses).
func TestKillHelper(t *testing.T) {
	path := os.Getenv("SQLITESTORE_KILL_DB")
	if path == "" {
		t.Skip("a helper of TestKillNineTwoProcesses")
	}
	name := os.Getenv("SQLITESTORE_KILL_NAME")
	// Only the process to be killed reports its runs: the test reads its
	// stdout until the kill, and nobody reads the others'.
	report := os.Getenv("SQLITESTORE_KILL_REPORT") != ""
	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// The lease is 3 s: a survivor's heartbeat must not miss it on a
	// loaded machine under -race, or a job it is running would be rescued
	// and run again without any kill (a 1 s lease did, at load 22–26).
	s, err := sqlitestore.New[int](db, sqlitestore.WithWorkerID(name), sqlitestore.WithLeaseTTL(3*time.Second),
		sqlitestore.WithJanitorInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	// Each run is logged, synced, before the handler returns: a run that
	// the log does not show never finished.
	log, err := os.OpenFile(filepath.Join(filepath.Dir(path), name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var mu sync.Mutex
	q, err := queue.NewWithStore(s, func(_ context.Context, j queue.Job[int]) error {
		time.Sleep(2 * time.Millisecond) // a job that takes a while, so some are in flight at the kill
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(log, "%d\n", j.Payload)
		if err := log.Sync(); err != nil {
			return err
		}
		if report {
			fmt.Printf("RAN %d\n", j.Payload) // read by the test through the pipe
		}
		return nil
	}, queue.WithName("kill"), queue.WithWorkers(killWorkers, killWorkers), queue.WithCapacity(killJobs, 0))
	if err != nil {
		t.Fatal(err)
	}
	_ = fleettest.RunHelper(t, q, nil)
}

func TestKillNineTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs processes")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kill.db")
	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := sqlitestore.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	s, err := sqlitestore.New[int](db)
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }, queue.WithName("kill"),
		queue.WithCapacity(killJobs, 0))
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]queue.Job[int], killJobs)
	for i := range jobs {
		jobs[i] = queue.Job[int]{Key: strconv.Itoa(i), Payload: i}
	}
	if _, err := s.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	_ = q

	start := func(name string, env ...string) *fleettest.Proc {
		return fleettest.StartHelper(t, "TestKillHelper", append(env, "SQLITESTORE_KILL_DB="+path, "SQLITESTORE_KILL_NAME="+name)...)
	}
	changed, unwatch := sqlitestore.Changes(db)
	defer unwatch()
	a := start("a", "SQLITESTORE_KILL_REPORT=1")
	b := start("b")
	// Kill a once it has run a fifth of the jobs: it writes each run on
	// its stdout once the run is logged.
	for i := range killJobs / 5 {
		a.Expect(t, func(l string) bool { return strings.HasPrefix(l, "RAN ") }, fmt.Sprintf("a's run %d", i+1))
	}
	a.Kill(t)
	a2 := start("a2")
	counts := func() (done, other int) {
		rows, err := db.SQL().QueryContext(ctx, "SELECT state, count(*) FROM queuekit_jobs WHERE queue = 'kill' GROUP BY state")
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var st string
			var n int
			if err := rows.Scan(&st, &n); err != nil {
				t.Fatal(err)
			}
			if st == "completed" {
				done += n
			} else {
				other += n
			}
		}
		return done, other
	}
	// Count again whenever another process committed to the file.
	limit := map[bool]time.Duration{false: 60 * time.Second, true: 5 * time.Minute}[raceSlow]
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		done, _ := counts()
		if done == killJobs {
			break
		}
		select {
		case <-changed:
		case <-deadline.C:
			t.Fatalf("%d of %d jobs completed after %v", done, killJobs, limit)
		}
	}
	b.Stop(t)
	a2.Stop(t)
	if done, other := counts(); done != killJobs || other != 0 {
		t.Fatalf("%d completed, %d in other states; want all %d completed", done, other, killJobs)
	}
	seen := map[int][]string{} // job -> the processes that ran it
	for _, name := range []string{"a", "b", "a2"} {
		for _, n := range runs(t, dir, name) {
			seen[n] = append(seen[n], name)
		}
	}
	dups := 0
	var twice []string
	for i := range killJobs {
		switch c := len(seen[i]); {
		case c == 0:
			t.Errorf("job %d completed but never ran", i)
		case c > 1:
			dups++
			twice = append(twice, fmt.Sprintf("%d by %s", i, strings.Join(seen[i], "+")))
		}
	}
	// A job runs again only if a's worker had run it (and logged the run)
	// but its Complete had not committed at the kill: at most one per
	// worker of a.
	if dups > killWorkers {
		t.Fatalf("%d jobs ran twice (%s); at most %d (a's workers) were in flight at the kill", dups, strings.Join(twice, ", "), killWorkers)
	}
	t.Logf("%d jobs, a killed after %d runs, %d ran twice", killJobs, len(runs(t, dir, "a")), dups)
}

// runs reads the job numbers a process logged.
func runs(t *testing.T, dir, name string) []int {
	f, err := os.Open(filepath.Join(dir, name+".log"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []int
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		n, err := strconv.Atoi(line)
		if err != nil {
			continue // a line cut by the kill
		}
		out = append(out, n)
	}
	return out
}
