package redisstore

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
)

// pushed adds a plain job with payload p to s and fails t unless it went
// to the inbox on a permit.
func pushed(t *testing.T, s *Store[int], p int) int64 {
	t.Helper()
	sh := s.shards[0]
	p0 := sh.permits
	a, err := s.Add(context.Background(), queue.Job[int]{Payload: p})
	if err != nil {
		t.Fatal(err)
	}
	if sh.permits != p0-1 {
		t.Fatalf("job %d (payload %d) did not go to the inbox", a.ID, p)
	}
	return a.ID
}

// claimOrder claims n jobs from s, completing each, and returns their
// payloads in claim order.
func claimOrder(t *testing.T, s *Store[int], n int) []int {
	t.Helper()
	var got []int
	for range n {
		j, err := claimDone(s)
		if err != nil {
			t.Fatalf("claim %d: %v", len(got), err)
		}
		got = append(got, j.Payload)
	}
	return got
}

// claimDone claims and completes one job, each job with its own 10 s: a
// run of 1 200 claims under -race on a busy CI machine takes longer than
// any one budget for all of them would allow (one took 13 s).
func claimDone(s *Store[int]) (queue.Job[int], error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	j, err := s.Claim(ctx)
	if err != nil {
		return j, err
	}
	return j, s.Complete(ctx, j)
}

func samePayloads(t *testing.T, what string, got, want []int) {
	t.Helper()
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: claim %d has payload %d; want %d", what, i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d claims; want %d", what, len(got), len(want))
	}
}

// TestInboxBeforeRequeued: a job that goes back to a ready list's tail
// (a retry or defer due at once, a hold released, a scheduled job coming
// due) goes after the jobs in the inbox, accepted before it: every script
// that puts a job at a ready list's tail drains the inbox first.
func TestInboxBeforeRequeued(t *testing.T) {
	c := needRedis(t)
	ctx := context.Background()
	type settle func(s *Store[int], j queue.Job[int], now time.Time) error
	for _, tc := range []struct {
		name string
		back settle
	}{
		{"retry now", func(s *Store[int], j queue.Job[int], now time.Time) error {
			return s.Retry(ctx, j, now, errors.New("again"))
		}},
		{"defer now", func(s *Store[int], j queue.Job[int], now time.Time) error {
			return s.Defer(ctx, j, now, nil)
		}},
		{"hold released", func(s *Store[int], j queue.Job[int], now time.Time) error {
			if err := s.Hold(ctx, j, now.Add(time.Hour)); err != nil {
				return err
			}
			_, err := s.ReleaseHeld(ctx, "")
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := testPrefix(t, c)
			clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			a := openStore(t, c, clk, idleOpts(prefix)...)
			b := openStore(t, c, clk, idleOpts(prefix)...)
			if _, err := a.Add(ctx, queue.Job[int]{Payload: 0}); err != nil { // the grant
				t.Fatal(err)
			}
			j, err := b.Claim(ctx)
			if err != nil || j.Payload != 0 {
				t.Fatalf("Claim = %+v, %v", j, err)
			}
			for p := 1; p <= 3; p++ {
				pushed(t, a, p)
			}
			if err := tc.back(b, j, clk.Now()); err != nil {
				t.Fatal(err)
			}
			samePayloads(t, tc.name, claimOrder(t, b, 4), []int{1, 2, 3, 0})
		})
	}
	// A scheduled job comes due behind more inbox entries than one drain
	// batch (1000) moves: promotion drains them all first.
	t.Run("scheduled due", func(t *testing.T) {
		prefix := testPrefix(t, c)
		clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
		a := openStore(t, c, clk, idleOpts(prefix)...)
		b := openStore(t, c, clk, idleOpts(prefix)...)
		if _, err := a.Add(ctx, queue.Job[int]{Payload: -1, RunAt: clk.Now().Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		const n = 1200
		want := make([]int, 0, n+1)
		inbox := 0
		for p := range n {
			p0 := a.shards[0].permits
			if _, err := a.Add(ctx, queue.Job[int]{Payload: p}); err != nil {
				t.Fatal(err)
			}
			if a.shards[0].permits == p0-1 {
				inbox++
			}
			want = append(want, p)
		}
		if inbox <= 1000 {
			t.Fatalf("%d jobs went to the inbox; the test needs more than 1000", inbox)
		}
		want = append(want, -1)
		clk.Advance(2 * time.Second)
		if _, err := b.PromoteDue(ctx); err != nil {
			t.Fatal(err)
		}
		samePayloads(t, "scheduled due", claimOrder(t, b, n+1), want)
	})
}

// TestInboxCancelMatchLearnsKeys: CancelMatch pipelines its cancel calls;
// a process that has not learnt the drain keys (the inbox another process
// opened) sees each call refused before any write, runs it again alone
// and learns them: the keys are cancelled, the inbox's jobs kept.
func TestInboxCancelMatchLearnsKeys(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	ctx := context.Background()
	a := openStore(t, c, nil, idleOpts(prefix)...)
	b := initOnly(t, c, nil, idleOpts(prefix)...) // no loops: nothing learns the keys but the call
	for _, k := range []string{"k1", "k2"} {
		if _, err := b.Add(ctx, queue.Job[int]{Key: k, Payload: 9}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Add(ctx, queue.Job[int]{Payload: 0}); err != nil { // the grant
		t.Fatal(err)
	}
	pushed(t, a, 1)
	pushed(t, a, 2)
	if dk := *b.shards[0].drainKeys.Load(); len(dk) != 0 {
		t.Fatalf("b knows drain keys %v already", dk)
	}
	n, err := b.CancelMatch(ctx, func(k string) bool { return k != "" })
	if err != nil || n != 2 {
		t.Fatalf("CancelMatch = %d, %v; want 2, nil", n, err)
	}
	if dk := *b.shards[0].drainKeys.Load(); len(dk) == 0 {
		t.Fatal("b learnt no drain keys")
	}
	if st, err := b.Stats(ctx); err != nil || st.Ready != 3 {
		t.Fatalf("Stats = %+v, %v; want the 3 plain jobs ready", st, err)
	}
	samePayloads(t, "after CancelMatch", claimOrder(t, a, 3), []int{0, 1, 2})
}

// TestInboxDeadProcessPermits: a process that took permits and vanished
// leaves them counted against the capacity only until the next Add that
// finds the queue full with permits out: it revokes them, and the queue
// then holds exactly its capacity. The dead process's permits are of no
// use afterwards, should it come back: its pushes find no inbox.
func TestInboxDeadProcessPermits(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const capacity = 400
	mutate := func(cfg *storekit.Config) { cfg.Capacity = capacity }
	dead := openStoreCfg(t, c, clk, mutate, idleOpts(prefix)...)
	b := openStoreCfg(t, c, clk, mutate, idleOpts(prefix)...)
	ctx := context.Background()
	if _, err := dead.Add(ctx, queue.Job[int]{Payload: 0}); err != nil {
		t.Fatal(err)
	}
	held := dead.shards[0].permits
	if held == 0 {
		t.Fatal("no permits granted")
	}
	count := b.shards[0].ks.fixed[kCount]
	if res, _ := c.HGet(ctx, count, "res").Int64(); res != held {
		t.Fatalf("res = %d; want the %d permits granted", res, held)
	}
	added := 1
	for {
		_, err := b.Add(ctx, queue.Job[int]{Payload: added})
		if errors.Is(err, queue.ErrQueueFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if added++; added > capacity {
			t.Fatalf("%d jobs added to a queue of capacity %d", added, capacity)
		}
	}
	if added != capacity {
		t.Fatalf("ErrQueueFull after %d jobs; want %d (the capacity)", added, capacity)
	}
	if res, _ := c.HGet(ctx, count, "res").Int64(); res != 0 {
		t.Fatalf("res = %d at capacity; want the permits revoked", res)
	}
	// The dead process comes back: its permits find no inbox.
	if _, err := dead.Add(ctx, queue.Job[int]{Payload: -1}); !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("Add on old permits: %v; want ErrQueueFull", err)
	}
	if st, err := b.Stats(ctx); err != nil || st.Ready != capacity {
		t.Fatalf("Stats = %+v, %v; want %d ready", st, err, capacity)
	}
}

// TestInboxProcessGone: a process pushes jobs to the inbox and is gone
// (closed, never to drain); another process, started after, finds every
// job, in order.
func TestInboxProcessGone(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	ctx := context.Background()
	a := openStore(t, c, nil, idleOpts(prefix)...)
	if _, err := a.Add(ctx, queue.Job[int]{Payload: 0}); err != nil {
		t.Fatal(err)
	}
	want := []int{0}
	for p := 1; p <= 20; p++ {
		pushed(t, a, p)
		want = append(want, p)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Close(cctx); err != nil {
		t.Fatal(err)
	}
	b := openStore(t, c, nil, idleOpts(prefix)...)
	samePayloads(t, "after the producer left", claimOrder(t, b, len(want)), want)
	if st, err := b.Stats(ctx); err != nil || st.Ready != 0 || st.Running != 0 {
		t.Fatalf("Stats = %+v, %v; want nothing left", st, err)
	}
}
