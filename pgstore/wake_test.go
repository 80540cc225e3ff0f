package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/queuetest"
	"github.com/stretchr/testify/require"
)

// TestWakeOnClaimable: each transition that makes a job claimable, done
// by another process's store, wakes a Claim waiting in this one (which
// polls once a minute: only a notification can bring the job within the
// deadline).
func TestWakeOnClaimable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// setup runs before the Claim waits; act makes a job claimable.
		setup func(t *testing.T, e *env, other *pgstore.Store[P]) any
		act   func(t *testing.T, e *env, other *pgstore.Store[P], state any)
		// lease is other's lease TTL: a minute unless the case needs the
		// lease of the job it claims to expire. A short one elsewhere
		// would expire on a loaded machine before the case acts.
		lease time.Duration
	}{
		{name: "enqueue many", act: func(t *testing.T, _ *env, other *pgstore.Store[P], _ any) {
			_, err := other.EnqueueMany(bg, []queue.Job[P]{{Payload: P{N: 1}}, {Payload: P{N: 2}}})
			require.NoError(t, err)
		}},
		{name: "enqueue tx", act: func(t *testing.T, e *env, other *pgstore.Store[P], _ any) {
			require.NoError(t, pgx.BeginFunc(bg, e.pool, func(tx pgx.Tx) error {
				_, err := other.EnqueueTx(bg, tx, queue.Job[P]{Payload: P{N: 1}})
				return err
			}))
		}},
		// A process that is not drained claims the rerun its Complete
		// releases (its fetcher, woken by the release), for the worker
		// about to come back for its next job: nothing is left for the
		// others to claim.
		// Only a drained process's completion leaves the rerun to them.
		{name: "coalesced rerun released by complete of a drained process", setup: func(t *testing.T, _ *env, other *pgstore.Store[P]) any {
			_, err := other.Add(bg, queue.Job[P]{Key: "k", Payload: P{N: 1}})
			require.NoError(t, err)
			j := claimWithin(t, other, 5*time.Second)
			a, err := other.Add(bg, queue.Job[P]{Key: "k", Payload: P{N: 2}})
			require.NoError(t, err)
			require.True(t, a.Coalesced)
			return j
		}, act: func(t *testing.T, _ *env, other *pgstore.Store[P], st any) {
			other.Drain()
			require.NoError(t, other.Complete(bg, st.(queue.Job[P])))
		}},
		// Likewise a job deferred due now by a process that is not
		// drained may be claimed by that process's fetcher, for the
		// worker coming back (a case here of that failed now and then
		// on a loaded machine, the deferring process winning the job):
		// only a drained process's Defer leaves the job to the others.
		{name: "defer due now by a drained process", setup: claimOne, act: func(t *testing.T, _ *env, other *pgstore.Store[P], st any) {
			// A process shutting down puts back the jobs it interrupted:
			// it no longer promotes, the others must.
			other.Drain()
			require.NoError(t, other.Defer(bg, st.(queue.Job[P]), time.Now(), nil))
		}},
		{name: "retry with backoff by a drained process", setup: claimOne, act: func(t *testing.T, _ *env, other *pgstore.Store[P], st any) {
			other.Drain()
			require.NoError(t, other.Retry(bg, st.(queue.Job[P]), time.Now().Add(200*time.Millisecond), errors.New("boom")))
		}},
		{name: "admin retry of a dead job", setup: func(t *testing.T, e *env, other *pgstore.Store[P]) any {
			j := claimOne(t, e, other).(queue.Job[P])
			require.NoError(t, other.Dead(bg, j, errors.New("boom")))
			return j.ID
		}, act: func(t *testing.T, _ *env, other *pgstore.Store[P], st any) {
			require.NoError(t, adminOf(other).Retry(bg, st.(int64)))
		}},
		{name: "admin resume", setup: func(t *testing.T, _ *env, other *pgstore.Store[P]) any {
			require.NoError(t, adminOf(other).Pause(bg))
			_, err := other.Add(bg, queue.Job[P]{Payload: P{N: 1}})
			require.NoError(t, err)
			return nil
		}, act: func(t *testing.T, _ *env, other *pgstore.Store[P], _ any) {
			require.NoError(t, adminOf(other).Resume(bg))
		}},
		{name: "rescue of an expired lease", lease: 100 * time.Millisecond, setup: claimOne, act: func(t *testing.T, _ *env, other *pgstore.Store[P], _ any) {
			require.Eventually(t, func() bool {
				n, err := other.RescueExpired(bg)
				return err == nil && n == 1
			}, 10*time.Second, pollTick, "the lease to expire")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			// The consumer rescues no lease of its own accord: its janitor
			// (every second by default) would otherwise rescue the job the
			// rescue case claims with a 100 ms lease whenever setting up
			// takes longer than that, as on a loaded machine, and claim it
			// before it is seen to find nothing.
			s, listening, idle := tracedConsumer(t, e, pgstore.WithJanitorInterval(time.Hour))
			lease := tc.lease
			if lease == 0 {
				lease = time.Minute
			}
			other := newStore[P](t, e, pgstore.WithPollInterval(time.Hour), pgstore.WithJanitorInterval(time.Hour),
				pgstore.WithLeaseTTL(lease))
			bind(t, other, "wake", nil)
			var st any
			if tc.setup != nil {
				st = tc.setup(t, e, other)
			}
			bind(t, s, "wake", nil)
			queuetest.Await(t, listening, 10*time.Second, "the consumer to listen")
			got := make(chan queue.Job[P], 1)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			go func() {
				j, err := s.Claim(ctx)
				if err == nil {
					got <- j
				}
			}()
			queuetest.Await(t, idle, 10*time.Second, "the consumer to find nothing")
			require.Eventually(t, func() bool { return pgstore.FetchSettled(s) }, 10*time.Second, time.Millisecond)
			tc.act(t, e, other, st)
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: the waiting Claim was not woken (it polls once a minute)", tc.name)
			}
		})
	}
}

// claimOne adds a job to s and claims it.
func claimOne(t *testing.T, _ *env, s *pgstore.Store[P]) any {
	t.Helper()
	_, err := s.Add(bg, queue.Job[P]{Payload: P{N: 1}})
	require.NoError(t, err)
	return claimWithin(t, s, 5*time.Second)
}
