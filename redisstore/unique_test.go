package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

// Unique windows beyond the conformance suite: EnqueueMany honours them,
// the janitor's trim drops expired marks, and during an outage the
// fallback keeps windows of its own.

// TestUniqueEnqueueMany: a batch skips jobs whose key is in a window,
// opened before or by an earlier job of the batch.
func TestUniqueEnqueueMany(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	s := openStore(t, c, queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), WithPrefix(testPrefix(t, c)))
	s.initMu.Lock()
	s.bound = true // as queue.NewWithStore would
	s.initMu.Unlock()
	ctx := context.Background()
	if _, err := s.Add(ctx, queue.Job[int]{Key: "open", UniqueFor: time.Hour}); err != nil {
		t.Fatal(err)
	}
	h := time.Hour
	out, err := s.EnqueueMany(ctx, []queue.Job[int]{{Key: "a", UniqueFor: h}, {Key: "a", UniqueFor: h}, {Key: "b"},
		{Key: "open"}, {Key: "open", UniqueFor: h}})
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, a := range out {
		got = append(got, a.ID != 0)
	}
	if fmt.Sprint(got) != "[true false true false false]" {
		t.Fatalf("inserted %v", got)
	}
	if _, err := s.EnqueueMany(ctx, []queue.Job[int]{{UniqueFor: h}}); !errors.Is(err, queue.ErrInvalidJob) {
		t.Fatalf("EnqueueMany of a window without a key = %v, want ErrInvalidJob", err)
	}
}

// TestUniqueMarksTrimmed: the janitor's trim drops the marks whose windows
// ended by the lease clock (Redis's TIME, shifted by the fake clock) and
// keeps the open ones.
func TestUniqueMarksTrimmed(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Add(ctx, queue.Job[int]{Key: fmt.Sprint("short", i), UniqueFor: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Add(ctx, queue.Job[int]{Key: "long", UniqueFor: time.Hour}); err != nil {
		t.Fatal(err)
	}
	sh := s.shards[0]
	marks := func() int64 { return c.ZCard(ctx, sh.ks.fixed[kUnique]).Val() }
	must(t, s.trimDead(ctx, sh))
	if n := marks(); n != 4 {
		t.Fatalf("%d marks before the windows end, want 4", n)
	}
	clk.Advance(time.Minute + time.Second) // see storetest's testUniqueWindow
	must(t, s.trimDead(ctx, sh))
	if n := marks(); n != 1 {
		t.Fatalf("%d marks after the short windows ended, want 1", n)
	}
}

// TestFallbackUniqueWindow: while Redis is unreachable the fallback holds
// windows itself (the in-memory store's rules), for this process only.
func TestFallbackUniqueWindow(t *testing.T) {
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := downWithClock(t, clk, nil)
	ctx := context.Background()
	if _, err := s.Add(ctx, queue.Job[int]{Key: "k", UniqueFor: time.Hour, Payload: 1}); err != nil {
		t.Fatal(err)
	}
	must(t, s.Complete(ctx, claimWithin(t, s, time.Second)))
	if _, err := s.Add(ctx, queue.Job[int]{Key: "k", Payload: 2}); !errors.Is(err, queue.ErrDuplicate) {
		t.Fatalf("Add in the window, after the job is done = %v, want ErrDuplicate", err)
	}
	clk.Advance(time.Hour)
	if _, err := s.Add(ctx, queue.Job[int]{Key: "k", Payload: 3}); err != nil {
		t.Fatalf("Add after the window: %v", err)
	}
}
