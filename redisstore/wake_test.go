package redisstore

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/queuekit/queue/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The wake-up tests: a transition that makes a job claimable must wake a
// Claim that waits for one, in this process and in the others, without
// waiting for the poll. Every store here polls once an hour and runs its
// janitor (which promotes due jobs) once an hour, so that only a wake-up
// can bring the job within the tests' deadlines.

// idleOpts are the options of a store that claims only when woken.
func idleOpts(prefix string) []Option {
	return []Option{WithPrefix(prefix), WithPollInterval(time.Hour), WithJanitorInterval(time.Hour)}
}

// claimHook counts the claim script's calls that returned, and sends on
// empty after each that found nothing to claim.
type claimHook struct {
	calls atomic.Int64
	empty chan struct{}
}

func newClaimHook() *claimHook { return &claimHook{empty: make(chan struct{}, 64)} }

func (*claimHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *claimHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if a := cmd.Args(); len(a) > 1 && (a[1] == scriptClaim.Hash() || a[1] == scriptClaim.src) {
			h.calls.Add(1)
			if r, ok := cmd.(*redis.Cmd); ok && err == nil {
				if v, _ := r.Slice(); len(v) == 3 || len(v) == 4 && replyString(v[3]) == "paused" {
					h.empty <- struct{}{}
				}
			}
		}
		return err
	}
}
func (*claimHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hookedClient returns a client of the test Redis with h, closed after
// the stores made on it (Cleanup runs last-in first-out).
func hookedClient(t *testing.T, h redis.Hook) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	c.AddHook(h)
	t.Cleanup(func() { c.Close() })
	return c
}

// waitingClaim starts a Claim on s and returns its job's channel, once
// the Claim has looked, found nothing and sleeps (its claim call, counted
// by h, came back empty).
func waitingClaim(t *testing.T, s *Store[int], h *claimHook) <-chan queue.Job[int] {
	t.Helper()
	got, _ := cancellableClaim(t, s, h)
	return got
}

// cancellableClaim is waitingClaim that also returns the Claim's cancel.
func cancellableClaim(t *testing.T, s *Store[int], h *claimHook) (<-chan queue.Job[int], context.CancelFunc) {
	t.Helper()
	got := make(chan queue.Job[int], 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	before := s.sleeping.Load()
	go func() {
		j, err := s.Claim(ctx)
		if err != nil {
			if ctx.Err() == nil {
				t.Error(err)
			}
			return
		}
		got <- j
	}()
	queuetest.Await(t, h.empty, 5*time.Second, "the Claim to find nothing")
	require.Eventually(t, func() bool { return s.sleeping.Load() == before+1 }, 5*time.Second, time.Millisecond)
	return got, cancel
}

// initOnly returns a store bound to its queue but not started: a process
// that enqueues and runs nothing in the background.
func initOnly(t *testing.T, c redis.UniversalClient, clk queue.Clock, opts ...Option) *Store[int] {
	t.Helper()
	s, err := New[int](c, opts...)
	require.NoError(t, err)
	cfg := storetest.Config("q", 100000, clk, func(queue.Event) {})
	cfg.Logger = quietLogger()
	require.NoError(t, s.Init(cfg))
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// awaitJob returns the job got brings, failing t after 5 s.
func awaitJob(t *testing.T, got <-chan queue.Job[int], what string) queue.Job[int] {
	t.Helper()
	select {
	case j := <-got:
		return j
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the waiting Claim was not woken (it polls once an hour)", what)
		return queue.Job[int]{}
	}
}

// TestWakeOnClaimable: each transition that makes a job ready, done by
// another process's store, wakes a Claim waiting in this one.
func TestWakeOnClaimable(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	for _, tc := range []struct {
		name string
		// setup runs before the Claim waits; act makes a job claimable.
		setup func(t *testing.T, other *Store[int]) any
		act   func(t *testing.T, other *Store[int], state any)
	}{
		{name: "add", act: func(t *testing.T, other *Store[int], _ any) {
			_, err := other.Add(context.Background(), queue.Job[int]{Payload: 1})
			require.NoError(t, err)
		}},
		{name: "enqueue many", act: func(t *testing.T, other *Store[int], _ any) {
			_, err := other.EnqueueMany(context.Background(), []queue.Job[int]{{Payload: 1}, {Payload: 2}})
			require.NoError(t, err)
		}},
		{name: "coalesced rerun released by complete", setup: func(t *testing.T, other *Store[int]) any {
			ctx := context.Background()
			_, err := other.Add(ctx, queue.Job[int]{Key: "k", Payload: 1})
			require.NoError(t, err)
			j := claimWithin(t, other, 5*time.Second)
			a, err := other.Add(ctx, queue.Job[int]{Key: "k", Payload: 2})
			require.NoError(t, err)
			require.True(t, a.Coalesced)
			return j
		}, act: func(t *testing.T, other *Store[int], st any) {
			require.NoError(t, other.Complete(context.Background(), st.(queue.Job[int])))
		}},
		{name: "retry due now", setup: func(t *testing.T, other *Store[int]) any {
			_, err := other.Add(context.Background(), queue.Job[int]{Payload: 1})
			require.NoError(t, err)
			return claimWithin(t, other, 5*time.Second)
		}, act: func(t *testing.T, other *Store[int], st any) {
			require.NoError(t, other.Defer(context.Background(), st.(queue.Job[int]), time.Now(), nil))
		}},
		{name: "admin retry of a dead job", setup: func(t *testing.T, other *Store[int]) any {
			_, err := other.Add(context.Background(), queue.Job[int]{Payload: 1})
			require.NoError(t, err)
			j := claimWithin(t, other, 5*time.Second)
			require.NoError(t, other.Dead(context.Background(), j, context.Canceled))
			return j.ID
		}, act: func(t *testing.T, other *Store[int], st any) {
			require.NoError(t, other.Admin().Retry(context.Background(), st.(int64)))
		}},
		{name: "admin resume", setup: func(t *testing.T, other *Store[int]) any {
			require.NoError(t, other.Admin().Pause(context.Background()))
			_, err := other.Add(context.Background(), queue.Job[int]{Payload: 1})
			require.NoError(t, err)
			return nil
		}, act: func(t *testing.T, other *Store[int], _ any) {
			require.NoError(t, other.Admin().Resume(context.Background()))
		}},
		{name: "rescue of an expired lease", setup: func(t *testing.T, other *Store[int]) any {
			_, err := other.Add(context.Background(), queue.Job[int]{Payload: 1})
			require.NoError(t, err)
			return claimWithin(t, other, 5*time.Second) // never heartbeated: its lease expires
		}, act: func(t *testing.T, other *Store[int], _ any) {
			require.Eventually(t, func() bool {
				n, err := other.RescueExpired(context.Background())
				return err == nil && n == 1
			}, 5*time.Second, pollTick, "the lease to expire")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			prefix := testPrefix(t, c)
			h := newClaimHook()
			s := openStore(t, hookedClient(t, h), nil, idleOpts(prefix)...)
			other := openStore(t, c, nil, append(idleOpts(prefix), WithLeaseTTL(100*time.Millisecond))...)
			var st any
			if tc.setup != nil {
				st = tc.setup(t, other)
			}
			got := waitingClaim(t, s, h)
			tc.act(t, other, st)
			awaitJob(t, got, tc.name)
		})
	}
}

// TestScheduledDueHandedToIdleProcess: a scheduled job's wake-up token
// wakes one sleeping Claim, which learns its due time; that Claim then
// stops waiting (its worker retires) before the job is due. The Claim
// asleep in the other process never learnt the due time, and must claim
// the job then (the first process hands it on) rather than at its poll.
func TestScheduledDueHandedToIdleProcess(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	ha, hb := newClaimHook(), newClaimHook()
	a := openStore(t, hookedClient(t, ha), clk, idleOpts(prefix)...)
	b := openStore(t, hookedClient(t, hb), clk, idleOpts(prefix)...)
	producer := initOnly(t, c, clk, idleOpts(prefix)...)
	gotA, cancelA := cancellableClaim(t, a, ha)
	gotB, cancelB := cancellableClaim(t, b, hb)
	_, err := producer.Add(context.Background(), queue.Job[int]{Payload: 1, RunAt: clk.Now().Add(time.Second)})
	require.NoError(t, err)
	// The token wakes one Claim, which looks again and learns the due
	// time; it then leaves.
	learner, idle, got := a, b, gotB
	select {
	case <-ha.empty:
		cancelA()
	case <-hb.empty:
		cancelB()
		learner, idle, got = b, a, gotA
	case <-time.After(5 * time.Second):
		t.Fatal("no Claim woken by the scheduled job")
	}
	require.Eventually(t, func() bool { return learner.waiting.Load() == 0 }, 5*time.Second, time.Millisecond)
	require.Equal(t, int32(1), idle.sleeping.Load())
	clk.Advance(time.Second + handOnGrace)
	require.Equal(t, 1, awaitJob(t, got, "the due job").Payload)
}

// TestScheduledDueWakesOtherWaiter: of a process's two sleeping Claims,
// the wake-up of a newly scheduled job tells one its due time, and a
// ready job then takes one of them. The job must still be claimed at its
// due time by the Claim still asleep, which may never have learnt it.
func TestScheduledDueWakesOtherWaiter(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	h := newClaimHook()
	s := openStore(t, hookedClient(t, h), clk, idleOpts(prefix)...)
	producer := initOnly(t, c, clk, idleOpts(prefix)...)
	ctx := context.Background()
	first, second := waitingClaim(t, s, h), waitingClaim(t, s, h)
	got := make(chan queue.Job[int], 2)
	go func() {
		for range 2 {
			select {
			case j := <-first:
				got <- j
			case j := <-second:
				got <- j
			}
		}
	}()
	_, err := producer.Add(ctx, queue.Job[int]{Payload: 1, RunAt: clk.Now().Add(time.Second)})
	require.NoError(t, err)
	queuetest.Await(t, h.empty, 5*time.Second, "a Claim woken by the scheduled job to look")
	_, err = producer.Add(ctx, queue.Job[int]{Payload: 2})
	require.NoError(t, err)
	require.Equal(t, 2, awaitJob(t, got, "the ready job").Payload)
	clk.Advance(time.Second + handOnGrace)
	require.Equal(t, 1, awaitJob(t, got, "the due job").Payload)
}

// TestResumeWakesManyProcesses: a Resume wakes the sleeping Claims of
// more processes than the 16 tokens it used to push.
func TestResumeWakesManyProcesses(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	const procs = 20
	ctl := initOnly(t, c, nil, idleOpts(prefix)...)
	require.NoError(t, ctl.Admin().Pause(context.Background()))
	jobs := make([]queue.Job[int], procs)
	for i := range jobs {
		jobs[i].Payload = i
	}
	_, err := ctl.EnqueueMany(context.Background(), jobs)
	require.NoError(t, err)
	got := make([]<-chan queue.Job[int], procs)
	for i := range got {
		h := newClaimHook()
		got[i] = waitingClaim(t, openStore(t, hookedClient(t, h), nil, idleOpts(prefix)...), h)
	}
	// The tokens of the adds are spent (each woke a Claim, which found
	// the queue paused and slept again): only Resume's wake them now.
	require.Eventually(t, func() bool {
		return c.LLen(context.Background(), ctl.shards[0].ks.fixed[kWake]).Val() == 0
	}, 5*time.Second, pollTick)
	require.NoError(t, ctl.Admin().Resume(context.Background()))
	for i := range got {
		awaitJob(t, got[i], "a process's Claim after Resume")
	}
}
