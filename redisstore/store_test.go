package redisstore

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

func TestNewValidates(t *testing.T) {
	c := needRedis(t)
	for _, tc := range []struct {
		name string
		opt  Option
		want string
	}{
		{"brace", WithPrefix("a{b"), "WithPrefix"},
		{"close brace", WithPrefix("a}b"), "hash tag"},
		{"empty prefix", WithPrefix(""), "WithPrefix"},
		{"space", WithPrefix("a b"), "WithPrefix"},
		{"payload", WithMaxPayload(0), "WithMaxPayload"},
		{"poll", WithPollInterval(0), "WithPollInterval"},
		{"janitor", WithJanitorInterval(0), "WithJanitorInterval"},
		{"dead retention", WithDeadRetention(-1), "WithDeadRetention"},
		{"dead max", WithDeadMax(-1), "WithDeadMax"},
		{"worker", WithWorkerID(""), "WithWorkerID"},
		{"lease", WithLeaseTTL(time.Millisecond), "WithLeaseTTL"},
		{"leader", WithLeaderTTL(0), "WithLeaderTTL"},
		{"fallback", WithFallback(-1), "WithFallback"},
		{"health", WithHealthCheck(0, time.Second), "WithHealthCheck"},
		{"codec", WithCodec(nil), "WithCodec"},
		{"shard", WithShard("high", nil), "WithShard"},
		{"degraded without fallback", func(o *options) error {
			o.fallbackSize, o.startDegraded = 0, true
			return nil
		}, "WithConnect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New[int](c, tc.opt)
			var oe *queue.OptionError
			if !errors.As(err, &oe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, want an OptionError mentioning %q", err, tc.want)
			}
		})
	}
	if _, err := New[int](nil); err == nil {
		t.Fatal("New(nil) succeeded")
	}
	s, err := New[int](c, WithShard("urgent", c))
	if err != nil {
		t.Fatal(err)
	}
	cfg := storetest.Config("q", 10, nil, func(queue.Event) {})
	if err := s.Init(cfg); err == nil || !strings.Contains(err.Error(), "urgent") {
		t.Fatalf("Init with a shard for an unknown priority = %v", err)
	}
	s, _ = New[int](c)
	cfg.Name = "bad{name}"
	if err := s.Init(cfg); err == nil {
		t.Fatal("Init accepted a queue name that breaks the hash tag")
	}
}

func TestUnreachableAtNew(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	_, err := New[int](c, WithConnect(300*time.Millisecond, false))
	if err == nil || !strings.Contains(err.Error(), "unreachable") {
		t.Fatalf("New on an unreachable Redis = %v, want a clear error", err)
	}
}

// TestStartDegraded: with WithConnect(_, true) a store whose Redis does not
// answer starts on the fallback, serves jobs, and moves to Redis when it
// answers.
func TestStartDegraded(t *testing.T) {
	direct := needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	p.Down()
	c := proxiedClient(t, p)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, direct)), WithConnect(300*time.Millisecond, true),
		WithHealthCheck(50*time.Millisecond, 200*time.Millisecond))
	ctx := context.Background()
	st, _ := s.Stats(ctx)
	if st.Healthy {
		t.Fatalf("Stats = %+v, want unhealthy", st)
	}
	for i := range 3 {
		if _, err := s.Add(ctx, queue.Job[int]{Payload: i, Key: "k" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Add(ctx, queue.Job[int]{Key: "ka"}); !errors.Is(err, queue.ErrDuplicate) {
		t.Fatalf("duplicate key in the fallback: %v", err)
	}
	j := claimWithin(t, s, time.Second)
	if j.Payload != 0 {
		t.Fatalf("claimed %+v from the fallback, want payload 0", j)
	}
	must(t, s.Complete(ctx, j))
	p.Up()
	// The store notices Redis answers again by its periodic health check,
	// with no event for it, and Stats reads the counts from Redis: polled.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := s.Stats(ctx)
		require.NoError(c, err)
		assert.True(c, st.Healthy && st.Detail == "redis: ok" && st.Ready == 2, "Stats %+v", st)
	}, 10*time.Second, pollTick, "the store back on Redis with the 2 jobs written back")
	// The written-back jobs are in Redis now: a second store sees them.
	other := openStore(t, direct, nil, WithPrefix(s.o.prefix))
	for range 2 {
		j := claimWithin(t, other, 5*time.Second)
		must(t, other.Complete(ctx, j))
	}
}

// TestWriteBackExactlyOnce: a job whose Add reached Redis although the
// reply was lost is held as uncertain by the fallback; writing it back is a
// no-op, so it runs once.
func TestWriteBackExactlyOnce(t *testing.T) {
	c := needRedis(t)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	a, err := s.Add(ctx, queue.Job[int]{Payload: 7, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	sh := s.shards[0]
	// Replay the same Add as if its reply had been lost.
	fj := &fbJob[int]{job: queue.Job[int]{ID: a.ID, Key: "k", Payload: 7}, enc: []byte("7"), sh: sh,
		seq: sh.seqOf(a.ID), prio: 1, inRedis: true}
	if _, err := s.addFallback(fj, s.now(), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.claimFallback(s.now(), math.MaxInt); ok {
		t.Fatal("an uncertain job was claimed from the fallback")
	}
	must(t, s.writeBack(ctx, sh))
	st, _ := s.Stats(ctx)
	if st.Ready != 1 || st.PendingKeys != 1 || s.fb.held() != 0 {
		t.Fatalf("after write-back: %+v, fallback holds %d; want the one job once", st, s.fb.held())
	}
	// A genuinely unsent job is written back once, even if written twice.
	fj2 := &fbJob[int]{job: queue.Job[int]{Payload: 8}, enc: []byte("8"), sh: sh, prio: 1}
	if _, err := s.addFallback(fj2, s.now(), nil); err != nil {
		t.Fatal(err)
	}
	must(t, s.writeBack(ctx, sh))
	status, err := s.runAdd(ctx, sh, []addItem{s.itemOf(fj2, true)})
	if err != nil || status[0] != "seen" {
		t.Fatalf("second write-back = %q, %v; want seen", status, err)
	}
	if st, _ := s.Stats(ctx); st.Ready != 2 {
		t.Fatalf("Ready = %d, want 2", st.Ready)
	}
}

func TestPayloadTooLarge(t *testing.T) {
	c := needRedis(t)
	s, err := New[string](c, WithPrefix(testPrefix(t, c)), WithMaxPayload(100))
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.Init(storetest.Config("q", 10, nil, func(queue.Event) {})))
	_, err = s.Add(context.Background(), queue.Job[string]{Payload: strings.Repeat("x", 200)})
	if !errors.Is(err, queue.ErrPayloadTooLarge) {
		t.Fatalf("Add of a 200-byte payload with a 100-byte limit = %v", err)
	}
	// The same words as pgstore's (its TestBadPayloads).
	if want := "queue: payload too large: 202 bytes, limit 100"; err.Error() != want {
		t.Fatalf("Add of a large payload: %q, want %q", err, want)
	}
	if _, err := s.Add(context.Background(), queue.Job[string]{Payload: "small"}); err != nil {
		t.Fatal(err)
	}
}

// TestUndecodableDeadLettered: a record whose payload does not decode is
// dead-lettered with the error and the next job is claimed.
func TestUndecodableDeadLettered(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	var mu sync.Mutex
	var dead []queue.Event
	s := openStoreCfg(t, c, nil, func(cfg *storekit.Config) {
		cfg.Report = func(ev queue.Event) {
			mu.Lock()
			dead = append(dead, ev)
			mu.Unlock()
		}
	}, WithPrefix(prefix))
	w, err := New[string](c, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Init(storetest.Config("q", 10, nil, func(queue.Event) {})))
	ctx := context.Background()
	bad, err := w.Add(ctx, queue.Job[string]{Payload: "not a number", Key: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx, queue.Job[int]{Payload: 42}); err != nil {
		t.Fatal(err)
	}
	j := claimWithin(t, s, 5*time.Second)
	if j.Payload != 42 {
		t.Fatalf("claimed %+v, want the good job", j)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 || dead[0].Kind != queue.EventDead || dead[0].JobID != bad.ID || dead[0].Err == nil {
		t.Fatalf("events %+v, want one EventDead for job %d with the decode error", dead, bad.ID)
	}
	// The cause is the core's *queue.DecodeError, as on pgstore.
	var decodeErr *queue.DecodeError
	if !errors.As(dead[0].Err, &decodeErr) || decodeErr.JobID != bad.ID || decodeErr.Err == nil {
		t.Fatalf("EventDead cause %v, want a *queue.DecodeError naming job %d", dead[0].Err, bad.ID)
	}
	st, _ := s.Stats(ctx)
	if st.Dead != 1 || st.PendingKeys != 0 {
		t.Fatalf("Stats = %+v, want one dead job and the key released", st)
	}
}

func TestDeadRetention(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(testPrefix(t, c)), WithDeadRetention(time.Hour), WithDeadMax(2))
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Add(ctx, queue.Job[int]{Payload: i}); err != nil {
			t.Fatal(err)
		}
		j := claimWithin(t, s, time.Second)
		must(t, s.Dead(ctx, j, errors.New("boom")))
		clk.Advance(time.Minute)
	}
	must(t, s.trimDead(ctx, s.shards[0]))
	if st, _ := s.Stats(ctx); st.Dead != 2 {
		t.Fatalf("Dead = %d, want 2 (max kept)", st.Dead)
	}
	clk.Advance(2 * time.Hour)
	must(t, s.trimDead(ctx, s.shards[0]))
	if st, _ := s.Stats(ctx); st.Dead != 0 {
		t.Fatalf("Dead = %d after the retention, want 0", st.Dead)
	}
	if n, _ := c.HLen(ctx, s.shards[0].ks.fixed[kMeta]).Result(); n != 0 {
		t.Fatalf("%d job records left after trimming", n)
	}
}

// TestClaimWakesWithoutPolling: a waiting Claim is woken by an Add from
// another store at once and sleeps until a scheduled job's due time, with a
// handful of Redis calls rather than a poll loop.
func TestClaimWakesWithoutPolling(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	counted := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { counted.Close() }) // after the store's Close
	// The hook signals the claim calls: the first (the Claim looked and
	// found nothing), and a third (a Claim that polls).
	hook := &countHook{first: make(chan struct{}), third: make(chan struct{})}
	counted.AddHook(hook)
	clk := &armClock{FakeClock: queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), armed: make(chan struct{}, 1)}
	s := openStore(t, counted, clk, WithPrefix(prefix), WithPollInterval(time.Minute))
	producer := openStore(t, c, clk, WithPrefix(prefix))
	ctx := context.Background()

	got := make(chan queue.Job[int], 1)
	go func() {
		j, err := s.Claim(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- j
	}()
	queuetest.Await(t, hook.first, 5*time.Second, "the Claim's first claim call")
	if n := s.waiting.Load(); n != 1 {
		t.Fatalf("%d Claims waiting, want 1", n)
	}
	// Watch the waiting Claim for 300ms, the window in which a polling
	// Claim would show: a third claim call fails the test at once.
	select {
	case <-hook.third:
		t.Fatalf("%d claim calls by one waiting Claim within 300ms: polling", hook.n.Load())
	case <-time.After(300 * time.Millisecond):
	}
	before := hook.n.Load()
	start := time.Now()
	if _, err := producer.Add(ctx, queue.Job[int]{Payload: 1}); err != nil {
		t.Fatal(err)
	}
	j := <-got
	woke := time.Since(start)
	t.Logf("woken %v after the Add; %d claim calls while waiting", woke, before)
	// Woken, not polled: the poll interval is a minute. The bound is wide
	// because a loaded machine (CI runs packages side by side) delays a
	// wake-up by hundreds of milliseconds.
	if woke > 10*time.Second || j.Payload != 1 {
		t.Fatalf("Claim returned %+v after %v", j, woke)
	}
	if before > 2 {
		t.Fatalf("%d claim calls by one waiting Claim in 300ms: polling", before)
	}
	must(t, s.Complete(ctx, j))

	// A scheduled job: the Claim sleeps on the (fake) clock until it is due.
	if _, err := producer.Add(ctx, queue.Job[int]{Payload: 2, RunAt: clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	select { // a stale signal
	case <-clk.armed:
	default:
	}
	go func() {
		j, err := s.Claim(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- j
	}()
	queuetest.Await(t, clk.armed, 5*time.Second, "the Claim to arm a timer for the due time")
	select {
	case j := <-got:
		t.Fatalf("claimed %+v before its time", j)
	case <-time.After(100 * time.Millisecond):
	}
	clk.Advance(time.Hour)
	select {
	case j := <-got:
		if j.Payload != 2 {
			t.Fatalf("claimed %+v", j)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the scheduled job was not claimed at its due time")
	}
}

// countHook counts the claim script's calls and closes first and third
// at the first and third.
type countHook struct {
	n            atomic.Int64
	first, third chan struct{}
}

func (*countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); len(a) > 1 && a[1] == scriptClaim.Hash() {
			switch h.n.Add(1) {
			case 1:
				close(h.first)
			case 3:
				close(h.third)
			}
		}
		return next(ctx, cmd)
	}
}
func (*countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// armClock is a fake clock that signals armed each time a timer is made
// on it, so that a test waits until the code under test sleeps on the
// clock before it advances it.
type armClock struct {
	*queuetest.FakeClock
	armed chan struct{}
}

func (c *armClock) NewTimer(d time.Duration) queue.Timer {
	t := c.FakeClock.NewTimer(d)
	select {
	case c.armed <- struct{}{}:
	default:
	}
	return t
}

// TestPrioritySharding: priorities on separate Redis connections (here two
// databases of the test server, one behind a proxy). Claim keeps strict
// priority order across shards, IDs stay unique, and an outage of the
// low-priority Redis leaves high-priority work on the other untouched.
func TestPrioritySharding(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	low := redis.NewClient(&redis.Options{Addr: p.Addr(), DB: 1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	prefix := testPrefix(t, c)
	t.Cleanup(func() { deleteKeys(low, "{"+prefix+":*"); low.Close() }) // after the store's Close
	s := openStore(t, c, nil, WithPrefix(prefix), WithShard("low", low),
		WithHealthCheck(50*time.Millisecond, 200*time.Millisecond))
	if len(s.shards) != 2 {
		t.Fatalf("%d shards, want 2", len(s.shards))
	}
	ctx := context.Background()
	ids := map[int64]bool{}
	add := func(prio string, n int) {
		t.Helper()
		a, err := s.Add(ctx, queue.Job[int]{Priority: prio, Payload: n})
		if err != nil {
			t.Fatal(err)
		}
		if ids[a.ID] {
			t.Fatalf("ID %d given twice", a.ID)
		}
		ids[a.ID] = true
	}
	for i := range 500 {
		add("low", i)
	}
	add("normal", 1000)
	add("high", 2000)
	for _, want := range []int{2000, 1000, 0} {
		j := claimWithin(t, s, time.Second)
		if j.Payload != want {
			t.Fatalf("claimed payload %d, want %d", j.Payload, want)
		}
		must(t, s.Complete(ctx, j))
	}
	if n, _ := low.HGet(ctx, "{"+prefix+":q}:count", "r:low").Int(); n != 499 {
		t.Fatalf("low shard holds %d ready jobs, want 499", n)
	}
	p.Down()
	add("low", 3000) // goes to the fallback
	add("high", 4000)
	j := claimWithin(t, s, time.Second)
	must(t, s.Complete(ctx, j))
	st, _ := s.Stats(ctx)
	if st.Healthy || !s.shards[0].healthy.Load() || s.shards[1].healthy.Load() {
		t.Fatalf("Stats %+v: want the low shard down and the other up", st)
	}
	if j.Payload != 4000 {
		t.Fatalf("claimed %d, want the high job from the reachable shard", j.Payload)
	}
	p.Up()
	// The store notices Redis answers again by its periodic health check,
	// with no event for it: polled.
	require.Eventually(t, func() bool { st, _ := s.Stats(ctx); return st.Healthy }, 10*time.Second, pollTick,
		"the low shard healthy again")
}

func claimWithin(t *testing.T, s *Store[int], d time.Duration) queue.Job[int] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	j, err := s.Claim(ctx)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return j
}

// TestCancelCountsEveryJob: Cancel and CancelMatch report every job they
// end, so that the queue's counts add up. A key can hold two jobs here
// where the in-memory store holds one: after a lease rescue puts a running
// job back while its rerun waits, and on two shards (dedupe holds per
// shard). Cancel used to end both and report 1.
func TestCancelCountsEveryJob(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	low := redis.NewClient(&redis.Options{Addr: redisAddr(), DB: 1})
	t.Cleanup(func() { deleteKeys(low, "{"+prefix+":*"); low.Close() }) // after the store's Close
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(prefix), WithLeaseTTL(time.Second), WithShard("low", low))
	ctx := context.Background()
	add := func(j queue.Job[int]) storekit.Added {
		t.Helper()
		a, err := s.Add(ctx, j)
		if err != nil {
			t.Fatalf("Add(%+v): %v", j, err)
		}
		return a
	}
	for _, match := range []bool{false, true} {
		add(queue.Job[int]{Key: "k", Payload: 1})
		j := claimWithin(t, s, 5*time.Second)
		if a := add(queue.Job[int]{Key: "k", Payload: 2}); !a.Coalesced {
			t.Fatalf("Add of a running key: %+v, want coalesced", a)
		}
		clk.Advance(2 * time.Second)
		// The leader's janitor may rescue the job first; either way it is
		// back in its ready list when this call returns.
		_, err := s.RescueExpired(ctx)
		must(t, err)
		if st, _ := s.Stats(ctx); st.Ready != 1 || st.Waiting != 1 {
			t.Fatalf("after the rescue: %+v; want the job ready and its rerun waiting", st)
		}
		var n int
		if match {
			n, err = s.CancelMatch(ctx, func(k string) bool { return k == "k" })
		} else {
			n, err = s.Cancel(ctx, "k")
		}
		if err != nil || n != 2 {
			t.Fatalf("cancel (match %v) = %d, %v; want 2: the rescued job and its rerun", match, n, err)
		}
		if st, _ := s.Stats(ctx); st.Ready != 0 || st.Waiting != 0 || st.PendingKeys != 0 {
			t.Fatalf("after cancelling: %+v; want nothing left", st)
		}
		if err := s.Complete(ctx, j); !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("Complete of the rescued, then cancelled, claim = %v; want ErrLeaseLost", err)
		}
	}
	add(queue.Job[int]{Key: "s", Priority: "high"})
	add(queue.Job[int]{Key: "s", Priority: "low"}) // another shard: not a duplicate
	if n, err := s.Cancel(ctx, "s"); err != nil || n != 2 {
		t.Fatalf("Cancel of a key on two shards = %d, %v; want 2", n, err)
	}
}

// TestStaleClaimCannotSettle: a job whose lease expired while this
// process still ran it is rescued and claimed here again. The stale run's
// outcome is refused (ErrLeaseLost) and the new claim's is recorded. This
// process's claims were kept by ID only, so the stale run's Complete
// settled the job with the new claim's lease while the new run went on,
// and the new run's Complete then failed with ErrNotClaimed.
func TestStaleClaimCannotSettle(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(testPrefix(t, c)), WithLeaseTTL(time.Second))
	ctx := context.Background()
	if _, err := s.Add(ctx, queue.Job[int]{Key: "k", Payload: 1}); err != nil {
		t.Fatal(err)
	}
	stale := claimWithin(t, s, 5*time.Second)
	clk.Advance(2 * time.Second)
	// The leader's janitor may rescue the job first; either way it is
	// back in its ready list when this call returns.
	_, err := s.RescueExpired(ctx)
	must(t, err)
	cur := claimWithin(t, s, 5*time.Second)
	if cur.ID != stale.ID || cur.Attempt != 2 {
		t.Fatalf("claimed %+v; want job %d again, attempt 2", cur, stale.ID)
	}
	if lost, err := s.Heartbeat(ctx, []int64{cur.ID}); err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat = %v, %v; want the current claim's lease held", lost, err)
	}
	// A stale Retry would have scheduled the job again while it runs.
	if err := s.Retry(ctx, stale, clk.Now(), errors.New("boom")); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("the stale run's Retry = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, stale); !errors.Is(err, ErrNotClaimed) {
		t.Fatalf("a second outcome of the stale run = %v, want ErrNotClaimed", err)
	}
	if st, _ := s.Stats(ctx); st.Running != 1 || st.Ready != 0 || st.Scheduled != 0 || st.PendingKeys != 1 {
		t.Fatalf("after the stale run's outcome: %+v; want the job still running", st)
	}
	must(t, s.Complete(ctx, cur))
	if st, _ := s.Stats(ctx); st.Running != 0 || st.PendingKeys != 0 {
		t.Fatalf("after the current run's Complete: %+v; want the job done", st)
	}
}

// TestListenerBacksOffOnReplyErrors: when BLPOP on the wake list fails
// with a reply error (here WRONGTYPE; in production a replica refusing
// writes, or an ACL), the wake-up listener waits a health interval before
// it tries again. It used to try again at once, in a loop that kept a core
// and the Redis server busy for as long as a Claim waited.
func TestListenerBacksOffOnReplyErrors(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	counted := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { counted.Close() }) // after the store's Close
	hook := &blpopHook{}
	counted.AddHook(hook)
	clk := &armClock{FakeClock: queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), armed: make(chan struct{}, 1)}
	s := openStore(t, counted, clk, WithPrefix(prefix), WithPollInterval(time.Minute))
	ctx, cancel := context.WithCancel(context.Background())
	must(t, c.Set(ctx, s.shards[0].ks.fixed[kWake], "not a list", 0).Err())
	claimed := make(chan error, 1)
	go func() { // a waiting Claim sets the listener going
		_, err := s.Claim(ctx)
		claimed <- err
	}()
	// Nothing else here arms a timer on the fake clock: a Claim with no
	// job scheduled waits on the poll interval, in real time.
	queuetest.Await(t, clk.armed, 5*time.Second, "the listener to wait on the clock after the error")
	if n := hook.n.Load(); n != 1 {
		t.Fatalf("%d BLPOP calls before the listener waited; want 1", n)
	}
	cancel()
	if err := <-claimed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim = %v, want context.Canceled", err)
	}
}

// blpopHook counts BLPOP calls.
type blpopHook struct{ n atomic.Int64 }

func (*blpopHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *blpopHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "blpop" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (*blpopHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFallbackKeepsPriorityAcrossShards: while the low-priority shard is
// down, its jobs wait in the fallback, and they must not delay the higher
// priorities of a shard that is up. Claim used to serve every
// fallback job before any shard's.
func TestFallbackKeepsPriorityAcrossShards(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	p := storetest.NewProxy(t, redisAddr())
	p.Down()
	low := redis.NewClient(&redis.Options{Addr: p.Addr(), DB: 1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
	prefix := testPrefix(t, c)
	t.Cleanup(func() { low.Close() }) // after the store's Close
	s := openStore(t, c, nil, WithPrefix(prefix), WithShard("low", low), WithConnect(300*time.Millisecond, true))
	if s.shards[1].healthy.Load() || !s.shards[0].healthy.Load() {
		t.Fatal("want the low shard down and the other up")
	}
	ctx := context.Background()
	for i, prio := range []string{"low", "low", "normal", "high"} {
		if _, err := s.Add(ctx, queue.Job[int]{Priority: prio, Payload: i}); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{3, 2, 0, 1} {
		j := claimWithin(t, s, 5*time.Second)
		if j.Payload != want {
			t.Fatalf("claimed payload %d, want %d: high, normal from redis, then low from the fallback", j.Payload, want)
		}
		must(t, s.Complete(ctx, j))
	}
}

// TestOutcomeAfterLeaseLostAndJobEnded: a run whose lease expired, and
// whose job was then dead-lettered by the janitor (its last attempt), gets
// ErrLeaseLost from Complete: its outcome was not recorded. Complete
// returned nil, as for a repeated call, as if it had been.
func TestOutcomeAfterLeaseLostAndJobEnded(t *testing.T) {
	c := needRedis(t)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	s := openStore(t, c, clk, WithPrefix(testPrefix(t, c)), WithLeaseTTL(time.Second))
	ctx := context.Background()
	if _, err := s.Add(ctx, queue.Job[int]{Key: "k", Payload: 1, MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	j := claimWithin(t, s, 5*time.Second)
	clk.Advance(2 * time.Second)
	// The leader's janitor may rescue the job first; either way it is
	// dead when this call returns.
	_, err := s.RescueExpired(ctx)
	must(t, err)
	if st, _ := s.Stats(ctx); st.Dead != 1 {
		t.Fatalf("Stats = %+v; want the job dead after its last attempt's lease expired", st)
	}
	if err := s.Complete(ctx, j); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Complete of the dead-lettered job's run = %v, want ErrLeaseLost", err)
	}
}

// TestShardsOnOneDatabaseRefused: two shards whose clients reach the same
// Redis database would share every key of the queue; Start says so and
// names the priorities. The same server with another DB is accepted.
func TestShardsOnOneDatabaseRefused(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	same := redis.NewClient(&redis.Options{Addr: redisAddr()})
	t.Cleanup(func() { same.Close() })
	s, err := New[int](c, WithPrefix(prefix), WithShard("low", same))
	if err != nil {
		t.Fatal(err)
	}
	cfg := storetest.Config("q", 100, nil, func(queue.Event) {})
	cfg.Logger = quietLogger()
	if err := s.Init(cfg); err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "WithShard") || !strings.Contains(err.Error(), "low") {
		t.Fatalf("Start with two shards on one database = %v, want an error naming WithShard and the priorities", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	other := redis.NewClient(&redis.Options{Addr: redisAddr(), DB: 1})
	t.Cleanup(func() { deleteKeys(other, "{"+prefix+":*"); other.Close() })
	openStore(t, c, nil, WithPrefix(prefix), WithShard("low", other)) // DB 1: accepted
}
