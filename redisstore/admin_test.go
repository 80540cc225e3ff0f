package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

func TestAdmin(t *testing.T) {
	c := needRedis(t)
	storetest.RunAdmin(t, func(t *testing.T) storekit.Store[storetest.Payload] {
		s, err := New[storetest.Payload](c, WithPrefix(testPrefix(t, c)))
		require.NoError(t, err)
		return s
	})
}

// Before Init, the admin API and the TargetStore methods return
// ErrNotBound; after it, with the store never started (as queuectl has
// it), the target actions work.
func TestAdminNotBound(t *testing.T) {
	c := needRedis(t)
	ctx := context.Background()
	s, err := New[storetest.Payload](c, WithPrefix(testPrefix(t, c)))
	require.NoError(t, err)
	a := admin.New(s.Admin())
	_, err = a.Counts(ctx)
	require.ErrorIs(t, err, ErrNotBound)
	_, err = a.TargetList(ctx)
	require.ErrorIs(t, err, ErrNotBound)
	require.ErrorIs(t, a.Suspend(ctx, "t", time.Minute), ErrNotBound)
	_, err = s.LoadTargets(ctx)
	require.ErrorIs(t, err, ErrNotBound)
	require.ErrorIs(t, s.SaveTargets(ctx, []storekit.TargetState{{Target: "t", Disabled: true}}), ErrNotBound)

	require.NoError(t, s.Init(storetest.Config("nb", 100, nil, func(queue.Event) {})))
	require.NoError(t, a.Disable(ctx, "t", "down"))
	ts, err := a.TargetList(ctx)
	require.NoError(t, err)
	require.Len(t, ts, 1)
	require.Equal(t, "down", ts[0].Reason)
}

// adminOnly returns a store of queue name under prefix that was Init-ed
// and never started, as queuectl makes one, and its admin API.
func adminOnly(t *testing.T, prefix, name string, opts ...Option) (*Store[storetest.Payload], *admin.Admin) {
	t.Helper()
	c := needRedis(t)
	s, err := New[storetest.Payload](c, append([]Option{WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, s.Init(storetest.Config(name, 1000, nil, func(queue.Event) {})))
	return s, admin.New(s.Admin())
}

// An operator's cancel through another store (another process, queuectl)
// reaches the running job at its holder's next heartbeat: the job's
// context is cancelled and it ends cancelled, counted so; a pause through
// it stops this process's claims.
func TestAdminCancelThroughStore(t *testing.T) {
	t.Parallel()
	c := needRedis(t)
	prefix := testPrefix(t, c)
	s, err := New[storetest.Payload](c, WithPrefix(prefix), WithLeaseTTL(600*time.Millisecond))
	require.NoError(t, err)
	started := make(chan int64, 1)
	ended := make(chan queue.Event, 4)
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[storetest.Payload]) error {
		started <- j.ID
		<-ctx.Done()
		return ctx.Err()
	}, queue.WithName("x"), queue.WithWorkers(1, 1), queue.WithLogger(quietLogger()),
		queue.WithObserver(func(ev queue.Event) {
			if ev.Kind == queue.EventCancelled || ev.Kind == queue.EventDone || ev.Kind == queue.EventRetried || ev.Kind == queue.EventDead {
				ended <- ev
			}
		}))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = q.Shutdown(sctx)
	})
	_, a := adminOnly(t, prefix, "x")
	require.NoError(t, q.Enqueue(ctx, queue.Job[storetest.Payload]{Key: "long"}))
	id := <-started
	got, err := a.Get(ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, admin.Running, got.State)
	require.NoError(t, a.Cancel(ctx, id))
	require.NoError(t, a.Cancel(ctx, id), "twice is not an error")
	got, err = a.Get(ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, "cancel requested", got.LastError)
	select {
	case ev := <-ended:
		require.Equal(t, queue.EventCancelled, ev.Kind, "%v", ev)
		require.Equal(t, id, ev.JobID)
	case <-time.After(time.Minute):
		t.Fatal("the running job was not cancelled through the store")
	}
	require.EqualValues(t, 1, q.Stats().Cancelled)
	_, err = a.Get(ctx, id, false)
	require.ErrorIs(t, err, admin.ErrNotFound)
	require.False(t, s.CancelRequested(id))

	// Pause through the other store: this process claims nothing.
	require.NoError(t, a.Pause(ctx))
	require.NoError(t, q.Enqueue(ctx, queue.Job[storetest.Payload]{Key: "after"}))
	n, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n[admin.Ready])
	select {
	case id := <-started:
		t.Fatalf("job %d claimed while paused", id)
	default:
	}
	require.NoError(t, a.Resume(ctx))
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("no claim after Resume")
	}
}

// A job whose holder died after an operator cancelled it ends cancelled
// at the lease rescue, rather than running again.
func TestAdminCancelRescued(t *testing.T) {
	t.Parallel()
	c := needRedis(t)
	prefix := testPrefix(t, c)
	clk := queuetest.NewFakeClock(time.Now())
	var evs []queue.Event
	s, err := New[storetest.Payload](c, WithPrefix(prefix))
	require.NoError(t, err)
	require.NoError(t, s.Init(storetest.Config("r", 100, clk, func(ev queue.Event) { evs = append(evs, ev) })))
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx := context.Background()
	_, err = s.Add(ctx, queue.Job[storetest.Payload]{Key: "k"})
	require.NoError(t, err)
	j, err := s.Claim(ctx)
	require.NoError(t, err)
	a := admin.New(s.Admin())
	require.NoError(t, a.Cancel(ctx, j.ID))
	// The holder "dies": its lease expires by the fake clock.
	clk.Advance(time.Hour)
	n, err := s.RescueExpired(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var kinds []queue.EventKind
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind)
	}
	require.Contains(t, kinds, queue.EventCancelled)
	_, err = a.Get(ctx, j.ID, false)
	require.ErrorIs(t, err, admin.ErrNotFound)
	// The key is free again, and the outcome of the stale run is refused.
	_, err = s.Add(ctx, queue.Job[storetest.Payload]{Key: "k"})
	require.NoError(t, err)
	require.ErrorIs(t, s.Complete(ctx, j), storekit.ErrLeaseLost)
	c2, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, c2[admin.Ready])
	require.Zero(t, c2[admin.Running])
}

// Retry of a dead job whose key another job took meanwhile is refused
// with ErrDuplicate, and the job stays dead; Delete of a dead job frees
// nothing else.
func TestAdminRetryDuplicate(t *testing.T) {
	t.Parallel()
	c := needRedis(t)
	s, a := adminOnly(t, testPrefix(t, c), "d")
	ctx := context.Background()
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Close(ctx) })
	_, err := s.Add(ctx, queue.Job[storetest.Payload]{Key: "k"})
	require.NoError(t, err)
	j, err := s.Claim(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Dead(ctx, j, errors.New("boom")))
	_, err = s.Add(ctx, queue.Job[storetest.Payload]{Key: "k"})
	require.NoError(t, err)
	err = a.Retry(ctx, j.ID)
	require.ErrorIs(t, err, queue.ErrDuplicate)
	got, err := a.Get(ctx, j.ID, false)
	require.NoError(t, err)
	require.Equal(t, admin.Dead, got.State)
	require.Equal(t, "boom", got.LastError)
	held, err := a.GetKey(ctx, "k", false)
	require.NoError(t, err)
	require.Equal(t, admin.Ready, held.State)
	require.NoError(t, a.Delete(ctx, held.ID))
	require.NoError(t, a.Retry(ctx, j.ID))
	got, err = a.Get(ctx, j.ID, false)
	require.NoError(t, err)
	require.Equal(t, admin.Ready, got.State)
	require.Zero(t, got.Attempt)
	j2, err := s.Claim(ctx)
	require.NoError(t, err)
	require.Equal(t, j.ID, j2.ID)
	require.NoError(t, s.Complete(ctx, j2))
}

// Paging stays exact over many jobs enqueued in the same millisecond
// (EnqueueMany), in both orders, with a priority filter.
func TestAdminPagingSameMillisecond(t *testing.T) {
	t.Parallel()
	c := needRedis(t)
	prefix := testPrefix(t, c)
	s, err := New[storetest.Payload](c, WithPrefix(prefix))
	require.NoError(t, err)
	clk := queuetest.NewFakeClock(time.Now())
	require.NoError(t, s.Init(storetest.Config("m", 10000, clk, func(queue.Event) {})))
	ctx := context.Background()
	var jobs []queue.Job[storetest.Payload]
	for i := range 1050 {
		p := "high"
		if i%3 == 0 {
			p = "low"
		}
		jobs = append(jobs, queue.Job[storetest.Payload]{Key: fmt.Sprintf("j%04d", i), Priority: p})
	}
	added, err := s.EnqueueMany(ctx, jobs)
	require.NoError(t, err)
	want := map[int64]bool{}
	for _, ad := range added {
		want[ad.ID] = true
	}
	a := admin.New(s.Admin())
	for _, oldest := range []bool{true, false} {
		seen := map[int64]bool{}
		var prev *admin.Cursor
		q := admin.Query{Filter: admin.Filter{State: admin.Ready}, Oldest: oldest, Limit: 97}
		for {
			p, err := a.List(ctx, q)
			require.NoError(t, err)
			for _, j := range p.Jobs {
				require.False(t, seen[j.ID], "job %d twice", j.ID)
				seen[j.ID] = true
				pos := admin.Position(j)
				if prev != nil {
					require.Equal(t, oldest, prev.Before(pos), "order at job %d", j.ID)
				}
				prev = &pos
			}
			if p.Next == "" {
				break
			}
			q.After = p.Next
		}
		require.Equal(t, want, seen)
	}
	low := 0
	for _, j := range jobs {
		if j.Priority == "low" {
			low++
		}
	}
	p, err := a.List(ctx, admin.Query{Filter: admin.Filter{State: admin.Ready, Priority: "low"}, Limit: 1000})
	require.NoError(t, err)
	require.Len(t, p.Jobs, low)
	n, err := a.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, len(jobs), n[admin.Ready])
}

// TestReadyIndexCatchUp: jobs pushed to a ready list's tail (each add
// path, a retry's promotion) are left out of the ready index until the
// admin API lists ready jobs, which indexes them first, a batch per
// script call: every ready job is listed once, in enqueue order, and a
// tombstone or a claimed job is not.
func TestReadyIndexCatchUp(t *testing.T) {
	c := needRedis(t)
	s := openStore(t, c, nil, WithPrefix(testPrefix(t, c)))
	ctx := context.Background()
	defer func(n int) { indexBatch = n }(indexBatch)
	indexBatch = 3
	ridx := s.shards[0].ks.fixed[kReadyIdx]
	add := func(j queue.Job[int]) {
		t.Helper()
		_, err := s.Add(ctx, j)
		require.NoError(t, err)
	}
	// list checks that the admin API lists exactly the queued jobs of the
	// ready lists, in enqueue order, and that the index holds no other job.
	list := func() {
		t.Helper()
		want := map[int64]bool{}
		for _, id := range readyIDs(t, s) {
			want[id] = true
		}
		jobs, err := s.Admin().List(ctx, admin.Filter{State: admin.Ready}, true, nil, 100, false)
		require.NoError(t, err)
		got := map[int64]bool{}
		for i, j := range jobs {
			got[j.ID] = true
			if i > 0 {
				p := jobs[i-1]
				require.True(t, p.Created.Before(j.Created) || p.Created.Equal(j.Created) && p.ID < j.ID,
					"listed out of enqueue order: %d (%v) before %d (%v)", p.ID, p.Created, j.ID, j.Created)
			}
		}
		require.Equal(t, want, got)
		// The index holds the queued jobs and tombstones (no record).
		indexed := map[int64]bool{}
		for _, mem := range c.ZRange(ctx, ridx, 0, -1).Val() {
			id, err := strconv.ParseInt(mem, 10, 64)
			require.NoError(t, err)
			if c.HExists(ctx, s.shards[0].ks.fixed[kMeta], strconv.FormatInt(id, 10)).Val() {
				indexed[id] = true
			}
		}
		require.Equal(t, want, indexed, "the ready index's jobs")
	}
	for i := range 5 {
		add(queue.Job[int]{Payload: i}) // add-one
	}
	add(queue.Job[int]{Key: "k", Payload: 5}) // add
	add(queue.Job[int]{Key: "gone", Payload: 6})
	_, err := s.EnqueueMany(ctx, []queue.Job[int]{{Payload: 7}, {Payload: 8}, {Payload: 9}, {Payload: 10, Priority: "high"}})
	require.NoError(t, err)
	require.Zero(t, c.ZCard(ctx, ridx).Val(), "jobs indexed on add")
	// A tombstone: a cancelled job's ID stays in its list.
	n, err := s.Cancel(ctx, "gone")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	list()
	j := claimWithin(t, s, 5*time.Second)
	list()
	// Retried: back at its list's tail through promotion, after a newer job.
	require.NoError(t, s.Retry(ctx, j, time.Now().Add(-time.Second), nil))
	add(queue.Job[int]{Payload: 11})
	require.NoError(t, s.Complete(ctx, claimWithin(t, s, 5*time.Second))) // promotes j
	list()
	list() // nothing new: nothing changes
	require.Len(t, readyIDs(t, s), 10)
}

// readyIDs returns the IDs of the queued jobs in s's ready lists.
func readyIDs(t *testing.T, s *Store[int]) []int64 {
	t.Helper()
	ctx := context.Background()
	sh := s.shards[0]
	var ids []int64
	for i := range sh.labels {
		for _, f := range sh.client.LRange(ctx, sh.ks.fixed[nFixedKeys+i], 0, -1).Val() {
			raw := sh.client.HGet(ctx, sh.ks.fixed[kMeta], f).Val()
			if m, ok := parseMeta(raw); ok && m.State == "q" {
				id, err := strconv.ParseInt(f, 10, 64)
				require.NoError(t, err)
				ids = append(ids, id)
			}
		}
	}
	return ids
}
