package sqlitestore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
	"github.com/queuekit/queue/storetest/fleettest"
)

// latenessJobs is the number of jobs of TestScheduleLateness; fewer under
// -race, where the translated SQLite runs 10–50 times slower.
var latenessJobs = map[bool]int{false: 300, true: 60}[raceSlow]

// TestScheduleLateness measures how late scheduled jobs start when one
// process adds them to the file and another process runs them: this test
// process schedules, a re-run of the test binary (TestLatenessHelper)
// runs them and writes each job's lateness, measured in its handler, on
// its stdout, which this process reads through a pipe. It fails on a job
// started early, and on a p99 above 20 ms only when
// SQLITESTORE_LATENESS_STRICT is set (a loaded machine delays timers).
//
//	go test -run TestScheduleLateness -v ./sqlitestore
func TestScheduleLateness(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a process for seconds")
	}
	n := latenessJobs
	path := filepath.Join(t.TempDir(), "late.db")
	ctx := context.Background()
	db := openDBAt(t, path)
	worker := fleettest.StartHelper(t, "TestLatenessHelper", "SQLITESTORE_LATENESS_DB="+path)
	defer worker.Stop(t)

	ps, err := sqlitestore.New[int](db)
	if err != nil {
		t.Fatal(err)
	}
	pq, err := queue.NewWithStore(ps, func(context.Context, queue.Job[int]) error { return nil }, queue.WithName("late"))
	if err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(200 * time.Millisecond)
	for i := range n {
		// Added as the time comes, some well ahead, some just ahead.
		at := base.Add(time.Duration(i) * 7 * time.Millisecond)
		if err := pq.Enqueue(ctx, queue.Job[int]{RunAt: at, Payload: i}); err != nil {
			t.Fatal(err)
		}
	}
	late := make([]time.Duration, 0, n)
	seen := make(map[int]bool, n)
	early := 0
	for len(late) < n {
		l := worker.Expect(t, func(l string) bool { return strings.HasPrefix(l, "RAN ") }, fmt.Sprintf("job %d of %d", len(late)+1, n))
		f := strings.Fields(l)
		id, err1 := strconv.Atoi(f[1])
		ns, err2 := strconv.ParseInt(f[2], 10, 64)
		if len(f) != 3 || err1 != nil || err2 != nil {
			t.Fatalf("the helper wrote %q", l)
		}
		if seen[id] {
			t.Fatalf("job %d ran twice", id)
		}
		seen[id] = true
		if ns < 0 {
			early++
		}
		late = append(late, time.Duration(ns))
	}
	slices.Sort(late)
	p := func(q float64) time.Duration { return late[int(q*float64(len(late)-1))] }
	t.Logf("lateness of %d scheduled jobs, added by another process: p50 %v, p99 %v, max %v, early %d",
		n, p(0.5).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), late[len(late)-1].Round(10*time.Microsecond), early)
	if early > 0 {
		t.Fatalf("%d jobs started before their RunAt", early)
	}
	if os.Getenv("SQLITESTORE_LATENESS_STRICT") != "" && p(0.99) > 20*time.Millisecond {
		t.Fatalf("p99 lateness %v > 20 ms", p(0.99))
	}
}

// TestLatenessHelper is the process of TestScheduleLateness that runs the
// jobs: for each, it writes "RAN <payload> <lateness in ns>" on stdout.
func TestLatenessHelper(t *testing.T) {
	path := os.Getenv("SQLITESTORE_LATENESS_DB")
	if path == "" {
		t.Skip("a helper of TestScheduleLateness")
	}
	db, err := sqlitestore.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlitestore.New[int](db)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	q, err := queue.NewWithStore(s, func(_ context.Context, j queue.Job[int]) error {
		d := time.Since(j.RunAt)
		mu.Lock()
		defer mu.Unlock()
		_, err := fmt.Printf("RAN %d %d\n", j.Payload, d.Nanoseconds())
		return err
	}, queue.WithName("late"), queue.WithWorkers(10, 10))
	if err != nil {
		t.Fatal(err)
	}
	if err := fleettest.RunHelper(t, q, nil); err != nil {
		t.Fatal(err)
	}
}
