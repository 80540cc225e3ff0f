package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storetest"
)

// internalStore returns a bound (not started) store in a migrated schema
// of its own, dropped when the test ends. It skips without a server
// (fails in CI), as the package's other tests do.
func internalStore(t *testing.T) (*Store[int], *pgxpool.Pool) {
	t.Helper()
	url := os.Getenv("QUEUE_PG_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL not reachable at %s: %v", url, err)
		}
		t.Skipf("PostgreSQL not reachable at %s: %v", url, err)
	}
	t.Cleanup(pool.Close)
	var b [4]byte
	_, _ = rand.Read(b[:])
	schema := "qt_" + hex.EncodeToString(b[:]) + "_internal"
	if err := Migrate(ctx, pool, WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	})
	s, err := New[int](pool, WithSchema(schema))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(storetest.Config("internal", 100, nil, func(queue.Event) {})); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s, pool
}

// TestFetchedJobFreesItsReservation: the fetcher's reservation for a
// waiting Claim caller ends when the caller has its job, not some time
// after; a worker's outcome asks the fetcher for its next job, which
// waits in spare, promised to it, when it lands before the worker is
// back. A reservation the fetcher had not released yet (its goroutine
// descheduled between the hand-out and the release) once made the next
// claim decision claim nothing for the returning worker, which then
// waited for a claim of its own; a job claimed for a returning worker and
// counted as free does the same.
//
// The test does the fetcher's steps by hand and comes back with the
// outcome right after the hand-out, where the fetcher's goroutine may
// stop for any time.
func TestFetchedJobFreesItsReservation(t *testing.T) {
	s, pool := internalStore(t)
	ctx := context.Background()
	added, err := s.EnqueueMany(ctx, []queue.Job[int]{{Payload: 1}, {Payload: 2}})
	if err != nil {
		t.Fatal(err)
	}
	// A Claim caller waits; the fetcher reserves a claim for it, claims
	// and hands out.
	w := make(chan queue.Job[int], 1)
	s.handMu.Lock()
	s.waiters = append(s.waiters, w)
	s.handMu.Unlock()
	want := s.want(s.o.claimBatch)
	if want != 1 {
		t.Fatalf("fetcher reserved %d claims for one waiting caller", want)
	}
	if n, err := s.fetch(ctx, want); err != nil || n != 1 {
		t.Fatalf("fetch = %d, %v", n, err)
	}
	j := <-w
	if !s.take(j.ID) || j.ID != added[0].ID {
		t.Fatalf("handed job %d, want %d", j.ID, added[0].ID)
	}
	// The worker's outcome comes back before the fetcher runs again: it
	// asks for the worker's next job.
	if err := s.Complete(ctx, j); err != nil {
		t.Fatal(err)
	}
	want = s.want(s.o.claimBatch)
	if want != 1 {
		t.Fatalf("fetcher reserved %d claims for the worker coming back, want 1", want)
	}
	if n, err := s.fetch(ctx, want); err != nil || n != 1 {
		t.Fatalf("fetch = %d, %v", n, err)
	}
	var state string
	if err := pool.QueryRow(ctx, "SELECT state FROM "+s.q.jobs+" WHERE id = $1", added[1].ID).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != stRunning {
		t.Fatalf("the worker's next job was not claimed (state %s)", state)
	}
	s.handMu.Lock()
	defer s.handMu.Unlock()
	if s.claiming != 0 || len(s.spare) != 1 || s.freeSpare() != 0 {
		t.Fatalf("after the hand-outs: %d claims reserved, %d spare, %d of them free; want 0, 1 and 0",
			s.claiming, len(s.spare), s.freeSpare())
	}
}

// TestDryClaims: a claim that found fewer jobs than it asked for makes the
// queue dry until a wake-up is taken; a wake-up taken while a claim ran
// ends the dry spell that claim starts; a full claim ends a dry spell
// started at the same count.
func TestDryClaims(t *testing.T) {
	var d dryClaims
	if d.dry() {
		t.Fatal("dry before any claim")
	}
	g := d.mark()
	d.claimed(g, 0, 3)
	if !d.dry() {
		t.Fatal("not dry after a claim that found nothing")
	}
	d.supplied()
	if d.dry() {
		t.Fatal("still dry after a wake-up")
	}
	// A wake-up taken while a claim runs: that claim's empty result is
	// stale.
	g = d.mark()
	d.supplied()
	d.claimed(g, 1, 2)
	if d.dry() {
		t.Fatal("dry after a wake-up that came during the claim")
	}
	// Two claims at one count: the one that found all it asked for after
	// the one that found none.
	g = d.mark()
	d.claimed(g, 0, 1)
	d.claimed(g, 4, 4)
	if d.dry() {
		t.Fatal("still dry after a claim that found all it asked for")
	}
	// A full claim at an older count leaves a newer dry spell alone.
	old := d.mark()
	d.supplied()
	g = d.mark()
	d.claimed(g, 0, 1)
	d.claimed(old, 2, 2)
	if !d.dry() {
		t.Fatal("a claim from before the last wake-up ended the dry spell")
	}
}
