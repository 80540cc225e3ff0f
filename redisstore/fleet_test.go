package redisstore

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest/fleettest"
)

// The fleet tests run a queue in this process and another in a helper
// process (TestFleetHelper, this test binary re-run), both on one prefix,
// and check that target health and cadence set in one hold in the other
// (fleettest.TargetHealth, whose helper protocol is fleettest's).

const fleetEnv = "REDISSTORE_FLEET"

// TestFleetHelper is the helper process of the fleet tests; it does
// nothing in a normal test run.
func TestFleetHelper(t *testing.T) {
	if os.Getenv(fleetEnv) == "" {
		t.Skip("helper process of the fleet tests")
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	s, err := New[int](c, WithPrefix(os.Getenv(fleetEnv)), WithWorkerID("helper"))
	if err != nil {
		t.Fatal(err)
	}
	fleettest.ServeHealth(t, s)
}

func startFleetProc(t *testing.T, prefix string) *fleettest.Proc {
	t.Helper()
	return startHelperProc(t, "TestFleetHelper", fleetEnv+"="+prefix)
}

// startHelperProc runs the test named helper in a process of its own,
// with env added to its environment, and waits for it to print READY.
func startHelperProc(t *testing.T, helper string, env ...string) *fleettest.Proc {
	t.Helper()
	return fleettest.StartHelper(t, helper, append(env, "QUEUE_REDIS_ADDR="+redisAddr())...)
}

// fleetQueue starts this process's queue on prefix.
func fleetQueue(t *testing.T, c *redis.Client, prefix string) *queue.Queue[int] {
	t.Helper()
	s, err := New[int](c, WithPrefix(prefix), WithWorkerID("parent"))
	require.NoError(t, err)
	q, err := queue.NewWithStore(s, fleettest.Failing, fleettest.HealthOptions()...)
	require.NoError(t, err)
	require.NoError(t, q.Start(context.Background()))
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	return q
}

// TestFleetTargetHealth: suspension, disabling with its reason, the
// breaker and the fan-out cadence set in one process hold in the other;
// and a disabled target stays disabled after both restart
// (fleettest.TargetHealth). The views follow the store's pub/sub
// messages.
func TestFleetTargetHealth(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	fleettest.TargetHealth(t,
		func(t *testing.T) *fleettest.Proc { return startFleetProc(t, prefix) },
		func(t *testing.T) *queue.Queue[int] { return fleetQueue(t, c, prefix) },
		pollTick)
}

// TestUndecodableReachesOnDead: a job a queue of strings enqueued, claimed
// by a queue of ints of the same name, is dead-lettered through the
// queue's dead path: OnDead with a *queue.DecodeError, RecentErrors, one
// dead count (fleettest.UndecodableReachesOnDead).
func TestUndecodableReachesOnDead(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	fleettest.UndecodableReachesOnDead(t,
		func(t *testing.T) storekit.Store[int] {
			s, err := New[int](c, WithPrefix(prefix))
			require.NoError(t, err)
			return s
		},
		func(t *testing.T) storekit.Store[string] {
			s, err := New[string](c, WithPrefix(prefix))
			require.NoError(t, err)
			return s
		})
}

// TestFleetResumeReleasesHeld: a Resume in one process, or by the store's
// admin backend (queuectl), releases the jobs another process holds for
// the target's suspension (fleettest.ResumeReleasesHeld).
func TestFleetResumeReleasesHeld(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	fleettest.ResumeReleasesHeld(t, func(t *testing.T) storekit.Store[int] {
		s, err := New[int](c, WithPrefix(prefix))
		require.NoError(t, err)
		return s
	}, pollTick)
}
