package sqlitestore_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

// TestScheduleLateness measures how late scheduled jobs start when one
// handle on the file adds them and another runs them: two DBs opened on
// one file, each with its own writer, its own data_version watch and its
// own descriptor of the writers' lock, as two processes have. It fails on
// a job started early, and on a p99 above 20 ms only when
// SQLITESTORE_LATENESS_STRICT is set (a loaded machine delays timers).
//
//	go test -run TestScheduleLateness -v ./sqlitestore
func TestScheduleLateness(t *testing.T) {
	if testing.Short() {
		t.Skip("takes seconds")
	}
	const n = 300
	path := filepath.Join(t.TempDir(), "late.db")
	ctx := context.Background()
	open := func() *sqlitestore.DB {
		db, err := sqlitestore.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		if err := sqlitestore.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		return db
	}
	producerDB, workerDB := open(), open()
	var mu sync.Mutex
	var late []time.Duration
	early := 0
	finished := make(chan struct{})
	ws, err := sqlitestore.New[int](workerDB)
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.NewWithStore(ws, func(_ context.Context, j queue.Job[int]) error {
		d := time.Since(j.RunAt)
		mu.Lock()
		defer mu.Unlock()
		if d < 0 {
			early++
		}
		late = append(late, d)
		if len(late) == n {
			close(finished)
		}
		return nil
	}, queue.WithName("late"), queue.WithWorkers(10, 10))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer q.Shutdown(ctx)
	ps, err := sqlitestore.New[int](producerDB)
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
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d jobs ran in 60 s", len(late), n)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(late)
	p := func(q float64) time.Duration { return late[int(q*float64(len(late)-1))] }
	t.Logf("lateness of %d scheduled jobs, added through another handle on the file: p50 %v, p99 %v, max %v, early %d",
		n, p(0.5).Round(10*time.Microsecond), p(0.99).Round(10*time.Microsecond), late[len(late)-1].Round(10*time.Microsecond), early)
	if early > 0 {
		t.Fatalf("%d jobs started before their RunAt", early)
	}
	if os.Getenv("SQLITESTORE_LATENESS_STRICT") != "" && p(0.99) > 20*time.Millisecond {
		t.Fatalf("p99 lateness %v > 20 ms", p(0.99))
	}
}
