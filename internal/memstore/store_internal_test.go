package memstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// manualClock is a Clock that moves only when told; its timers never
// fire (these tests promote with PromoteDue, with no scheduler running).
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *manualClock) NewTimer(time.Duration) queuetype.Timer { return idleTimer{} }

type idleTimer struct{}

func (idleTimer) C() <-chan time.Time      { return nil }
func (idleTimer) Reset(time.Duration) bool { return false }
func (idleTimer) Stop() bool               { return false }

// newTestStore returns an in-memory store bound to a manual clock, not
// started: the test promotes due jobs itself.
// defaultPriorities returns the queue's default priority levels
// (queue.DefaultPriorities, which this package cannot import).
func defaultPriorities() []queuetype.Priority {
	return []queuetype.Priority{{Name: "high", Weight: 0}, {Name: "normal", Weight: 5}, {Name: "low", Weight: 10}}
}

func newTestStore(t *testing.T, capacity int) (*Store[int], *manualClock) {
	t.Helper()
	clk := &manualClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s := New[int]()
	require.NoError(t, s.Init(storekit.Config{
		Name: "test", Priorities: defaultPriorities(), DefaultPriority: "normal", Capacity: capacity,
		RequeueDelay: 10 * time.Second, Coalesce: true, MaxAttempts: 3, Clock: clk,
		Logger: slog.New(slog.DiscardHandler), Report: func(queuetype.Event) {},
	}))
	return s, clk
}

// sameShardKey returns a key other than key whose entry lives in key's
// shard.
func sameShardKey(ks *keySet[int], key string) string {
	want := ks.hash(key) >> keyShardShift
	for i := 0; ; i++ {
		if k := fmt.Sprint("other", i); ks.hash(k)>>keyShardShift == want {
			return k
		}
	}
}

func entryOf(s *Store[int], key string) *keyEntry {
	h := s.keys.hash(key)
	sh := s.keys.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.find(key, h)
}

// claimNow claims a job that the test knows is ready.
func claimNow(t *testing.T, s *Store[int]) queuetype.Job[int] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j, err := s.Claim(ctx)
	require.NoError(t, err)
	return j
}

// TestStaleReadyItemMeetsReusedEntry cancels a ready job, lets another
// key's job take its entry, and claims: the cancelled job's item, still
// in the ring, must be skipped, and the other job run with its own key.
func TestStaleReadyItemMeetsReusedEntry(t *testing.T) {
	s, _ := newTestStore(t, 100)
	ctx := context.Background()
	a, err := s.Add(ctx, queuetype.Job[int]{Key: "a", Payload: 1})
	require.NoError(t, err)
	ea := entryOf(s, "a")
	n, err := s.Cancel(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	other := sameShardKey(s.keys, "a")
	b, err := s.Add(ctx, queuetype.Job[int]{Key: other, Payload: 2})
	require.NoError(t, err)
	require.Same(t, ea, entryOf(s, other), "the cancelled job's entry is reused")
	assert.Equal(t, 1, s.Len(), "the stale item is not counted")

	j := claimNow(t, s)
	assert.Equal(t, b.ID, j.ID, "job %d's stale item is skipped", a.ID)
	assert.Equal(t, other, j.Key)
	assert.Equal(t, 2, j.Payload)
	assert.Zero(t, s.Len())
	require.NoError(t, s.Complete(ctx, j))
	st, _ := s.Stats(ctx)
	assert.Zero(t, st.PendingKeys)
	assert.Zero(t, st.Running)
}

// TestStaleScheduledItemMeetsReusedEntry is the same for a scheduled
// job: its item comes due after its entry has moved on to another key.
func TestStaleScheduledItemMeetsReusedEntry(t *testing.T) {
	s, clk := newTestStore(t, 100)
	ctx := context.Background()
	now := clk.Now()
	_, err := s.Add(ctx, queuetype.Job[int]{Key: "a", Group: "g", RunAt: now.Add(time.Second)})
	require.NoError(t, err)
	ea := entryOf(s, "a")
	_, err = s.Cancel(ctx, "a")
	require.NoError(t, err)
	other := sameShardKey(s.keys, "a")
	b, err := s.Add(ctx, queuetype.Job[int]{Key: other, Group: "g", RunAt: now.Add(2 * time.Second)})
	require.NoError(t, err, "the cancelled job gave its group back")
	require.Same(t, ea, entryOf(s, other))

	st, _ := s.Stats(ctx)
	assert.Equal(t, 1, st.Scheduled)
	next, err := s.Scheduled(ctx, 10)
	require.NoError(t, err)
	require.Len(t, next, 1, "the listing skips the stale item")
	assert.Equal(t, other, next[0].Key)

	clk.advance(1500 * time.Millisecond)
	n, err := s.PromoteDue(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "the stale item is dropped, not promoted")
	st, _ = s.Stats(ctx)
	assert.Equal(t, 1, st.Scheduled)
	assert.Zero(t, st.Ready)

	clk.advance(time.Second)
	n, err = s.PromoteDue(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	j := claimNow(t, s)
	assert.Equal(t, b.ID, j.ID)
	assert.Equal(t, other, j.Key)
	assert.Equal(t, "g", j.Group)
}

// TestCancelledScheduledItemsAreSweptOut schedules keyed jobs an hour
// out and cancels nine in ten: the cancelled items must not pile up in the
// heap until their time (a schedule of jobs cancelled as fast as they are
// added grew without bound), and the live ones must keep their order,
// count, listing and run.
func TestCancelledScheduledItemsAreSweptOut(t *testing.T) {
	s, clk := newTestStore(t, 100000)
	ctx := context.Background()
	now := clk.Now()
	const n = 20000
	bound := func(live int) int { return max(2*live, live+compactMin) }
	var live []string
	for i := range n {
		key := fmt.Sprintf("k%05d", i)
		// Later keys are due earlier, so the heap's order is exercised.
		_, err := s.Add(ctx, queuetype.Job[int]{Key: key, Payload: i, RunAt: now.Add(time.Hour + time.Duration(n-i)*time.Millisecond)})
		require.NoError(t, err)
		if i%10 == 0 {
			live = append(live, key)
		} else {
			c, err := s.Cancel(ctx, key)
			require.NoError(t, err)
			require.Equal(t, 1, c)
		}
		s.sched.mu.Lock()
		held := s.sched.heap.len()
		s.sched.mu.Unlock()
		require.LessOrEqual(t, held, bound(len(live)), "after key %d: cancelled items held", i)
	}
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, len(live), st.Scheduled)
	assert.Equal(t, len(live), st.PendingKeys)

	slices.Reverse(live) // in due order
	next, err := s.Scheduled(ctx, 10)
	require.NoError(t, err)
	require.Len(t, next, 10)
	for i, j := range next {
		assert.Equal(t, live[i], j.Key)
	}

	clk.advance(2 * time.Hour)
	promoted, err := s.PromoteDue(ctx)
	require.NoError(t, err)
	require.Equal(t, len(live), promoted)
	for i, key := range live {
		j := claimNow(t, s)
		require.Equal(t, key, j.Key, "job %d in due order", i)
		require.NoError(t, s.Complete(ctx, j))
	}
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Scheduled)
	assert.Zero(t, st.PendingKeys)
	s.sched.mu.Lock()
	assert.Zero(t, s.sched.heap.len())
	assert.Zero(t, s.sched.dead)
	assert.LessOrEqual(t, len(s.sched.heap.blocks), 1, "the heap's blocks are given back")
	s.sched.mu.Unlock()
}

// TestScheduleChurnStaysSmall adds and cancels scheduled jobs one after
// the other, and with CancelMatch in bulk: the heap stays below
// compactMin items plus the live ones.
func TestScheduleChurnStaysSmall(t *testing.T) {
	s, clk := newTestStore(t, 100)
	ctx := context.Background()
	at := clk.Now().Add(time.Hour)
	for i := range 50000 {
		key := fmt.Sprint(i)
		_, err := s.Add(ctx, queuetype.Job[int]{Key: key, Group: "g" + key, RunAt: at})
		require.NoError(t, err)
		_, err = s.Cancel(ctx, key)
		require.NoError(t, err)
	}
	for i := range 5000 {
		_, err := s.Add(ctx, queuetype.Job[int]{Key: fmt.Sprint("m", i), RunAt: at})
		require.NoError(t, err)
	}
	c, err := s.CancelMatch(ctx, func(string) bool { return true })
	require.NoError(t, err)
	require.Equal(t, 5000, c)
	s.sched.mu.Lock()
	held, dead := s.sched.heap.len(), s.sched.dead
	s.sched.mu.Unlock()
	assert.Less(t, held, compactMin)
	assert.Equal(t, held, dead, "every item left is a cancelled one, counted")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Zero(t, st.Scheduled)
	_, err = s.Add(ctx, queuetype.Job[int]{Key: "0", Group: "g0", RunAt: at})
	require.NoError(t, err, "a cancelled job's key and group are free")
}

// TestMemoryStoreKeysModel drives the store through random adds, claims,
// completions, retries, cancels and promotions over thousands of keys —
// enough for shards to grow their chunks and indexes, sweep what workers
// finished, and hand entries from one key to another with cancelled
// jobs' items still queued — and checks every claim and every count
// against a model. (Trimming after a burst: TestKeySetShrinksAfterABurst.)
func TestMemoryStoreKeysModel(t *testing.T) {
	const nkeys = 40_000
	s, clk := newTestStore(t, 1<<16)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	m := newStoreModel()
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key%05d", i)
	}
	for step := range 160_000 {
		// Phases: 15k steps that mostly add, so that many keys are held at
		// once (chunks and indexes grow), then 25k that only claim,
		// finish and cancel (keys drain; refills sweep what the workers
		// finished), and again.
		adds := 5
		if step%40_000 >= 15_000 {
			adds = 0
		}
		switch op := rng.IntN(10); {
		case op < adds:
			key := keys[rng.IntN(nkeys)]
			job := queuetype.Job[int]{Key: key, Payload: step}
			if rng.IntN(4) == 0 {
				job.RunAt = clk.Now().Add(time.Duration(1+rng.IntN(1000)) * time.Millisecond)
			}
			added, err := s.Add(ctx, job)
			m.add(t, key, job.RunAt, added, err)
		case op < adds+2 && len(m.ready) > 0:
			// As a queue's worker claims: the entry comes with the job.
			var j queuetype.Job[int]
			var mc WorkerClaim
			require.NoError(t, s.ClaimJob(ctx, &j, &mc))
			m.claim(t, j, mc.ent)
		case op < adds+4 && len(m.run) > 0:
			r := m.anyRunning(rng)
			j := queuetype.Job[int]{ID: r.id, Key: r.key, Attempt: 1}
			switch rng.IntN(6) {
			case 0:
				at := clk.Now().Add(time.Duration(1+rng.IntN(500)) * time.Millisecond)
				err := s.Retry(ctx, j, at, errors.New("again"))
				m.retry(t, j, at, clk.Now(), err)
			case 1:
				require.NoError(t, s.Complete(ctx, j)) // through the Store interface: no entry
				m.complete(j, clk.Now())
			default:
				s.finish(&j, 0, r.ent) // as a worker finishes: no lock unless a rerun waits
				m.complete(j, clk.Now())
			}
		case op == adds+4:
			m.cancelStep(t, s, keys[rng.IntN(nkeys)], step)
		default:
			m.promoteStep(t, s, clk, time.Duration(rng.IntN(50))*time.Millisecond, step)
		}
		if step%5000 == 0 {
			m.check(t, s, step)
		}
	}
	m.check(t, s, -1)
}

// TestMemoryStoreScheduleModel checks the schedule against the model
// under many scheduled adds and cancels, with sweeps of cancelled items
// (compactMin lowered to 2) between the steps: counts, the due order of
// promotions, listings and claims must match the model throughout.
func TestMemoryStoreScheduleModel(t *testing.T) {
	defer func(n int) { compactMin = n }(compactMin)
	compactMin = 2
	const nkeys = 300
	s, clk := newTestStore(t, 1<<16)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 5))
	m := newStoreModel()
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key%03d", i)
	}
	for step := range 60_000 {
		switch op := rng.IntN(20); {
		case op < 8:
			key := keys[rng.IntN(nkeys)]
			job := queuetype.Job[int]{Key: key, Payload: step, RunAt: clk.Now().Add(time.Duration(1+rng.IntN(30000)) * time.Millisecond)}
			added, err := s.Add(ctx, job)
			m.add(t, key, job.RunAt, added, err)
		case op < 15:
			m.cancelStep(t, s, keys[rng.IntN(nkeys)], step)
		case op < 17 && len(m.ready) > 0:
			var j queuetype.Job[int]
			var mc WorkerClaim
			require.NoError(t, s.ClaimJob(ctx, &j, &mc))
			m.claim(t, j, mc.ent)
			s.finish(&j, 0, mc.ent)
			m.complete(j, clk.Now())
		case op == 17:
			next, err := s.Scheduled(ctx, 5)
			require.NoError(t, err)
			want := m.earliest(5)
			require.Len(t, next, len(want), "step %d: listing", step)
			for i := range want {
				require.Equal(t, want[i], next[i].ID, "step %d: listing %d", step, i)
			}
		default:
			m.promoteStep(t, s, clk, time.Duration(rng.IntN(20))*time.Millisecond, step)
		}
		if step%2000 == 0 {
			m.check(t, s, step)
		}
	}
	m.check(t, s, -1)
}

// cancelStep cancels key in the store and the model, and checks that
// both cancelled as many jobs.
func (m *storeModel) cancelStep(t *testing.T, s *Store[int], key string, step int) {
	t.Helper()
	n, err := s.Cancel(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, m.cancel(key), n, "step %d: Cancel(%s)", step, key)
}

// promoteStep moves the clock on by d and promotes the due jobs in the
// store and the model, and checks that both promoted as many.
func (m *storeModel) promoteStep(t *testing.T, s *Store[int], clk *manualClock, d time.Duration, step int) {
	t.Helper()
	clk.advance(d)
	n, err := s.PromoteDue(context.Background())
	require.NoError(t, err)
	require.Equal(t, m.promote(clk.Now()), n, "step %d: promoted", step)
}

// earliest returns the IDs of the n scheduled jobs due first (FIFO for
// equal times), as the store lists them.
func (m *storeModel) earliest(n int) []int64 {
	js := make([]modelJob, 0, len(m.sched))
	for _, j := range m.sched {
		js = append(js, j)
	}
	slices.SortFunc(js, func(a, b modelJob) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	ids := make([]int64, 0, n)
	for _, j := range js[:min(n, len(js))] {
		ids = append(ids, j.id)
	}
	return ids
}

// storeModel is what the store should hold: keys and where their jobs
// are, the ready jobs in ring order, the scheduled ones, the running ones.
type storeModel struct {
	keys    map[string]*modelKey
	ready   []int64
	sched   map[int64]modelJob
	running map[int64]int // index in run
	run     []modelJob
	reruns  int
	peak    int // the most keys held at once
}

type modelKey struct {
	id    int64 // the job holding the key
	rerun *modelJob
}

type modelJob struct {
	id  int64
	key string
	at  time.Time // zero: immediate
	ent *keyEntry // the key's entry, for a running job
}

func newStoreModel() *storeModel {
	return &storeModel{keys: map[string]*modelKey{}, sched: map[int64]modelJob{}, running: map[int64]int{}}
}

func (m *storeModel) add(t *testing.T, key string, at time.Time, added storekit.Added, err error) {
	t.Helper()
	k := m.keys[key]
	switch {
	case k == nil:
		require.NoError(t, err, "%s is free", key)
		require.False(t, added.Coalesced)
		m.keys[key] = &modelKey{id: added.ID}
		m.peak = max(m.peak, len(m.keys))
		j := modelJob{id: added.ID, key: key, at: at}
		if added.Scheduled {
			require.False(t, at.IsZero())
			m.sched[j.id] = j
		} else {
			m.ready = append(m.ready, j.id)
		}
	case m.isRunning(k.id) && k.rerun == nil:
		require.NoError(t, err, "%s is running: coalesced", key)
		require.True(t, added.Coalesced)
		k.rerun = &modelJob{id: added.ID, key: key, at: at}
		m.reruns++
	default:
		require.ErrorIs(t, err, queuetype.ErrDuplicate, "%s is held", key)
	}
}

func (m *storeModel) claim(t *testing.T, j queuetype.Job[int], ent *keyEntry) {
	t.Helper()
	require.Equal(t, m.ready[0], j.ID, "the oldest ready job is claimed")
	m.ready = m.ready[1:]
	require.Equal(t, j.ID, m.keys[j.Key].id, "job %d comes with its own key %s", j.ID, j.Key)
	require.NotNil(t, ent)
	m.running[j.ID] = len(m.run)
	m.run = append(m.run, modelJob{id: j.ID, key: j.Key, ent: ent})
}

func (m *storeModel) isRunning(id int64) bool {
	_, ok := m.running[id]
	return ok
}

func (m *storeModel) anyRunning(rng *rand.Rand) modelJob {
	return m.run[rng.IntN(len(m.run))]
}

func (m *storeModel) stopRunning(id int64) {
	i := m.running[id]
	last := m.run[len(m.run)-1]
	m.run[i], m.running[last.id] = last, i
	m.run = m.run[:len(m.run)-1]
	delete(m.running, id)
}

// release ends key's running job: its rerun, if any, takes the key.
func (m *storeModel) release(key string, now time.Time) {
	k := m.keys[key]
	if k.rerun == nil {
		delete(m.keys, key)
		return
	}
	r := *k.rerun
	k.id, k.rerun = r.id, nil
	m.reruns--
	if !r.at.IsZero() && r.at.After(now) {
		m.sched[r.id] = r
	} else {
		m.ready = append(m.ready, r.id)
	}
}

func (m *storeModel) complete(j queuetype.Job[int], now time.Time) {
	m.stopRunning(j.ID)
	m.release(j.Key, now)
}

func (m *storeModel) retry(t *testing.T, j queuetype.Job[int], at, now time.Time, err error) {
	t.Helper()
	m.stopRunning(j.ID)
	k := m.keys[j.Key]
	if k.rerun != nil {
		require.ErrorIs(t, err, storekit.ErrSuperseded, "a waiting rerun supersedes the retry")
		m.release(j.Key, now)
		return
	}
	require.NoError(t, err)
	m.sched[j.ID] = modelJob{id: j.ID, key: j.Key, at: at}
}

func (m *storeModel) cancel(key string) int {
	k := m.keys[key]
	switch {
	case k == nil:
		return 0
	case k.rerun != nil:
		k.rerun = nil
		m.reruns--
		return 1
	case m.isRunning(k.id):
		return 0
	}
	delete(m.keys, key)
	delete(m.sched, k.id)
	m.ready = slices.DeleteFunc(m.ready, func(id int64) bool { return id == k.id })
	return 1
}

// promote moves the due scheduled jobs to the ready queue, in due order.
func (m *storeModel) promote(now time.Time) int {
	var due []modelJob
	for _, j := range m.sched {
		if !j.at.After(now) {
			due = append(due, j)
		}
	}
	slices.SortFunc(due, func(a, b modelJob) int {
		return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.id, b.id))
	})
	for _, j := range due {
		delete(m.sched, j.id)
		m.ready = append(m.ready, j.id)
	}
	return len(due)
}

func (m *storeModel) check(t *testing.T, s *Store[int], step int) {
	t.Helper()
	st, err := s.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, len(m.ready), st.Ready, "step %d: ready", step)
	require.Equal(t, len(m.sched), st.Scheduled, "step %d: scheduled", step)
	require.Equal(t, len(m.running), st.Running, "step %d: running", step)
	require.Equal(t, len(m.keys), st.PendingKeys, "step %d: keys", step)
	require.Equal(t, m.reruns, st.Waiting, "step %d: reruns", step)
	chunks := 0
	for i := range s.keys.shards {
		sh := &s.keys.shards[i]
		sh.mu.Lock()
		for _, ch := range sh.chunks {
			if ch != nil {
				chunks++
			}
		}
		sh.mu.Unlock()
	}
	// The chunks never run far ahead of the most keys held at once.
	require.LessOrEqual(t, chunks*chunkSize, 2*m.peak+2*keyShards*chunkSize, "step %d: entries made (peak %d keys)", step, m.peak)
}

// An admin scan freezes the rings: a claim waits for it, and gets the
// job once the scan ends; a push goes through meanwhile, and the ring's
// length reads true.
func TestScanFreezesPops(t *testing.T) {
	s, _ := newTestStore(t, 100)
	ctx := context.Background()
	a, err := s.Add(ctx, queuetype.Job[int]{Payload: 1})
	require.NoError(t, err)

	s.popLock()
	r := s.ring(uint8(s.cfg.PriorityIndex("")))
	var it item[int]
	assert.Equal(t, popFrozen, r.pop(&it, false))
	claimed := make(chan queuetype.Job[int])
	go func() {
		j, err := s.Claim(ctx)
		assert.NoError(t, err)
		claimed <- j
	}()
	_, err = s.Add(ctx, queuetype.Job[int]{Payload: 2})
	require.NoError(t, err, "a push does not wait for the scan")
	assert.Equal(t, 2, s.Len())
	var seen []int
	s.eachReady(false, func(it *item[int]) { seen = append(seen, it.payload) })
	assert.Equal(t, []int{1, 2}, seen)
	s.popUnlock()

	j := <-claimed
	assert.Equal(t, a.ID, j.ID)
	assert.Equal(t, 1, s.Len())
	require.NoError(t, s.Complete(ctx, j))
}
