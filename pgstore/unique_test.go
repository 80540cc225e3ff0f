package pgstore_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// Unique windows beyond the conformance suite: a refused job gives its
// mark back, EnqueueTx and EnqueueMany honour windows, and the janitor's
// Prune deletes expired marks.

func marksTable(e *env) string { return pgx.Identifier{e.schema, "queuekit_unique"}.Sanitize() }

// TestUniqueRefusedTakesNoMark: a windowed job refused for another reason
// (its key pending without a window) leaves no mark behind, so the key is
// free once that job is done.
func TestUniqueRefusedTakesNoMark(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "refused", queuetest.NewFakeClock(epoch))
	if _, err := s.Add(bg, queue.Job[P]{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(bg, queue.Job[P]{Key: "k", UniqueFor: time.Hour}); !errors.Is(err, queue.ErrDuplicate) {
		t.Fatalf("Add of a pending key with a window = %v, want ErrDuplicate", err)
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+marksTable(e)); n != 0 {
		t.Fatalf("%d marks after a refused job, want 0", n)
	}
	if err := s.Complete(bg, claimWithin(t, s, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(bg, queue.Job[P]{Key: "k", UniqueFor: time.Hour}); err != nil {
		t.Fatalf("Add once the key is free: %v", err)
	}
	if _, err := s.Add(bg, queue.Job[P]{Key: "k", UniqueFor: -time.Second}); !errors.Is(err, queue.ErrInvalidJob) {
		t.Fatalf("Add of a negative window = %v, want ErrInvalidJob", err)
	}
}

// TestUniqueEnqueueTx: a window is taken with the transaction's job and
// only if it commits; a refusal leaves the transaction usable.
func TestUniqueEnqueueTx(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "utx", queuetest.NewFakeClock(epoch))
	if _, err := s.Add(bg, queue.Job[P]{Key: "pending"}); err != nil {
		t.Fatal(err)
	}
	tx, err := e.pool.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "rolled-back", UniqueFor: time.Hour}); err != nil {
		t.Fatal(err)
	}
	_ = tx.Rollback(bg)
	err = pgx.BeginFunc(bg, e.pool, func(tx pgx.Tx) error {
		if _, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "w", UniqueFor: time.Hour}); err != nil {
			return fmt.Errorf("first: %w", err)
		}
		if _, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "w"}); !errors.Is(err, queue.ErrDuplicate) {
			return fmt.Errorf("in the window: %v, want ErrDuplicate", err)
		}
		if _, err := s.EnqueueTx(bg, tx, queue.Job[P]{Key: "pending", UniqueFor: time.Hour}); !errors.Is(err, queue.ErrDuplicate) {
			return fmt.Errorf("a pending key: %v, want ErrDuplicate", err)
		}
		_, err := tx.Exec(bg, "SELECT 1") // still usable
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	rows, err := e.pool.Query(bg, "SELECT key FROM "+marksTable(e)+" ORDER BY key")
	if err == nil {
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil || fmt.Sprint(keys) != "[w]" {
		t.Fatalf("marks %v, %v; want [w] (the rolled-back and the refused jobs took none)", keys, err)
	}
	if _, err := s.Add(bg, queue.Job[P]{Key: "rolled-back"}); err != nil {
		t.Fatalf("Add of the rolled-back key: %v", err)
	}
}

// TestUniqueEnqueueMany: a batch skips jobs whose key is in a window
// (open before, or opened by an earlier job of the batch) and gives back
// the marks of windowed jobs it skipped for another reason.
func TestUniqueEnqueueMany(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "umany", queuetest.NewFakeClock(epoch))
	if _, err := s.Add(bg, queue.Job[P]{Key: "open", UniqueFor: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(bg, queue.Job[P]{Key: "pending"}); err != nil {
		t.Fatal(err)
	}
	h := time.Hour
	batch := []queue.Job[P]{{Key: "a", UniqueFor: h}, {Key: "a", UniqueFor: h}, {Key: "b"}, {Key: "open"},
		{Key: "open", UniqueFor: h}, {Key: "pending", UniqueFor: h}}
	added, err := s.EnqueueMany(bg, batch)
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, a := range added {
		got = append(got, a.ID != 0)
	}
	if fmt.Sprint(got) != "[true false true false false false]" {
		t.Fatalf("inserted %v", got)
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+marksTable(e)+" WHERE key IN ('a', 'open')"); n != 2 {
		t.Fatalf("%d marks for a and open, want 2", n)
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+marksTable(e)); n != 2 {
		t.Fatalf("%d marks, want 2: the skipped job of the pending key gives its mark back", n)
	}
	if _, err := s.EnqueueMany(bg, []queue.Job[P]{{UniqueFor: h}}); !errors.Is(err, queue.ErrInvalidJob) {
		t.Fatalf("EnqueueMany of a window without a key = %v, want ErrInvalidJob", err)
	}
}

// TestUniqueMarksPruned: Prune deletes marks whose windows ended, judged
// as the add statement judges them (database time, shifted by the fake
// clock), and keeps open ones.
func TestUniqueMarksPruned(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	clk := queuetest.NewFakeClock(epoch)
	bind(t, s, "uprune", clk)
	for i := range 3 {
		if _, err := s.Add(bg, queue.Job[P]{Key: fmt.Sprint("short", i), UniqueFor: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Add(bg, queue.Job[P]{Key: "long", UniqueFor: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(bg); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+marksTable(e)); n != 4 {
		t.Fatalf("%d marks before the windows end, want 4", n)
	}
	clk.Advance(time.Minute + time.Second) // see storetest's testUniqueWindow
	if _, err := s.Prune(bg); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, "SELECT count(*) FROM "+marksTable(e)); n != 1 {
		t.Fatalf("%d marks after the short windows ended, want 1", n)
	}
}
