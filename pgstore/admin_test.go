package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// adminOf returns s's admin backend, wrapped as queuectl wraps it.
func adminOf[T any](s *pgstore.Store[T]) *admin.Admin { return admin.New(s.Admin()) }

// initOnly initialises s for queue name without starting it: the admin
// API must work so (queuectl runs no queue).
func initOnly[T any](t *testing.T, s *pgstore.Store[T], name string, clk queue.Clock) {
	t.Helper()
	require.NoError(t, s.Init(storetest.Config(name, 100, clk, func(queue.Event) {})))
}

// ids returns the IDs of jobs.
func ids(jobs []admin.JobInfo) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// pageAll pages through q, limit jobs at a time, and returns every ID.
func pageAll(t *testing.T, a *admin.Admin, q admin.Query) []int64 {
	t.Helper()
	var all []int64
	for range 1000 {
		p, err := a.List(bg, q)
		require.NoError(t, err)
		all = append(all, ids(p.Jobs)...)
		if p.Next == "" {
			return all
		}
		q.After = p.Next
	}
	t.Fatal("paging did not end")
	return nil
}

// The states and orders List pages through, with filters, payloads only
// when asked, Get and GetKey, and Counts; on a store that was Init-ed
// and never started.
func TestAdminList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	initOnly(t, s, "adm", clk)
	a := adminOf(s)
	var ready []int64
	for i := range 7 {
		clk.Advance(time.Second)
		prio := "normal"
		if i%2 == 0 {
			prio = "high"
		}
		added, err := s.Add(bg, queue.Job[P]{Key: fmt.Sprintf("r%%_%d", i), Target: "t" + fmt.Sprint(i%3), Priority: prio, Payload: P{N: i}})
		require.NoError(t, err)
		ready = append(ready, added.ID)
	}
	// A key that a careless LIKE would match: "r" + any char + "_".
	added, err := s.Add(bg, queue.Job[P]{Key: "rx_9"})
	require.NoError(t, err)
	ready = append(ready, added.ID)
	var sched []int64
	for i := range 3 {
		added, err := s.Add(bg, queue.Job[P]{RunAt: clk.Now().Add(time.Duration(3-i) * time.Hour)})
		require.NoError(t, err)
		sched = append([]int64{added.ID}, sched...) // earliest first
	}

	// Oldest first in pages of 3, and newest first.
	got := pageAll(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true, Limit: 3})
	require.Equal(t, ready, got)
	got = pageAll(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready}, Limit: 2})
	rev := slices.Clone(ready)
	slices.Reverse(rev)
	require.Equal(t, rev, got)
	require.Equal(t, sched, pageAll(t, a, admin.Query{Filter: admin.Filter{State: admin.Scheduled}, Oldest: true, Limit: 1}))

	// Filters.
	got = pageAll(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, KeyPrefix: "r%_"}, Oldest: true})
	require.Equal(t, ready[:7], got, "%% and _ in a prefix are literal")
	got = pageAll(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "high"}, Oldest: true})
	require.Equal(t, []int64{ready[0], ready[2], ready[4], ready[6]}, got)
	got = pageAll(t, a, admin.Query{Filter: admin.Filter{State: admin.Ready, Target: "t1", Priority: "normal"}, Oldest: true})
	require.Equal(t, []int64{ready[1]}, got)
	p, err := a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "urgent"}})
	require.NoError(t, err)
	require.Empty(t, p.Jobs, "no job has a priority the queue lacks")

	// Payloads only when asked, as the codec wrote them.
	p, err = a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true, Limit: 1})
	require.NoError(t, err)
	require.Nil(t, p.Jobs[0].Payload)
	p, err = a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true, Limit: 1, Payload: true})
	require.NoError(t, err)
	require.JSONEq(t, `{"n":0}`, string(p.Jobs[0].Payload))
	j := p.Jobs[0]
	require.Equal(t, admin.Ready, j.State)
	require.Equal(t, "r%_0", j.Key)
	require.Equal(t, "high", j.Priority)
	require.Equal(t, "t0", j.Target)
	require.False(t, j.Created.IsZero())

	// Get, GetKey.
	g, err := a.Get(bg, ready[1], false)
	require.NoError(t, err)
	require.Equal(t, "r%_1", g.Key)
	require.Nil(t, g.Payload)
	g, err = a.GetKey(bg, "r%_1", true)
	require.NoError(t, err)
	require.Equal(t, ready[1], g.ID)
	require.JSONEq(t, `{"n":1}`, string(g.Payload))
	_, err = a.Get(bg, 1<<40, false)
	require.ErrorIs(t, err, admin.ErrNotFound)
	_, err = a.GetKey(bg, "nope", false)
	require.ErrorIs(t, err, admin.ErrNotFound)

	counts, err := a.Counts(bg)
	require.NoError(t, err)
	require.Equal(t, len(ready), counts[admin.Ready])
	require.Equal(t, len(sched), counts[admin.Scheduled])
	require.Equal(t, 0, counts[admin.Running])

	// Waiting is a state of the in-memory engine only.
	p, err = a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Waiting}})
	require.NoError(t, err)
	require.Empty(t, p.Jobs)
}

// Paging never skips or repeats a job that stays in its state while
// other jobs enter and leave it, including jobs with equal times.
func TestAdminPagingWhileJobsMove(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) // never advanced: equal created_at
	bind(t, s, "move", clk)
	a := adminOf(s)
	var stay []int64
	for i := range 40 {
		added, err := s.Add(bg, queue.Job[P]{Key: fmt.Sprint("k", i)})
		require.NoError(t, err)
		stay = append(stay, added.ID)
	}
	q := admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true, Limit: 7}
	var seen []int64
	for {
		p, err := a.List(bg, q)
		require.NoError(t, err)
		seen = append(seen, ids(p.Jobs)...)
		// Jobs move: one leaves (deleted), new ones arrive.
		if len(stay) > 0 && len(seen) < 30 {
			last := stay[len(stay)-1]
			if !slices.Contains(seen, last) {
				require.NoError(t, a.Delete(bg, last))
				stay = stay[:len(stay)-1]
			}
		}
		_, err = s.Add(bg, queue.Job[P]{})
		require.NoError(t, err)
		if p.Next == "" {
			break
		}
		q.After = p.Next
	}
	for _, id := range stay {
		require.Contains(t, seen, id)
	}
	slices.Sort(seen)
	require.Equal(t, len(seen), len(slices.Compact(slices.Clone(seen))), "a job was listed twice")
}

// claimDead claims the next job of s and dead-letters it. It returns
// once the fetcher has claimed ahead for the worker the outcome expects
// back (found nothing, on these tests' queues): a job added afterwards is
// not claimed ahead, and stays ready for the test.
func claimDead(t *testing.T, s *pgstore.Store[P]) queue.Job[P] {
	t.Helper()
	j := claimWithin(t, s, 5*time.Second)
	require.NoError(t, s.Dead(bg, j, errors.New("boom")))
	require.Eventually(t, func() bool { return pgstore.AheadClaimed(s) }, 10*time.Second, time.Millisecond,
		"the fetcher's claim for the worker expected back")
	return j
}

// Retry, Delete and Cancel by ID: what each state allows, keys taken and
// released, and the errors for the rest.
func TestAdminActions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	log := bind(t, s, "act", nil)
	a := adminOf(s)
	_, err := s.Add(bg, queue.Job[P]{Key: "k"})
	require.NoError(t, err)
	dead := claimDead(t, s)
	info, err := a.Get(bg, dead.ID, false)
	require.NoError(t, err)
	require.Equal(t, admin.Dead, info.State)
	require.Equal(t, "boom", info.LastError)
	require.Equal(t, 1, info.Attempt)
	list, err := a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Dead}})
	require.NoError(t, err)
	require.Equal(t, []int64{dead.ID}, ids(list.Jobs))

	// The key is taken again: retry refused, job stays dead.
	other, err := s.Add(bg, queue.Job[P]{Key: "k"})
	require.NoError(t, err)
	err = a.Retry(bg, dead.ID)
	require.ErrorIs(t, err, queue.ErrDuplicate)
	info, err = a.Get(bg, dead.ID, false)
	require.NoError(t, err)
	require.Equal(t, admin.Dead, info.State)

	// Ready jobs cannot be retried; cancelling one frees its key.
	require.ErrorIs(t, a.Retry(bg, other.ID), admin.ErrState)
	require.NoError(t, a.Cancel(bg, other.ID))
	require.ErrorIs(t, a.Cancel(bg, other.ID), admin.ErrState)
	require.Equal(t, 1, log.Count(queue.EventCancelled), "admin Cancel is reported as EventCancelled")
	info, err = a.GetKey(bg, "k", false)
	require.NoError(t, err)
	require.Equal(t, other.ID, info.ID, "newest ended job with the key")
	require.Equal(t, admin.Cancelled, info.State)

	// Now the dead job can run again, with fresh attempts.
	require.NoError(t, a.Retry(bg, dead.ID))
	info, err = a.GetKey(bg, "k", false)
	require.NoError(t, err)
	require.Equal(t, dead.ID, info.ID)
	require.Equal(t, admin.Ready, info.State)
	require.Equal(t, 0, info.Attempt)
	j := claimWithin(t, s, 5*time.Second)
	require.Equal(t, dead.ID, j.ID)
	require.Equal(t, 1, j.Attempt)

	// Running: no delete, no retry; cancel marks it.
	require.ErrorIs(t, a.Delete(bg, j.ID), admin.ErrState)
	require.ErrorIs(t, a.Retry(bg, j.ID), admin.ErrState)
	require.NoError(t, s.Complete(bg, j))
	done, err := a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Done}})
	require.NoError(t, err)
	require.Equal(t, []int64{j.ID}, ids(done.Jobs))
	require.ErrorIs(t, a.Cancel(bg, j.ID), admin.ErrState)
	require.NoError(t, a.Delete(bg, j.ID))
	require.ErrorIs(t, a.Delete(bg, j.ID), admin.ErrNotFound)
	require.ErrorIs(t, a.Retry(bg, j.ID), admin.ErrNotFound)
	require.ErrorIs(t, a.Cancel(bg, j.ID), admin.ErrNotFound)

	// Deleting a scheduled job frees its key.
	sch, err := s.Add(bg, queue.Job[P]{Key: "s", RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.NoError(t, a.Delete(bg, sch.ID))
	_, err = s.Add(bg, queue.Job[P]{Key: "s"})
	require.NoError(t, err)
}

// A running job an operator cancels: the holder's next heartbeat returns
// it (CancelRequested says why), an outcome of the run then ends it
// cancelled; a holder that died has it cancelled by the lease rescue.
func TestAdminCancelRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	clk := queuetest.NewFakeClock(time.Now())
	bind(t, s, "cancelrun", clk)
	a := adminOf(s)
	for range 3 {
		_, err := s.Add(bg, queue.Job[P]{})
		require.NoError(t, err)
	}
	j1 := claimWithin(t, s, 5*time.Second)
	j2 := claimWithin(t, s, 5*time.Second)
	j3 := claimWithin(t, s, 5*time.Second)
	lost, err := s.Heartbeat(bg, []int64{j1.ID, j2.ID, j3.ID})
	require.NoError(t, err)
	require.Empty(t, lost)

	for _, j := range []queue.Job[P]{j1, j2, j3} {
		require.NoError(t, a.Cancel(bg, j.ID))
		require.NoError(t, a.Cancel(bg, j.ID), "twice is fine")
	}
	lost, err = s.Heartbeat(bg, []int64{j1.ID, j2.ID})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{j1.ID, j2.ID}, lost)
	require.True(t, s.CancelRequested(j1.ID))
	require.False(t, s.CancelRequested(12345))
	info, err := a.Get(bg, j1.ID, false)
	require.NoError(t, err)
	require.Equal(t, admin.Running, info.State, "running until its holder ends it")

	// The queue ends a cancelled run with CancelClaimed; a retry of it
	// (the handler's error) is superseded: cancelled as well.
	require.NoError(t, s.CancelClaimed(bg, j1, errors.New("cancelled by an operator")))
	require.ErrorIs(t, s.Retry(bg, j2, clk.Now(), errors.New("context canceled")), storekit.ErrSuperseded)
	// j3's holder is gone: the rescue cancels it rather than run it again.
	clk.Advance(2 * pgstore.DefaultLeaseTTL)
	n, err := s.RescueExpired(bg)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	for _, j := range []queue.Job[P]{j1, j2, j3} {
		info, err := a.Get(bg, j.ID, false)
		require.NoError(t, err)
		require.Equal(t, admin.Cancelled, info.State, "job %d", j.ID)
	}
	c, err := a.Counts(bg)
	require.NoError(t, err)
	require.Equal(t, 3, c[admin.Cancelled])
}

// A cancel racing the run's completion: whichever commits first wins;
// the job ends completed or cancelled, never both, never stuck.
func TestAdminCancelRacesComplete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	bind(t, s, "race", nil)
	a := adminOf(s)
	const n = 20
	for range n {
		_, err := s.Add(bg, queue.Job[P]{})
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for range n {
		j := claimWithin(t, s, 5*time.Second)
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := a.Cancel(bg, j.ID); err != nil && !errors.Is(err, admin.ErrState) {
				t.Errorf("Cancel: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			if err := s.Complete(bg, j); err != nil {
				t.Errorf("Complete: %v", err)
			}
		}()
	}
	wg.Wait()
	c, err := a.Counts(bg)
	require.NoError(t, err)
	require.Equal(t, n, c[admin.Done], "a completion wins over a cancel request")
}

// A retry racing the janitor's pruning of the same dead job: either the
// job is pruned (the retry finds nothing) or it is retried (and pruning
// leaves it alone); never retried and then deleted.
func TestAdminRetryRacesPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e, pgstore.WithDeadRetention(time.Nanosecond), pgstore.WithJanitorInterval(time.Hour))
	clk := queuetest.NewFakeClock(time.Now())
	bind(t, s, "prune", clk)
	a := adminOf(s)
	const n = 30
	var dead []int64
	for range n {
		_, err := s.Add(bg, queue.Job[P]{})
		require.NoError(t, err)
		dead = append(dead, claimDead(t, s).ID)
	}
	clk.Advance(time.Minute)
	var (
		wg      sync.WaitGroup
		retried = make([]bool, n)
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := s.Prune(bg); err != nil {
			t.Errorf("Prune: %v", err)
		}
	}()
	for i, id := range dead {
		err := a.Retry(bg, id)
		switch {
		case err == nil:
			retried[i] = true
		case errors.Is(err, admin.ErrNotFound):
		default:
			t.Errorf("Retry %d: %v", id, err)
		}
	}
	wg.Wait()
	for i, id := range dead {
		info, err := a.Get(bg, id, false)
		if retried[i] {
			require.NoError(t, err, "a retried job must not be pruned")
			require.Equal(t, admin.Ready, info.State)
		} else {
			require.ErrorIs(t, err, admin.ErrNotFound)
		}
	}
}

// Pause is shared by every process: another store on the same queue
// claims nothing while it is paused, and at once after Resume; enqueues
// go on.
func TestAdminPause(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	worker := newStore[P](t, e, pgstore.WithPollInterval(time.Hour))
	bind(t, worker, "pause", nil)
	ctl := newStore[P](t, e)
	initOnly(t, ctl, "pause", nil)
	a := adminOf(ctl)
	paused, err := a.Paused(bg)
	require.NoError(t, err)
	require.False(t, paused)
	require.NoError(t, a.Pause(bg))
	paused, err = a.Paused(bg)
	require.NoError(t, err)
	require.True(t, paused)
	_, err = worker.Add(bg, queue.Job[P]{})
	require.NoError(t, err, "enqueues go on while paused")
	ctx, cancel := context.WithTimeout(bg, 300*time.Millisecond)
	_, err = worker.Claim(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "no claim while paused")
	require.NoError(t, a.Resume(bg))
	// The resume's notification wakes the worker's fetcher (its poll
	// interval is an hour).
	claimWithin(t, worker, 5*time.Second)
}

// Before Init, the admin API says so.
func TestAdminNotBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	_, err := adminOf(s).Counts(bg)
	require.ErrorIs(t, err, pgstore.ErrNotBound)
	_, err = adminOf(s).TargetList(bg)
	require.ErrorIs(t, err, pgstore.ErrNotBound)
	require.ErrorIs(t, adminOf(s).Disable(bg, "t", "down"), pgstore.ErrNotBound)
}

// Through a running queue: an operator's cancel of a running job cancels
// its context on the process running it, within a heartbeat, and the job
// ends cancelled, counted as cancelled and not as a failure.
func TestAdminCancelRunningQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e, pgstore.WithLeaseTTL(600*time.Millisecond)) // heartbeats every 200 ms
	started := make(chan int64, 1)
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[P]) error {
		started <- j.ID
		<-ctx.Done()
		return ctx.Err()
	}, queue.WithName("cancelq"), queue.WithLogger(quietLogger()), queue.WithWorkers(1, 1))
	require.NoError(t, err)
	require.NoError(t, q.Start(bg))
	t.Cleanup(func() { _ = q.Shutdown(bg) })
	require.NoError(t, q.Enqueue(bg, queue.Job[P]{Target: "t"}))
	var id int64
	select {
	case id = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the job did not start")
	}
	a := adminOf(s)
	require.NoError(t, a.Cancel(bg, id))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		info, err := a.Get(bg, id, false)
		assert.NoError(c, err)
		assert.Equal(c, admin.Cancelled, info.State)
	}, 10*time.Second, pollTick)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st := q.Stats()
		assert.Equal(c, uint64(1), st.Cancelled)
		assert.Equal(c, uint64(0), st.Failed)
		assert.Equal(c, uint64(0), st.Retried)
	}, 10*time.Second, pollTick)
}

// Ready jobs are listed in the order they became ready (run_at, then
// ID), through the claim index: a scheduled job made ready after later
// jobs were enqueued sits where it became ready, and paging from a job
// that was deleted since (its cursor carries its created_at) neither
// skips nor repeats one.
func TestAdminReadyInReadyOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newStore[P](t, e)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := queuetest.NewFakeClock(t0)
	initOnly(t, s, "order", clk)
	a := adminOf(s)
	sched, err := s.Add(bg, queue.Job[P]{Key: "s", Priority: "low", RunAt: t0.Add(time.Hour)})
	require.NoError(t, err)
	first, err := s.Add(bg, queue.Job[P]{Key: "a", Priority: "high"})
	require.NoError(t, err)
	clk.Advance(2 * time.Hour)
	last, err := s.Add(bg, queue.Job[P]{Key: "b"})
	require.NoError(t, err)
	// Promoted as the promoter does: available, at its due time.
	_, err = e.pool.Exec(bg, "UPDATE "+jobsTable(e)+" SET state = 'available' WHERE id = $1", sched.ID)
	require.NoError(t, err)

	want := []int64{first.ID, sched.ID, last.ID}
	p, err := a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true})
	require.NoError(t, err)
	require.Equal(t, want, ids(p.Jobs))
	p, err = a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready}})
	require.NoError(t, err)
	require.Equal(t, []int64{last.ID, sched.ID, first.ID}, ids(p.Jobs))
	p, err = a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "high"}})
	require.NoError(t, err)
	require.Equal(t, []int64{first.ID}, ids(p.Jobs))

	for _, oldest := range []bool{true, false} {
		var seen []int64
		q := admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: oldest, Limit: 1}
		for {
			p, err := a.List(bg, q)
			require.NoError(t, err)
			seen = append(seen, ids(p.Jobs)...)
			if p.Next == "" {
				break
			}
			q.After = p.Next
		}
		if !oldest {
			slices.Reverse(seen)
		}
		require.Equal(t, want, seen, "paging one at a time, oldest first %v", oldest)
	}
	// The cursor's job deleted: paging goes on from its created_at.
	p, err = a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true, Limit: 1})
	require.NoError(t, err)
	require.NoError(t, a.Delete(bg, first.ID))
	p, err = a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: true, Limit: 5, After: p.Next})
	require.NoError(t, err)
	require.Equal(t, []int64{sched.ID, last.ID}, ids(p.Jobs))
	// Filtered, through the bounded walk.
	p, err = a.List(bg, admin.Query{Filter: admin.Filter{State: admin.Ready, KeyPrefix: "s"}})
	require.NoError(t, err)
	require.Equal(t, []int64{sched.ID}, ids(p.Jobs))
}
