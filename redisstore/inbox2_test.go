package redisstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
	"github.com/stretchr/testify/require"
)

// TestInboxFIFOAcrossProcesses: two processes add plain jobs in turn, each
// Add returning before the other's starts, both on inbox permits; the
// jobs are claimed in the order they were added.
func TestInboxFIFOAcrossProcesses(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a := openStore(t, c, clk, WithPrefix(prefix))
	b := openStore(t, c, clk, WithPrefix(prefix))
	ctx := context.Background()
	var ids []int64
	for i := range 40 {
		s := a
		if i%2 == 1 {
			s = b
		}
		got, err := s.Add(ctx, queue.Job[int]{Payload: i})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got.ID)
	}
	if a.shards[0].permits == 0 || b.shards[0].permits == 0 {
		t.Fatal("a process holds no permits: the inboxes were not used")
	}
	for i := range ids {
		j, err := a.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if j.ID != ids[i] {
			t.Fatalf("claim %d: job %d (payload %d), want job %d", i, j.ID, j.Payload, ids[i])
		}
	}
}

// TestInboxRetriedPush: a push repeated (its reply lost, the client sent it
// again) leaves one job: the drain drops the copy, and only the accepted
// entry uses a permit.
func TestInboxRetriedPush(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	sh := s.shards[0]
	if _, err := s.Add(ctx, queue.Job[int]{Payload: 0}); err != nil { // the grant
		t.Fatal(err)
	}
	j0, err := s.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, j0); err != nil {
		t.Fatal(err)
	}
	res0 := c.HGet(ctx, sh.ks.fixed[kCount], "res").Val()
	id, seq, blk, inbox, _, err := sh.newIDPermit(ctx, true)
	if err != nil || inbox == "" {
		t.Fatalf("newIDPermit: inbox %q, %v; want a permit", inbox, err)
	}
	fj := fbJob[int]{job: queue.Job[int]{ID: id, Payload: 7}, enc: []byte("7"), sh: sh, seq: seq, blk: blk, created: s.now()}
	it := s.itemOf(&fj, false)
	for range 2 {
		if ok, err := s.pushInbox(ctx, sh, inbox, &it); err != nil || !ok {
			t.Fatalf("push: %v, %v", ok, err)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 1 {
		t.Fatalf("Stats().Ready = %d after a push sent twice; want 1", st.Ready)
	}
	if res := c.HGet(ctx, sh.ks.fixed[kCount], "res").Val(); res != decr(t, res0) {
		t.Fatalf("permits out: %s before, %s after; want one fewer", res0, res)
	}
	j, err := s.Claim(ctx)
	if err != nil || j.ID != id || j.Payload != 7 {
		t.Fatalf("Claim = %+v, %v; want job %d", j, err, id)
	}
	if err := s.Complete(ctx, j); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(ctx); err != nil || st.Ready != 0 {
		t.Fatalf("Stats = %+v, %v; want nothing left", st, err)
	}
}

func decr(t *testing.T, v string) string {
	t.Helper()
	n, _ := strconv.Atoi(v)
	if n == 0 {
		t.Fatalf("no permits out: %q", v)
	}
	return strconv.Itoa(n - 1)
}

// TestInboxRevokeAtCapacity: with permits out, the queue still holds
// exactly its capacity: the Add that would pass it revokes the permits,
// and then the queue refuses exactly the jobs beyond the capacity.
func TestInboxRevokeAtCapacity(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	const capacity = 500
	mutate := func(cfg *storekit.Config) { cfg.Capacity = capacity }
	a := openStoreCfg(t, c, clk, mutate, WithPrefix(prefix))
	b := openStoreCfg(t, c, clk, mutate, WithPrefix(prefix))
	ctx := context.Background()
	added := 0
	for i := 0; ; i++ {
		s := a
		if i%3 == 2 {
			s = b
		}
		_, err := s.Add(ctx, queue.Job[int]{Payload: i})
		if errors.Is(err, queue.ErrQueueFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		added++
		if added > capacity {
			t.Fatalf("%d jobs added to a queue of capacity %d", added, capacity)
		}
	}
	if added != capacity {
		t.Fatalf("ErrQueueFull after %d jobs; want %d (the capacity)", added, capacity)
	}
	if _, err := b.Add(ctx, queue.Job[int]{Payload: -1}); !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("an Add on a full queue: %v; want ErrQueueFull", err)
	}
	if st, err := a.Stats(ctx); err != nil || st.Ready != capacity {
		t.Fatalf("Stats = %+v, %v; want %d ready", st, err, capacity)
	}
}

// TestInboxRedisRestarted: Redis loses everything (a restart without
// persistence) while a process holds inbox permits; its next Add finds no
// inbox, takes the add-one script, which finds the block lost, and is
// stored under an ID of a new block.
func TestInboxRedisRestarted(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	a := openStore(t, c, clk, WithPrefix(prefix))
	ctx := context.Background()
	for i := range 3 {
		if _, err := a.Add(ctx, queue.Job[int]{Payload: i}); err != nil {
			t.Fatal(err)
		}
	}
	sh := a.shards[0]
	if sh.permits == 0 {
		t.Fatal("no permits: the inbox was not used")
	}
	deleteKeys(c, "{"+prefix+":*")
	blk := sh.permitBlk
	got, err := a.Add(ctx, queue.Job[int]{Payload: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID > blk-idBlock && got.ID <= blk {
		t.Fatalf("job %d has an ID of the lost block", got.ID)
	}
	j, err := a.Claim(ctx)
	if err != nil || j.ID != got.ID || j.Payload != 100 {
		t.Fatalf("Claim = %+v, %v; want job %d", j, err, got.ID)
	}
}

// TestInboxSeenByReaders: a job in the inbox is a ready job to every
// reader: Stats, the admin API's Counts, Get, List and Cancel, and the Len
// of a process that neither added nor claimed it.
func TestInboxSeenByReaders(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	s := openStore(t, c, nil, WithPrefix(prefix))
	other := openStore(t, c, nil, WithPrefix(prefix), WithPollInterval(20*time.Millisecond))
	ctx := context.Background()
	sh := s.shards[0]
	if _, err := s.Add(ctx, queue.Job[int]{Payload: 0}); err != nil { // the grant
		t.Fatal(err)
	}
	ready := 1
	// push adds a job and checks that it went to the inbox.
	push := func(p int) int64 {
		t.Helper()
		p0 := sh.permits
		a, err := s.Add(ctx, queue.Job[int]{Payload: p})
		if err != nil {
			t.Fatal(err)
		}
		if sh.permits != p0-1 {
			t.Fatalf("job %d did not go to the inbox", a.ID)
		}
		ready++
		return a.ID
	}
	push(1)
	if st, err := s.Stats(ctx); err != nil || st.Ready != ready {
		t.Fatalf("Stats = %+v, %v; want %d ready", st, err, ready)
	}
	push(2)
	if n, err := s.Admin().Counts(ctx); err != nil || n[admin.Ready] != ready {
		t.Fatalf("Counts = %v, %v; want %d ready", n, err, ready)
	}
	id := push(3)
	if j, err := s.Admin().Get(ctx, id, true); err != nil || j.State != admin.Ready || string(j.Payload) != "3" {
		t.Fatalf("Get = %+v, %v; want job %d ready", j, err, id)
	}
	id = push(4)
	jobs, err := s.Admin().List(ctx, admin.Filter{State: admin.Ready}, true, nil, 100, false)
	if err != nil || len(jobs) != ready || jobs[len(jobs)-1].ID != id {
		t.Fatalf("List = %d jobs, %v; want %d, job %d last", len(jobs), err, ready, id)
	}
	id = push(5)
	if err := s.Admin().Cancel(ctx, id); err != nil {
		t.Fatalf("Cancel of job %d in the inbox: %v", id, err)
	}
	ready--
	push(6)
	require.Eventually(t, func() bool { return other.Len() == ready }, 10*time.Second, time.Millisecond,
		"the other process's Len counts the inbox's jobs")
}
