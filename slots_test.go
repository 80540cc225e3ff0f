package queue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/storekit"
)

// slotHub is one table of concurrency slots shared by the queues of a
// test, as a durable store's is by processes: the in-memory store's own
// SlotStore, announcing each release to every queue (unless mute), and
// counting the calls.
type slotHub struct {
	tab      *memstore.Store[int]
	mu       sync.Mutex
	fns      []func(target, waiter string)
	mute     atomic.Bool
	acquires atomic.Int64
	releases atomic.Int64
}

func newSlotHub(t *testing.T) *slotHub {
	h := &slotHub{tab: memstore.New[int]()}
	require.NoError(t, h.tab.Init(storekit.Config{Name: "slots", Priorities: []queue.Priority{{Name: "normal"}}, DefaultPriority: "normal", Capacity: 1, Clock: timeClock{}}))
	h.tab.WatchSlots(func(target, waiter string) {
		if h.mute.Load() {
			return
		}
		h.mu.Lock()
		fns := h.fns
		h.mu.Unlock()
		for _, fn := range fns {
			fn(target, waiter)
		}
	})
	return h
}

// slotStore is an in-memory job store, one process of a fleet, whose
// concurrency slots are the hub's.
type slotStore struct {
	*memstore.Store[int]
	h *slotHub
}

func (s slotStore) AcquireSlot(ctx context.Context, req storekit.SlotRequest) (storekit.SlotAnswer, error) {
	s.h.acquires.Add(1)
	return s.h.tab.AcquireSlot(ctx, req)
}

func (s slotStore) RenewSlots(ctx context.Context, target string, holders []string, ttl time.Duration) ([]string, error) {
	return s.h.tab.RenewSlots(ctx, target, holders, ttl)
}

func (s slotStore) ReleaseSlot(ctx context.Context, target, holder, process string) (int, error) {
	s.h.releases.Add(1)
	return s.h.tab.ReleaseSlot(ctx, target, holder, process)
}

func (s slotStore) LeaveSlotLine(ctx context.Context, target, process string) error {
	return s.h.tab.LeaveSlotLine(ctx, target, process)
}

func (s slotStore) WatchSlots(fn func(target, waiter string)) {
	s.h.mu.Lock()
	s.h.fns = append(s.h.fns, fn)
	s.h.mu.Unlock()
}

var _ storekit.SlotStore = slotStore{}

// gauge tracks how many jobs run at once, and the most there were.
type gauge struct {
	mu       sync.Mutex
	now, max int
	runs     map[int]int // payload -> runs
}

func (g *gauge) handler(d time.Duration) queue.Handler[int] {
	return func(ctx context.Context, j queue.Job[int]) error {
		g.mu.Lock()
		g.now++
		g.max = max(g.max, g.now)
		if g.runs == nil {
			g.runs = map[int]int{}
		}
		g.runs[j.Payload]++
		g.mu.Unlock()
		time.Sleep(d) // the job's work, in the bubble's time
		g.mu.Lock()
		g.now--
		g.mu.Unlock()
		return nil
	}
}

// Two processes with a limit of 1 on a target run one of its jobs at a
// time between them, every job once; jobs of other targets run beside.
func TestSlotsHoldAcrossQueues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newSlotHub(t)
		g := &gauge{}
		var qs []*queue.Queue[int]
		for range 2 {
			q := newStoreQueue(t, storekit.Store[int](slotStore{Store: memstore.New[int](), h: h}), g.handler(10*time.Millisecond),
				queue.WithWorkers(4, 4), queue.WithTargetConcurrency(1))
			require.NoError(t, q.Start(context.Background()))
			qs = append(qs, q)
		}
		const n = 40
		for i := range n {
			require.NoError(t, qs[i%2].Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
		}
		advance(time.Duration(n) * 10 * time.Millisecond)
		g.mu.Lock()
		assert.Equal(t, 1, g.max, "never more than the limit at once across both")
		assert.Len(t, g.runs, n)
		for p, r := range g.runs {
			assert.Equal(t, 1, r, "job %d runs once", p)
		}
		g.mu.Unlock()
		var done uint64
		for _, q := range qs {
			st := q.Stats()
			done += st.Done
			assert.Zero(t, st.Depth, "nothing left parked")
		}
		assert.Equal(t, uint64(n), done)
		assert.Equal(t, 0, heldSlots(t, h, "x"), "every slot released")
	})
}

// grab takes a slot of target for holder, as a process of its own (the
// holder's name up to a colon) that would wait in the line for a second,
// and reports whether it got it.
func grab(t *testing.T, h *slotHub, target, holder string, limit int, ttl time.Duration) bool {
	t.Helper()
	proc, _, _ := strings.Cut(holder, ":")
	ans, err := h.tab.AcquireSlot(context.Background(), storekit.SlotRequest{Target: target, Holder: holder, Process: proc,
		Limit: limit, TTL: ttl, Line: time.Second})
	require.NoError(t, err)
	return ans.Granted
}

// heldSlots counts the slots of target held now, by trying to take them.
func heldSlots(t *testing.T, h *slotHub, target string) int {
	const limit = 100
	free := 0
	for i := range limit {
		if grab(t, h, target, fmt.Sprint("probe-", i), limit, time.Nanosecond) {
			free++
		}
	}
	return limit - free
}

// Without a limit the slots are never asked; with one, a lone process
// running jobs one after another asks once per job and releases once per
// job, or less where a parked job takes the slot over.
func TestSlotsRoundTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newSlotHub(t)
		g := &gauge{}
		q := newStoreQueue(t, storekit.Store[int](slotStore{Store: memstore.New[int](), h: h}), g.handler(time.Millisecond), queue.WithWorkers(2, 2))
		require.NoError(t, q.Start(context.Background()))
		for i := range 10 {
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
		}
		advance(time.Second)
		assert.Equal(t, uint64(10), q.Stats().Done)
		assert.Zero(t, h.acquires.Load()+h.releases.Load(), "no limit: no slot asked for")

		q2 := newStoreQueue(t, storekit.Store[int](slotStore{Store: memstore.New[int](), h: h}), g.handler(time.Millisecond),
			queue.WithWorkers(2, 2), queue.WithTargetConcurrency(1))
		require.NoError(t, q2.Start(context.Background()))
		for i := range 10 {
			require.NoError(t, q2.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
			advance(time.Second) // one at a time: nothing parks
		}
		assert.Equal(t, uint64(10), q2.Stats().Done)
		assert.Equal(t, int64(10), h.acquires.Load(), "one acquire a job")
		assert.Equal(t, int64(10), h.releases.Load(), "one release a job")
	})
}

// A slot a dead process held comes back when its lease expires (30 s on
// a store that does not lease jobs); the job waiting for it then runs.
// Meanwhile the waiter asks every half second, not more.
func TestSlotsCrashedHolderExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newSlotHub(t)
		require.True(t, grab(t, h, "x", "dead-process:1", 1, 30*time.Second))
		g := &gauge{}
		q := newStoreQueue(t, storekit.Store[int](slotStore{Store: memstore.New[int](), h: h}), g.handler(time.Millisecond),
			queue.WithWorkers(2, 2), queue.WithTargetConcurrency(1))
		require.NoError(t, q.Start(context.Background()))
		for i := range 3 {
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
		}
		advance(29 * time.Second)
		st := q.Stats()
		assert.Zero(t, st.Done, "the dead process's slot is held until its lease expires")
		assert.Equal(t, 3, st.Depth, "the jobs wait, parked")
		asks := h.acquires.Load()
		assert.InDelta(t, 29*2, asks, 4, "the waiter asks every 500 ms")
		advance(2 * time.Second)
		assert.Equal(t, uint64(3), q.Stats().Done, "the lease expired: the jobs run")
		assert.Zero(t, q.Stats().Depth)
	})
}

// A slot released in one process reaches the other's waiter at once when
// the store announces it, and within slotRetry (500 ms) when it does not.
func TestSlotsReleaseWakesWaiter(t *testing.T) {
	for _, mute := range []bool{false, true} {
		t.Run(fmt.Sprintf("mute=%v", mute), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newSlotHub(t)
				h.mute.Store(mute)
				var (
					mu    sync.Mutex
					start = map[int]time.Time{}
					end   = map[int]time.Time{}
				)
				handler := func(ctx context.Context, j queue.Job[int]) error {
					mu.Lock()
					start[j.Payload] = time.Now()
					mu.Unlock()
					time.Sleep(time.Second) // the job's work, in the bubble's time
					mu.Lock()
					end[j.Payload] = time.Now()
					mu.Unlock()
					return nil
				}
				a := newStoreQueue(t, storekit.Store[int](slotStore{Store: memstore.New[int](), h: h}), handler, queue.WithWorkers(1, 1), queue.WithTargetConcurrency(1))
				b := newStoreQueue(t, storekit.Store[int](slotStore{Store: memstore.New[int](), h: h}), handler, queue.WithWorkers(1, 1), queue.WithTargetConcurrency(1))
				require.NoError(t, a.Start(context.Background()))
				require.NoError(t, b.Start(context.Background()))
				require.NoError(t, a.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: 1}))
				advance(100 * time.Millisecond)
				require.NoError(t, b.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: 2}))
				advance(3 * time.Second)
				mu.Lock()
				defer mu.Unlock()
				require.Len(t, end, 2)
				gap := start[2].Sub(end[1])
				assert.GreaterOrEqual(t, gap, time.Duration(0), "b's job starts after a's ends")
				if mute {
					assert.LessOrEqual(t, gap, 500*time.Millisecond, "within slotRetry")
				} else {
					assert.Zero(t, gap, "at once")
				}
			})
		})
	}
}

// Jobs parked for a slot the store holds elsewhere count in the depth,
// and Cancel, Purge and shutdown reach them; none is lost.
func TestSlotsParkedJobsReachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newSlotHub(t)
		require.True(t, grab(t, h, "x", "elsewhere:1", 1, time.Hour))
		g := &gauge{}
		q := newStoreQueue(t, storekit.Store[int](slotStore{Store: memstore.New[int](), h: h}), g.handler(time.Millisecond),
			queue.WithWorkers(3, 3), queue.WithTargetConcurrency(1))
		require.NoError(t, q.Start(context.Background()))
		for i := range 4 {
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Key: fmt.Sprint("k", i), Payload: i}))
		}
		advance(time.Second)
		st, ok := q.Target("x")
		require.True(t, ok)
		assert.Equal(t, 4, st.Parked)
		assert.Equal(t, 4, q.Stats().Depth)
		n, err := q.Cancel(context.Background(), "k2")
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		_, err = h.tab.ReleaseSlot(context.Background(), "x", "elsewhere:1", "elsewhere")
		require.NoError(t, err)
		advance(time.Second)
		assert.Equal(t, uint64(3), q.Stats().Done)
		assert.Equal(t, uint64(1), q.Stats().Cancelled)
		assert.Equal(t, 0, heldSlots(t, h, "x"))
	})
}

// A shutdown while jobs wait for a slot held elsewhere puts them back in
// the store, without using an attempt; none is lost, and the waiter
// leaves.
func TestSlotsShutdownPutsParkedBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newSlotHub(t)
		require.True(t, grab(t, h, "x", "elsewhere:1", 1, time.Hour))
		g := &gauge{}
		s := slotStore{Store: memstore.New[int](), h: h}
		q := newStoreQueue(t, storekit.Store[int](s), g.handler(time.Millisecond), queue.WithWorkers(2, 2), queue.WithTargetConcurrency(1))
		require.NoError(t, q.Start(context.Background()))
		for i := range 3 {
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
		}
		advance(time.Second)
		require.Equal(t, 3, q.Stats().Depth)
		require.NoError(t, q.Shutdown(context.Background()))
		st := q.Stats()
		// At least 3: a worker still claiming as the shutdown began may
		// take one back out and put it back once more.
		assert.GreaterOrEqual(t, st.Deferred, uint64(3), "put back")
		assert.Zero(t, st.Done+st.Cancelled+st.Dead)
		stored, err := s.Stats(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 3, stored.Ready+stored.Scheduled, "in the store again")
		assert.Equal(t, 1, heldSlots(t, h, "x"), "only the other holder's slot")
	})
}

// Three processes with a limit of 2 on a target, each with a backlog of
// its own: the slots go round them, in the order they began to wait,
// instead of staying with the first two holders until their backlogs are
// run (before, the third ran its first job after the others' 60). Each
// process runs about a third of the first half of the runs, and no
// process waits, while it has jobs, for more than a few runs of the
// others (a place in the line: at most the other two processes, each
// getting a slot as it frees, and the runs already going); the limit
// holds.
func TestSlotsGoRoundTheFleet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newSlotHub(t)
		var (
			mu            sync.Mutex
			order         []int
			running, peak int
		)
		const procs, each = 3, 30
		var qs []*queue.Queue[int]
		for p := range procs {
			handler := func(ctx context.Context, j queue.Job[int]) error {
				mu.Lock()
				order = append(order, p)
				running++
				peak = max(peak, running)
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // the job's work, in the bubble's time
				mu.Lock()
				running--
				mu.Unlock()
				return nil
			}
			q := newStoreQueue(t, storekit.Store[int](slotStore{Store: memstore.New[int](), h: h}), handler,
				queue.WithWorkers(4, 4), queue.WithTargetConcurrency(2))
			for i := range each {
				require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
			}
			qs = append(qs, q)
		}
		for _, q := range qs {
			require.NoError(t, q.Start(context.Background()))
		}
		advance(time.Minute)
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, order, procs*each, "every job ran")
		assert.LessOrEqual(t, peak, 2, "the limit holds across the processes")
		early := make([]int, procs)
		for _, p := range order[:len(order)/2] {
			early[p]++
		}
		streak, longest := make([]int, procs), make([]int, procs)
		left := []int{each, each, each}
		for _, p := range order {
			left[p]--
			for o := range procs {
				if o == p {
					streak[o] = 0
				} else if left[o] > 0 {
					streak[o]++
					longest[o] = max(longest[o], streak[o])
				}
			}
		}
		t.Logf("runs of each process in the first half: %v; longest wait, in runs of the others: %v", early, longest)
		for p := range procs {
			assert.GreaterOrEqual(t, early[p], each/3, "process %d's runs in the first half of all runs", p)
			assert.LessOrEqual(t, longest[p], 6, "process %d waited for that many runs of the others", p)
		}
		for _, q := range qs {
			assert.Zero(t, q.Stats().Depth, "nothing left parked")
		}
		assert.Equal(t, 0, heldSlots(t, h, "x"), "every slot released")
	})
}
