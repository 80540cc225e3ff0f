package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/sqlitestore"
)

// TestSQLite: queuectl --sqlite works on a sqlitestore file: stats, ls
// and cancel.
func TestSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
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
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil }, queue.WithName("jobs"))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b"} {
		if err := q.Enqueue(ctx, queue.Job[int]{Key: k, Payload: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if r := ctl(t, "", "--sqlite", path, "--queue", "jobs", "stats"); r.code != 0 || !strings.Contains(r.stdout, "sqlite") {
		t.Fatalf("stats: code %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}
	if r := ctl(t, "", "--sqlite", path, "--queue", "jobs", "ls", "--state", "ready"); r.code != 0 || !strings.Contains(r.stdout, "a") || !strings.Contains(r.stdout, "b") {
		t.Fatalf("ls ready: code %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}
	if r := ctl(t, "", "--sqlite", path, "--queue", "nope", "stats"); r.code == 0 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("stats of an unknown queue: code %d, err %q", r.code, r.stderr)
	}
	if r := ctl(t, "", "--sqlite", path, "--pg", "postgres://x", "stats"); r.code == 0 {
		t.Fatalf("--sqlite with --pg: code 0, out %q", r.stdout)
	}
}
