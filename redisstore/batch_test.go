package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEnqueueMany: a batch is added with Add's rules, in order (a later
// job sees an earlier one's key and group; a key already pending is
// skipped; scheduled jobs go to the schedule; ready jobs beyond the
// capacity are refused and the error says so), and the queue counts and
// observes the jobs as enqueued or dropped.
func TestEnqueueMany(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s, err := New[int](c, WithPrefix(testPrefix(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[queue.EventKind]int{}
	q, err := queue.NewWithStore(s, func(context.Context, queue.Job[int]) error { return nil },
		queue.WithName("many"), queue.WithClock(clk), queue.WithCapacity(4, 100),
		queue.WithObserver(func(ev queue.Event) { mu.Lock(); seen[ev.Kind]++; mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := s.Add(ctx, queue.Job[int]{Key: "old"}); err != nil {
		t.Fatal(err)
	}
	later := clk.Now().Add(time.Hour)
	jobs := []queue.Job[int]{
		{Payload: 1},
		{Key: "old", Payload: 2},               // pending already: skipped
		{Key: "k", Payload: 3},                 // added
		{Key: "k", Payload: 4},                 // its key taken by job 2: skipped
		{Group: "g", RunAt: later, Payload: 5}, // scheduled
		{Group: "g", RunAt: later, Payload: 6}, // its group taken: skipped
		{Payload: 7},                           // the 4th ready job
		{Payload: 8},                           // beyond the capacity (4): refused
	}
	out, err := s.EnqueueMany(ctx, jobs)
	if !errors.Is(err, queue.ErrQueueFull) {
		t.Fatalf("EnqueueMany error = %v; want ErrQueueFull for the job beyond the capacity", err)
	}
	want := []bool{true, false, true, false, true, false, true, false}
	ids := map[int64]bool{}
	for i, a := range out {
		if (a.ID != 0) != want[i] {
			t.Fatalf("job %d: %+v; want added %v", i, a, want[i])
		}
		if a.ID != 0 && ids[a.ID] {
			t.Fatalf("job %d: ID %d given twice", i, a.ID)
		}
		ids[a.ID] = true
		if a.Scheduled != (i == 4) {
			t.Fatalf("job %d: %+v; want scheduled only for job 4", i, a)
		}
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Ready != 4 || st.Scheduled != 1 || st.PendingKeys != 2 {
		t.Fatalf("Stats = %+v, %v; want 4 ready, 1 scheduled, 2 pending keys", st, err)
	}
	qs := q.Stats()
	// The Add above went around the queue; the batch's 4 jobs are counted.
	if qs.Counts.Enqueued != 4 || qs.Counts.DroppedFull != 1 {
		t.Fatalf("queue counts %+v; want 4 enqueued, 1 dropped", qs.Counts)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen[queue.EventEnqueued] != 4 || seen[queue.EventDropped] != 1 {
		t.Fatalf("observed %v; want 4 enqueued, 1 dropped", seen)
	}
}

// TestEnqueueManyRoundTrips: a batch larger than a script call and an ID
// block takes one pipeline for its jobs (plus the reservation of the ID
// blocks it needs), and a batch that fits in the blocks already reserved
// takes exactly one round trip. Every job is stored once, in order.
func TestEnqueueManyRoundTrips(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	counted := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { counted.Close() })
	h := &rtHook{}
	counted.AddHook(h)
	s := openStore(t, counted, nil, WithPrefix(prefix))
	// Only this goroutine's calls are counted, not the store's loops'.
	ctx := context.WithValue(context.Background(), rtKey{}, true)
	batch := func(n int) []queue.Job[int] {
		jobs := make([]queue.Job[int], n)
		for i := range jobs {
			jobs[i].Payload = i
		}
		return jobs
	}
	h.n.Store(0)
	out, err := s.EnqueueMany(ctx, batch(600))
	if err != nil {
		t.Fatal(err)
	}
	// 600 jobs: three ID blocks, reserved in two round trips, and one
	// pipeline of three add calls.
	if n := h.n.Load(); n != 3 {
		t.Fatalf("a batch of 600 took %d round trips; want 3", n)
	}
	h.n.Store(0)
	out2, err := s.EnqueueMany(ctx, batch(150)) // 168 IDs are left reserved
	if err != nil {
		t.Fatal(err)
	}
	if n := h.n.Load(); n != 1 {
		t.Fatalf("a batch of 150 took %d round trips; want 1", n)
	}
	out = append(out, out2...)
	for i := 1; i < len(out); i++ {
		if out[i].ID <= out[i-1].ID {
			t.Fatalf("IDs %d then %d: want increasing", out[i-1].ID, out[i].ID)
		}
	}
	for i := range 750 {
		want := i
		if i >= 600 {
			want = i - 600
		}
		if j := claimWithin(t, s, 5*time.Second); j.Payload != want {
			t.Fatalf("claim %d: payload %d; want %d (the jobs in order)", i, j.Payload, want)
		}
	}
}

// rtHook counts round trips, each command or pipeline sent, made with a
// context marked with rtKey.
type rtHook struct{ n atomic.Int64 }

type rtKey struct{}

func (*rtHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *rtHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(rtKey{}) != nil && cmd.Name() != "hello" { // not a new connection's handshake
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *rtHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(rtKey{}) != nil && cmds[0].Name() != "client" { // nor its CLIENT SETINFO
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// TestEnqueueManyAfterBlocksLost: when Redis has lost the registration of
// the ID blocks this process reserved (a restart without persistence), the
// batch's add calls store nothing and report the jobs stale; EnqueueMany
// gives them IDs of new blocks and adds each once.
func TestEnqueueManyAfterBlocksLost(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	s := openStore(t, c, nil, WithPrefix(prefix))
	ctx := context.Background()
	jobs := make([]queue.Job[int], 300)
	for i := range jobs {
		jobs[i].Payload = i
	}
	first, err := s.EnqueueMany(ctx, jobs[:10])
	if err != nil {
		t.Fatal(err)
	}
	deleteKeys(c, "{"+prefix+":*}:blocks:*")
	out, err := s.EnqueueMany(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range out {
		if a.ID <= first[len(first)-1].ID {
			t.Fatalf("job %d: ID %d, not above the lost blocks' IDs (last %d)", i, a.ID, first[len(first)-1].ID)
		}
	}
	if st, err := s.Stats(ctx); err != nil || st.Ready != 310 {
		t.Fatalf("Stats = %+v, %v; want 310 ready jobs", st, err)
	}
}

// TestEnqueueManyDuringOutage: while Redis is unreachable, a batch goes
// to the in-memory fallback as Adds do (the call whose reply is lost
// included), and once Redis answers again every job is written back once.
func TestEnqueueManyDuringOutage(t *testing.T) {
	needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	c := proxiedClient(t, p)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	batch := func(from, n int) []queue.Job[int] {
		jobs := make([]queue.Job[int], n)
		for i := range jobs {
			jobs[i].Payload = from + i
		}
		return jobs
	}
	if _, err := s.EnqueueMany(ctx, batch(0, 5)); err != nil {
		t.Fatal(err)
	}
	p.Down()
	for _, from := range []int{5, 25} { // the first finds the outage, the second a shard known down
		out, err := s.EnqueueMany(ctx, batch(from, 20))
		if err != nil {
			t.Fatalf("EnqueueMany during the outage: %v", err)
		}
		for i, a := range out {
			if a.ID == 0 {
				t.Fatalf("job %d of the batch from %d not accepted: %+v", i, from, a)
			}
		}
	}
	p.Up()
	// The store notices Redis is back by its periodic health check and
	// writes the fallback's jobs back, with no event for either: polled.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := s.Stats(ctx)
		require.NoError(c, err)
		assert.True(c, st.Healthy && st.Detail == "redis: ok" && st.Ready == 45, "after the outage: %+v", st)
	}, 20*time.Second, pollTick)
	got := map[int]int{}
	for range 45 {
		got[claimWithin(t, s, 5*time.Second).Payload]++
	}
	for i := range 45 {
		if got[i] != 1 {
			t.Fatalf("job %d claimed %d times; want once (claims %v)", i, got[i], got)
		}
	}
}
