package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/storekit"
)

// RunAdmin checks the admin API (package admin) through Queue.Admin on a
// queue over the stores newStore makes (new, empty, isolated, not
// initialised: NewWithStore initialises them): listing per state with
// filters, orders and paging while jobs move, Get and GetKey, Counts,
// Retry, Delete, Cancel of a queued and of a running job, Pause and
// Resume, actions racing the workers, and the target actions: through
// the queue, and, on a store with an admin backend of its own that
// implements admin.Targets (pgstore, redisstore: what queuectl uses),
// through that backend, seen by the running queue; and the concurrency
// limit (Queue.SetConcurrency) and claim gate (queue.WithClaimGate), whose
// waiting workers hold no job on any store. It uses the system clock but
// makes no timing assumption: it waits on the queue's events, never on
// time passing.
func RunAdmin(t *testing.T, newStore func(t *testing.T) storekit.Store[Payload]) {
	t.Run("ListFilters", func(t *testing.T) { adminListFilters(t, newStore(t)) })
	t.Run("Paging", func(t *testing.T) { adminPaging(t, newStore(t)) })
	t.Run("BoundedFilter", func(t *testing.T) { adminBoundedFilter(t, newStore(t)) })
	t.Run("Invalid", func(t *testing.T) { adminInvalid(t, newStore(t)) })
	t.Run("RetryDead", func(t *testing.T) { adminRetryDead(t, newStore(t)) })
	t.Run("ErrorText", func(t *testing.T) { adminErrorText(t, newStore(t)) })
	t.Run("OddKeys", func(t *testing.T) { adminOddKeys(t, newStore(t)) })
	t.Run("DeleteCancelQueued", func(t *testing.T) { adminDeleteCancel(t, newStore(t)) })
	t.Run("CancelRunning", func(t *testing.T) { adminCancelRunning(t, newStore(t)) })
	t.Run("PauseResume", func(t *testing.T) { adminPause(t, newStore(t)) })
	t.Run("StopWhilePaused", func(t *testing.T) { adminStopPaused(t, newStore(t)) })
	t.Run("CancelRacesComplete", func(t *testing.T) { adminCancelRace(t, newStore(t)) })
	t.Run("RetryRacesDelete", func(t *testing.T) { adminRetryRace(t, newStore(t)) })
	t.Run("Targets", func(t *testing.T) { adminTargets(t, newStore(t)) })
	t.Run("ConcurrencyLimit", func(t *testing.T) { concurrencyLimit(t, newStore(t)) })
	t.Run("ConcurrencyZeroStop", func(t *testing.T) { concurrencyZeroStop(t, newStore(t)) })
	t.Run("ClaimGate", func(t *testing.T) { claimGate(t, newStore(t)) })
}

// events counts a queue's events by kind and wakes waiters.
type events struct {
	mu     sync.Mutex
	counts map[queue.EventKind]int
	wake   chan struct{}
}

func newEvents() *events {
	return &events{counts: map[queue.EventKind]int{}, wake: make(chan struct{})}
}

func (e *events) observe(ev queue.Event) {
	e.mu.Lock()
	e.counts[ev.Kind]++
	close(e.wake)
	e.wake = make(chan struct{})
	e.mu.Unlock()
}

// await waits until cond holds on the counts, or fails the test after a
// generous minute (a hang, not a timing assumption).
func (e *events) await(t *testing.T, what string, cond func(c map[queue.EventKind]int) bool) {
	t.Helper()
	limit := time.NewTimer(time.Minute)
	defer limit.Stop()
	for {
		e.mu.Lock()
		ok, wake := cond(e.counts), e.wake
		e.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-wake:
		case <-limit.C:
			e.mu.Lock()
			counts := fmt.Sprint(e.counts)
			e.mu.Unlock()
			t.Fatalf("gave up waiting for %s; events so far: %s", what, counts)
		}
	}
}

// adminQueue builds a queue over store with handler, levels high, normal
// (the default) and low, strict, and two workers; it is not started.
func adminQueue(t *testing.T, store storekit.Store[Payload], h queue.Handler[Payload], opts ...queue.Option) (*queue.Queue[Payload], *events) {
	t.Helper()
	ev := newEvents()
	opts = append([]queue.Option{
		queue.WithName(fmt.Sprintf("admin_%d", time.Now().UnixNano()%1e9)),
		queue.WithPriorities("normal", queue.Priority{Name: "high", Weight: 0}, queue.Priority{Name: "normal", Weight: 5}, queue.Priority{Name: "low", Weight: 10}),
		queue.WithWorkers(2, 2),
		queue.WithObserver(ev.observe),
	}, opts...)
	q, err := queue.NewWithStore(store, h, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.Shutdown(ctx)
	})
	return q, ev
}

func start(t *testing.T, q *queue.Queue[Payload]) {
	t.Helper()
	require.NoError(t, q.Start(context.Background()))
}

func list(t *testing.T, a *admin.Admin, q admin.Query) []admin.JobInfo {
	t.Helper()
	p, err := a.List(context.Background(), q)
	require.NoError(t, err)
	return p.Jobs
}

func ns(jobs []admin.JobInfo) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.Key
	}
	return out
}

func idle(context.Context, queue.Job[Payload]) error { return nil }

func adminListFilters(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	q, _ := adminQueue(t, store, idle)
	a := q.Admin()
	// Not started: nothing is claimed.
	for i, spec := range []struct{ key, prio, target string }{
		{"a/1", "high", "x"}, {"a/2", "normal", "y"}, {"b/1", "low", "x"}, {"b/2", "high", ""}, {"a/3", "", "x"},
	} {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: spec.key, Priority: spec.prio, Target: spec.target, Payload: Payload{N: i, Note: "<" + spec.key + ">"}}))
	}
	for i := range 3 {
		require.NoError(t, q.EnqueueIn(ctx, queue.Job[Payload]{Key: fmt.Sprintf("s/%d", i), Payload: Payload{N: 10 + i}}, time.Duration(3-i)*time.Hour))
	}
	all := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true})
	require.Len(t, all, 5)
	for i := 1; i < len(all); i++ {
		require.Less(t, all[i-1].ID, all[i].ID, "oldest first: enqueue order")
	}
	newest := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready}})
	slices.Reverse(newest)
	require.Equal(t, ns(all), ns(newest), "newest first is the reverse")
	require.ElementsMatch(t, []string{"a/1", "b/2"}, ns(list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "high"}})))
	require.ElementsMatch(t, []string{"a/2", "a/3"}, ns(list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "normal"}})))
	require.ElementsMatch(t, []string{"a/1", "b/1", "a/3"}, ns(list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, Target: "x"}})))
	require.ElementsMatch(t, []string{"a/1", "a/2", "a/3"}, ns(list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, KeyPrefix: "a/"}})))
	require.ElementsMatch(t, []string{"a/1", "a/3"}, ns(list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, KeyPrefix: "a/", Target: "x"}})))
	require.Empty(t, list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "nope"}}))

	sched := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Scheduled}, Oldest: true})
	require.Equal(t, []string{"s/2", "s/1", "s/0"}, ns(sched), "scheduled: earliest RunAt first")
	require.Equal(t, []string{"s/0", "s/1", "s/2"}, ns(list(t, a, admin.Query{Filter: admin.Filter{State: admin.Scheduled}})))
	for _, j := range sched {
		require.Equal(t, admin.Scheduled, j.State)
		require.False(t, j.RunAt.IsZero())
		require.Nil(t, j.Payload, "no payload unless asked")
	}
	withPayload := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, KeyPrefix: "b/1"}, Payload: true})
	require.Len(t, withPayload, 1)
	var p Payload
	require.NoError(t, json.Unmarshal(withPayload[0].Payload, &p))
	require.Equal(t, Payload{N: 2, Note: "<b/1>"}, p)
	require.Equal(t, "low", withPayload[0].Priority)
	require.Equal(t, "x", withPayload[0].Target)

	got, err := a.Get(ctx, all[0].ID, false)
	require.NoError(t, err)
	require.Equal(t, "a/1", got.Key)
	require.Equal(t, admin.Ready, got.State)
	require.Nil(t, got.Payload)
	got, err = a.Get(ctx, all[0].ID, true)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(got.Payload, &p))
	require.Equal(t, 0, p.N)
	got, err = a.GetKey(ctx, "s/1", true)
	require.NoError(t, err)
	require.Equal(t, admin.Scheduled, got.State)
	require.NoError(t, json.Unmarshal(got.Payload, &p))
	require.Equal(t, 11, p.N)
	_, err = a.GetKey(ctx, "missing", false)
	require.ErrorIs(t, err, admin.ErrNotFound)
	_, err = a.Get(ctx, 1<<40, false)
	require.ErrorIs(t, err, admin.ErrNotFound)

	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, c[admin.Ready])
	require.Equal(t, 3, c[admin.Scheduled])
	require.Equal(t, 0, c[admin.Running])
	require.Equal(t, 0, c[admin.Dead])
}

// A filtered listing examines at most admin.MaxExamined jobs per call: a
// rare target, or a key prefix that matches nothing, over a state holding
// more jobs than that comes back as partial pages whose Next resumes where
// the walk stopped, until the match is found and the state ends.
func adminBoundedFilter(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	const n = admin.MaxExamined + 50
	q, _ := adminQueue(t, store, idle, queue.WithCapacity(2*n, 2*n))
	a := q.Admin()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		errs = make(chan error, 8)
	)
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1); i <= n; i = next.Add(1) {
				if err := q.Enqueue(ctx, queue.Job[Payload]{Target: "common", Payload: Payload{N: int(i)}}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	// Enqueued after every other one: the last in oldest-first order.
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: "rare/1", Target: "rare", Payload: Payload{N: -1}}))

	walk := func(f admin.Filter, oldest bool) (found []string, pages int, partial bool) {
		t.Helper()
		after := ""
		for {
			page, err := a.List(ctx, admin.Query{Filter: f, Oldest: oldest, Limit: 10, After: after})
			require.NoError(t, err)
			pages++
			require.LessOrEqual(t, page.Examined, admin.MaxExamined, "page %d examined more than the bound", pages)
			if page.Partial {
				partial = true
				require.NotEmpty(t, page.Next, "a partial page has a Next")
				require.Less(t, len(page.Jobs), 10)
			}
			found = append(found, ns(page.Jobs)...)
			if page.Next == "" {
				return found, pages, partial
			}
			require.Less(t, pages, 10, "paging does not end")
			after = page.Next
		}
	}
	first, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready, Target: "rare"}, Oldest: true, Limit: 10})
	require.NoError(t, err)
	require.True(t, first.Partial, "the first page stops at the bound")
	require.Empty(t, first.Jobs, "the match is after the bound")
	require.NotEmpty(t, first.Next)
	require.Equal(t, admin.MaxExamined, first.Examined)

	found, pages, partial := walk(admin.Filter{State: admin.Ready, Target: "rare"}, true)
	require.Equal(t, []string{"rare/1"}, found)
	require.True(t, partial)
	require.GreaterOrEqual(t, pages, 2)
	found, _, _ = walk(admin.Filter{State: admin.Ready, Target: "rare"}, false)
	require.Equal(t, []string{"rare/1"}, found, "newest first")
	found, _, partial = walk(admin.Filter{State: admin.Ready, KeyPrefix: "nothing/"}, true)
	require.Empty(t, found)
	require.True(t, partial)
	found, _, _ = walk(admin.Filter{State: admin.Ready, KeyPrefix: "rare/", Priority: "normal"}, true)
	require.Equal(t, []string{"rare/1"}, found)
	// Unfiltered pages are never partial: every job examined matches.
	page, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true, Limit: 10})
	require.NoError(t, err)
	require.False(t, page.Partial)
	require.Len(t, page.Jobs, 10)
	// CancelMatch walks the partial pages through.
	cancelled, err := a.CancelMatch(ctx, admin.Filter{State: admin.Ready, Target: "rare"})
	require.NoError(t, err)
	require.Equal(t, 1, cancelled)
}

// Paging never skips nor repeats a job that stays ready while jobs are
// added and removed between pages, in both orders.
func adminPaging(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	q, _ := adminQueue(t, store, idle)
	a := q.Admin()
	for i := range 25 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: fmt.Sprintf("p/%02d", i), Payload: Payload{N: i}}))
	}
	for _, oldest := range []bool{true, false} {
		all := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: oldest})
		require.Len(t, all, 25)
		stay := map[string]bool{}
		for _, j := range all {
			stay[j.Key] = true
		}
		seen := map[string]int{}
		after := ""
		extra := 0
		for pages := 0; ; pages++ {
			require.Less(t, pages, 100, "paging does not end")
			page, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: oldest, Limit: 4, After: after})
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Jobs), 4)
			for _, j := range page.Jobs {
				seen[j.Key]++
			}
			// Jobs move between pages: one new job arrives, and one not
			// yet seen leaves.
			extra++
			require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: fmt.Sprintf("new/%v/%02d", oldest, extra)}))
			for _, j := range all {
				if seen[j.Key] == 0 && stay[j.Key] {
					require.NoError(t, a.Delete(ctx, j.ID))
					delete(stay, j.Key)
					break
				}
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		for k := range stay {
			require.Equal(t, 1, seen[k], "job %s stayed ready: seen once", k)
		}
		for k, n := range seen {
			require.Equal(t, 1, n, "job %s seen once", k)
		}
		_, err := q.Purge(ctx)
		require.NoError(t, err)
		for i := range 25 {
			require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: fmt.Sprintf("p/%02d", i), Payload: Payload{N: i}}))
		}
	}
}

func adminInvalid(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	q, _ := adminQueue(t, store, idle)
	a := q.Admin()
	_, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, Limit: 1001})
	require.ErrorIs(t, err, admin.ErrInvalid)
	require.ErrorContains(t, err, "1001")
	_, err = a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, Limit: -1})
	require.ErrorContains(t, err, "-1")
	_, err = a.List(ctx, admin.Query{Filter: admin.Filter{State: "bogus"}})
	require.ErrorIs(t, err, admin.ErrInvalid)
	require.ErrorContains(t, err, "bogus")
	_, err = a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, After: "not-a-cursor!"})
	require.ErrorIs(t, err, admin.ErrInvalid)
	require.ErrorContains(t, err, "not-a-cursor!")
	for i := range 3 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Payload: Payload{N: i}}))
	}
	page, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, Limit: 1})
	require.NoError(t, err)
	require.NotEmpty(t, page.Next)
	_, err = a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Scheduled}, Limit: 1, After: page.Next})
	require.ErrorIs(t, err, admin.ErrInvalid, "a cursor of another state")
	_, err = a.RetryMatch(ctx, admin.Filter{State: admin.Ready})
	require.ErrorIs(t, err, admin.ErrInvalid)
	require.ErrorIs(t, a.Retry(ctx, 1<<40), admin.ErrNotFound)
	require.ErrorIs(t, a.Cancel(ctx, 1<<40), admin.ErrNotFound)
	require.ErrorIs(t, a.Delete(ctx, 1<<40), admin.ErrNotFound)
	ready := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready}})
	require.ErrorIs(t, a.Retry(ctx, ready[0].ID), admin.ErrState, "a ready job is not retried")
}

// A dead job is listed with its error, and Retry runs it again.
func adminRetryDead(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	var runs atomic.Int32
	ran := make(chan int, 10)
	q, ev := adminQueue(t, store, func(_ context.Context, j queue.Job[Payload]) error {
		ran <- j.Payload.N
		if runs.Add(1) <= 2 {
			return queue.Permanent(errors.New("boom <b>"))
		}
		return nil
	})
	a := q.Admin()
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: "dead/1", Payload: Payload{N: 1}}))
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: "dead/2", Payload: Payload{N: 2}}))
	start(t, q)
	ev.await(t, "two dead jobs", func(c map[queue.EventKind]int) bool { return c[queue.EventDead] == 2 })
	dead := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Dead}, Oldest: true, Payload: true})
	require.Len(t, dead, 2)
	for _, d := range dead {
		require.Equal(t, admin.Dead, d.State)
		require.Contains(t, d.LastError, "boom <b>")
		require.NotEmpty(t, d.Payload)
	}
	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, c[admin.Dead])
	require.NoError(t, a.Retry(ctx, dead[0].ID))
	ev.await(t, "the retried job done", func(c map[queue.EventKind]int) bool { return c[queue.EventDone] == 1 })
	got, err := a.GetKey(ctx, dead[0].Key, false)
	if err == nil { // a durable store keeps done jobs; the in-memory one does not
		require.Equal(t, admin.Done, got.State)
	} else {
		require.ErrorIs(t, err, admin.ErrNotFound)
	}
	require.Len(t, list(t, a, admin.Query{Filter: admin.Filter{State: admin.Dead}}), 1)
	// Delete the other dead job.
	require.NoError(t, a.Delete(ctx, dead[1].ID))
	require.Empty(t, list(t, a, admin.Query{Filter: admin.Filter{State: admin.Dead}}))
	require.ErrorIs(t, a.Retry(ctx, dead[1].ID), admin.ErrNotFound)
}

// A handler's error text with a NUL byte and a byte that is not UTF-8
// ends its job as any other error does: a permanent error dead after one
// run, a retried one after its attempts, each counted once, never
// rescued, and listed with the text, those bytes escaped.
func adminErrorText(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	var runs [2]atomic.Int32
	q, ev := adminQueue(t, store, func(_ context.Context, j queue.Job[Payload]) error {
		runs[j.Payload.N].Add(1)
		if j.Payload.N == 0 {
			return queue.Permanent(errors.New(oddError))
		}
		return errors.New(oddError)
	}, queue.WithRetry(2, time.Millisecond, time.Millisecond))
	a := q.Admin()
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: "permanent", Payload: Payload{N: 0}}))
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: "retried", Payload: Payload{N: 1}}))
	start(t, q)
	ev.await(t, "two dead jobs", func(c map[queue.EventKind]int) bool { return c[queue.EventDead] == 2 })
	require.Equal(t, int32(1), runs[0].Load(), "runs of the job with a permanent error")
	require.Equal(t, int32(2), runs[1].Load(), "runs of the job with a retried error")
	ev.mu.Lock()
	counts := fmt.Sprint(ev.counts)
	retried, rescued := ev.counts[queue.EventRetried], ev.counts[queue.EventRescued]
	ev.mu.Unlock()
	require.Equal(t, 1, retried, counts)
	require.Zero(t, rescued, counts)
	dead := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Dead}})
	require.Len(t, dead, 2)
	for _, d := range dead {
		require.Contains(t, d.LastError, `upstream said: a\x00b\xff`, "job %s", d.Key)
	}
	st := q.Stats()
	require.Equal(t, uint64(2), st.Dead, "dead counted")
	require.Zero(t, st.Rescued, "rescued counted")
}

// Keys of any bytes and length are found by GetKey and by a key prefix,
// and listed as they were given.
func adminOddKeys(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	q, _ := adminQueue(t, store, idle)
	a := q.Admin()
	keys := oddKeys()
	for i, k := range keys {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: k, Group: k, Payload: Payload{N: i}}))
	}
	for _, k := range keys {
		j, err := a.GetKey(ctx, k, false)
		require.NoError(t, err, "GetKey(%.40q)", k)
		require.Equal(t, k, j.Key)
		require.Equal(t, k, j.Group)
	}
	for _, c := range []struct {
		prefix string
		want   int
	}{{keys[0][:100], 2}, {keys[0], 1}, {"a\x00", 1}, {"a", 2}, {"\xfe", 1}, {"#sha256:", 0}} {
		got := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, KeyPrefix: c.prefix}})
		require.Len(t, got, c.want, "jobs with key prefix %.40q", c.prefix)
		for _, j := range got {
			require.True(t, strings.HasPrefix(j.Key, c.prefix), "key %.40q listed for prefix %.40q", j.Key, c.prefix)
		}
	}
}

// Delete and Cancel end a queued or scheduled job, counted as cancelled.
func adminDeleteCancel(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	q, ev := adminQueue(t, store, idle)
	a := q.Admin()
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: "k/ready"}))
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{})) // no key
	require.NoError(t, q.EnqueueIn(ctx, queue.Job[Payload]{Key: "k/sched"}, time.Hour))
	require.NoError(t, q.EnqueueIn(ctx, queue.Job[Payload]{Group: "g"}, time.Hour))
	ready := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true})
	sched := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Scheduled}, Oldest: true})
	require.Len(t, ready, 2)
	require.Len(t, sched, 2)
	require.NoError(t, a.Cancel(ctx, ready[0].ID))
	require.NoError(t, a.Delete(ctx, ready[1].ID))
	require.NoError(t, a.Cancel(ctx, sched[0].ID))
	require.NoError(t, a.Delete(ctx, sched[1].ID))
	for _, j := range append(ready, sched...) {
		got, err := a.Get(ctx, j.ID, false)
		if err == nil {
			require.Contains(t, []admin.State{admin.Cancelled}, got.State, "job %d", j.ID)
		} else {
			require.ErrorIs(t, err, admin.ErrNotFound)
		}
	}
	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Zero(t, c[admin.Ready])
	require.Zero(t, c[admin.Scheduled])
	require.EqualValues(t, 4, q.Stats().Cancelled)
	ev.await(t, "four cancelled events", func(c map[queue.EventKind]int) bool { return c[queue.EventCancelled] == 4 })
	// The keys and the group are free again.
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: "k/ready"}))
	require.NoError(t, q.EnqueueIn(ctx, queue.Job[Payload]{Key: "k/sched"}, time.Hour))
	require.NoError(t, q.EnqueueIn(ctx, queue.Job[Payload]{Group: "g"}, time.Hour))
}

// Cancel of a running job cancels its context; it ends cancelled.
func adminCancelRunning(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	started := make(chan int64, 1)
	q, ev := adminQueue(t, store, func(ctx context.Context, j queue.Job[Payload]) error {
		started <- j.ID
		<-ctx.Done()
		return ctx.Err()
	})
	a := q.Admin()
	require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: "run/1"}))
	start(t, q)
	id := <-started
	got, err := a.Get(ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, admin.Running, got.State)
	running := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Running}})
	require.Len(t, running, 1)
	require.Equal(t, "run/1", running[0].Key)
	c, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, c[admin.Running])
	require.ErrorIs(t, a.Delete(ctx, id), admin.ErrState, "a running job is cancelled, not deleted")
	require.NoError(t, a.Cancel(ctx, id))
	ev.await(t, "the running job cancelled", func(c map[queue.EventKind]int) bool { return c[queue.EventCancelled] == 1 })
	require.EqualValues(t, 1, q.Stats().Cancelled)
	require.EqualValues(t, 0, q.Stats().Retried)
	err = a.Cancel(ctx, id)
	require.True(t, errors.Is(err, admin.ErrState) || errors.Is(err, admin.ErrNotFound), "cancel of an ended job: %v", err)
	require.Empty(t, list(t, a, admin.Query{Filter: admin.Filter{State: admin.Running}}))
}

// Pause stops claims while Enqueue continues; Resume runs the jobs.
func adminPause(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	var ran atomic.Int32
	q, ev := adminQueue(t, store, func(context.Context, queue.Job[Payload]) error { ran.Add(1); return nil })
	a := q.Admin()
	require.NoError(t, a.Pause(ctx))
	p, err := a.Paused(ctx)
	require.NoError(t, err)
	require.True(t, p)
	start(t, q)
	require.Equal(t, "paused", q.Stats().State)
	for i := range 3 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Payload: Payload{N: i}}), "enqueue continues while paused")
	}
	require.Zero(t, ran.Load(), "no job runs while paused")
	require.NoError(t, a.Resume(ctx))
	p, err = a.Paused(ctx)
	require.NoError(t, err)
	require.False(t, p)
	ev.await(t, "three jobs done", func(c map[queue.EventKind]int) bool { return c[queue.EventDone] == 3 })
	require.Equal(t, "running", q.Stats().State)
}

// Cancelling jobs as workers complete them: every job ends exactly once,
// done or cancelled.
func adminCancelRace(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	const n = 200
	q, ev := adminQueue(t, store, idle, queue.WithWorkers(4, 4))
	a := q.Admin()
	for i := range n {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: fmt.Sprintf("race/%d", i), Payload: Payload{N: i}}))
	}
	ids := make([]int64, 0, n)
	after := ""
	for {
		page, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true, After: after})
		require.NoError(t, err)
		for _, j := range page.Jobs {
			ids = append(ids, j.ID)
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	require.Len(t, ids, n)
	start(t, q)
	var wg sync.WaitGroup
	for half := range 2 {
		wg.Go(func() {
			for i := half; i < len(ids); i += 2 {
				err := a.Cancel(ctx, ids[i])
				if err != nil && !errors.Is(err, admin.ErrState) && !errors.Is(err, admin.ErrNotFound) {
					t.Errorf("cancel %d: %v", ids[i], err)
				}
			}
		})
	}
	wg.Wait()
	ev.await(t, "every job ended", func(c map[queue.EventKind]int) bool {
		return c[queue.EventDone]+c[queue.EventCancelled] == n
	})
	st := q.Stats()
	require.EqualValues(t, n, st.Done+st.Cancelled)
	require.Zero(t, st.Dead)
}

// Retry and Delete racing on one dead job: at least one wins, and the
// queue stays consistent.
func adminRetryRace(t *testing.T, store storekit.Store[Payload]) {
	ctx := context.Background()
	var fail atomic.Bool
	fail.Store(true)
	q, ev := adminQueue(t, store, func(_ context.Context, j queue.Job[Payload]) error {
		if fail.Load() {
			return queue.Permanent(errors.New("no"))
		}
		return nil
	})
	a := q.Admin()
	const n = 20
	for i := range n {
		require.NoError(t, q.Enqueue(ctx, queue.Job[Payload]{Key: fmt.Sprintf("rr/%d", i)}))
	}
	start(t, q)
	ev.await(t, "all dead", func(c map[queue.EventKind]int) bool { return c[queue.EventDead] == n })
	fail.Store(false)
	dead := list(t, a, admin.Query{Filter: admin.Filter{State: admin.Dead}})
	require.Len(t, dead, n)
	retried := atomic.Int32{}
	var wg sync.WaitGroup
	for _, d := range dead {
		var errRetry, errDelete error
		wg.Go(func() { errRetry = a.Retry(ctx, d.ID) })
		wg.Go(func() { errDelete = a.Delete(ctx, d.ID) })
		wg.Wait()
		if errRetry == nil {
			retried.Add(1)
		}
		require.True(t, errRetry == nil || errDelete == nil, "retry %v, delete %v", errRetry, errDelete)
		for _, err := range []error{errRetry, errDelete} {
			if err != nil && !errors.Is(err, admin.ErrNotFound) && !errors.Is(err, admin.ErrState) {
				t.Fatalf("unexpected error: %v", err)
			}
		}
	}
	require.Empty(t, list(t, a, admin.Query{Filter: admin.Filter{State: admin.Dead}}))
	ev.await(t, "the retried jobs ended", func(c map[queue.EventKind]int) bool {
		return c[queue.EventDone]+c[queue.EventCancelled] >= int(retried.Load())
	})
}
