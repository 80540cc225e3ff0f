package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/stretchr/testify/require"
)

// TestInboxFIFO adds more plain jobs than one grant of permits covers,
// one at a time, and claims them back in order: the inbox's jobs and the
// add script's interleave as they were added.
func TestInboxFIFO(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	sh := s.shards[0]
	const n = 700
	ids := make([]int64, n)
	pushed := 0
	for i := range ids {
		a, err := s.Add(ctx, queue.Job[int]{Payload: i})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = a.ID
		if c.HExists(ctx, sh.ks.fixed[kInboxes], "epoch").Val() {
			pushed++
		}
	}
	if pushed == 0 {
		t.Fatal("no inbox was used")
	}
	for i := range ids {
		j, err := s.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if j.ID != ids[i] || j.Payload != i {
			t.Fatalf("claim %d: job %d payload %d, want job %d payload %d", i, j.ID, j.Payload, ids[i], i)
		}
	}
}

// TestInboxWakesWaiter: a push that finds the inbox empty wakes a Claim
// waiting in another store, which polls once an hour.
func TestInboxWakesWaiter(t *testing.T) {
	h := newClaimHook()
	c := hookedClient(t, h)
	prefix := testPrefix(t, c)
	s := openStore(t, c, nil, idleOpts(prefix)...)
	producer := openStore(t, needRedis(t), nil, idleOpts(prefix)...)
	ctx := context.Background()
	// The first Add takes the add-one script and is granted permits.
	if _, err := producer.Add(ctx, queue.Job[int]{Payload: 0}); err != nil {
		t.Fatal(err)
	}
	j, err := s.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, j); err != nil {
		t.Fatal(err)
	}
	sh := producer.shards[0]
	if sh.permits == 0 {
		t.Fatal("no permits granted")
	}
	got := waitingClaim(t, s, h)
	p0 := sh.permits
	if _, err := producer.Add(ctx, queue.Job[int]{Payload: 1000}); err != nil {
		t.Fatal(err)
	}
	if sh.permits != p0-1 {
		t.Fatalf("the Add did not use a permit")
	}
	if j := awaitJob(t, got, "a push to the inbox"); j.Payload != 1000 {
		t.Fatalf("claimed %+v", j)
	}
}

// TestInboxWakerCoalesces: pushes that find the inbox empty while a
// wake-up is pending ask for none more; the waker sends the pending one,
// and stops with the store.
func TestInboxWakerCoalesces(t *testing.T) {
	c := needRedis(t)
	s := initOnly(t, c, nil, WithPrefix(testPrefix(t, c))) // no waker runs
	ctx := context.Background()
	sh := s.shards[0]
	wake := sh.ks.fixed[kWake]
	if _, err := s.Add(ctx, queue.Job[int]{Payload: 0}); err != nil { // the grant
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if err := s.runInbox(ctx, sh, false); err != nil { // the inbox is empty
			t.Fatal(err)
		}
		p0 := sh.permits
		if _, err := s.Add(ctx, queue.Job[int]{Payload: i}); err != nil {
			t.Fatal(err)
		}
		if sh.permits != p0-1 {
			t.Fatalf("Add %d did not use a permit", i)
		}
		if n := len(sh.wakeReq); n != 1 {
			t.Fatalf("after push %d: %d wake-ups pending; want 1", i, n)
		}
	}
	w0 := c.LLen(ctx, wake).Val()
	s.wg.Add(1)
	go s.inboxWaker(sh)
	require.Eventually(t, func() bool { return len(sh.wakeReq) == 0 && c.LLen(ctx, wake).Val() == w0+1 },
		10*time.Second, time.Millisecond, "the waker sends the pending wake-up")
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Close(cctx); err != nil { // waits for the waker
		t.Fatal(err)
	}
	if n := c.LLen(ctx, wake).Val(); n != w0+1 {
		t.Fatalf("%d wake-up tokens after Close; want %d", n, w0+1)
	}
}
