package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

// TestEnqueueManyIDs: a batch mixing plain jobs (multi-row INSERTs, more
// than one chunk) with keyed, duplicate and scheduled-group jobs gets, for
// each job in order, the ID of the row holding that job, in ascending
// order, and the refused jobs write nothing.
func TestEnqueueManyIDs(t *testing.T) {
	t.Parallel()
	db := openDB(t, sqlitestore.WithSynchronous(sqlitestore.SyncNormal))
	s, err := sqlitestore.New[int](db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	later := time.Now().Add(time.Hour)
	jobs := make([]queue.Job[int], 500)
	refusedWant := map[int]bool{}
	for i := range jobs {
		jobs[i].Payload = i
		switch {
		case i%37 == 5:
			jobs[i].Key = fmt.Sprintf("k%d", i/74) // every second one repeats the key before it
			if i%74 != 5 {
				refusedWant[i] = true
			}
		case i%53 == 7:
			jobs[i].Group, jobs[i].RunAt = "g", later // the first is kept, the rest refused
			if i != 7 {
				refusedWant[i] = true
			}
		case i%41 == 3:
			jobs[i].RunAt = later
		}
	}
	out, err := s.EnqueueMany(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	var prev int64
	n := 0
	for i, a := range out {
		if refusedWant[i] {
			if a.ID != 0 {
				t.Errorf("job %d: ID %d, want refused", i, a.ID)
			}
			continue
		}
		n++
		if a.ID <= prev {
			t.Errorf("job %d: ID %d after %d", i, a.ID, prev)
		}
		prev = a.ID
		if a.Scheduled != !jobs[i].RunAt.IsZero() {
			t.Errorf("job %d: Scheduled %v", i, a.Scheduled)
		}
		var payload []byte
		var key string
		if err := db.SQL().QueryRowContext(ctx, "SELECT payload, CAST(key AS TEXT) FROM queuekit_jobs WHERE id = ?", a.ID).Scan(&payload, &key); err != nil {
			t.Fatalf("job %d (ID %d): %v", i, a.ID, err)
		}
		if got, err := strconv.Atoi(string(payload)); err != nil || got != i || key != jobs[i].Key {
			t.Errorf("job %d (ID %d): row holds payload %q key %q", i, a.ID, payload, key)
		}
	}
	var rows int
	if err := db.SQL().QueryRowContext(ctx, "SELECT count(*) FROM queuekit_jobs").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Errorf("%d rows, want %d", rows, n)
	}
}

// TestStoreEnqueuePathsRunHooks: jobs enqueued through the store's own
// paths, EnqueueMany and EnqueueTx, pass through the queue's
// WithEnqueueHook hooks as Enqueue's do: the handler sees the Meta the
// hook left (with the queue's default priority filled in), and a job the
// hook refuses is not stored.
func TestStoreEnqueuePathsRunHooks(t *testing.T) {
	t.Parallel()
	db := openDB(t, sqlitestore.WithSynchronous(sqlitestore.SyncNormal))
	s, err := sqlitestore.New[int](db)
	if err != nil {
		t.Fatal(err)
	}
	hook := func(_ context.Context, j *queue.JobInfo) error {
		if j.Key == "refuse" {
			return errors.New("hook says no")
		}
		j.Meta.Set("seen", j.Key+"/"+j.Priority)
		return nil
	}
	got := make(chan string, 10)
	q, err := queue.NewWithStore(s, func(_ context.Context, j queue.Job[int]) error {
		got <- j.Meta.Get("seen")
		return nil
	}, queue.WithEnqueueHook(hook))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.EnqueueMany(ctx, []queue.Job[int]{{Key: "a"}, {Key: "refuse"}}); err == nil || !strings.Contains(err.Error(), "job 1") {
		t.Fatalf("EnqueueMany with a refused job: %v, want an error naming job 1", err)
	}
	if _, err := s.EnqueueMany(ctx, []queue.Job[int]{{Key: "b"}, {Key: "c", Priority: "high"}}); err != nil {
		t.Fatal(err)
	}
	tx, err := db.SQL().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(ctx, tx, queue.Job[int]{Key: "refuse"}); err == nil || !strings.Contains(err.Error(), "hook says no") {
		t.Fatalf("EnqueueTx of a refused job: %v, want the hook's error", err)
	}
	if _, err := s.EnqueueTx(ctx, tx, queue.Job[int]{Key: "d"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 3 {
		seen[<-got] = true
	}
	if err := q.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"b/normal": true, "c/high": true, "d/normal": true}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("handler saw Meta %v, want %v", seen, want)
	}
}
