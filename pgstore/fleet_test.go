package pgstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/pgstore"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest/fleettest"
)

// The fleet tests run a queue in this process and another in a helper
// process (TestFleetHelper, this test binary re-run), both on one schema,
// and check that target health and cadence set in one hold in the other
// (fleettest.TargetHealth, whose helper protocol is fleettest's).

const fleetEnv = "PGSTORE_FLEET"

// TestFleetHelper is the helper process of the fleet tests; it does
// nothing in a normal test run.
func TestFleetHelper(t *testing.T) {
	if os.Getenv(fleetEnv) == "" {
		t.Skip("helper process of the fleet tests")
	}
	pool, err := pgxpool.New(context.Background(), pgURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := pgstore.New[int](pool, pgstore.WithSchema(os.Getenv(fleetEnv)), pgstore.WithWorkerID("helper"))
	if err != nil {
		t.Fatal(err)
	}
	fleettest.ServeHealth(t, s)
}

func startFleetProc(t *testing.T, schema string) *fleettest.Proc {
	t.Helper()
	return startHelperProc(t, "TestFleetHelper", fleetEnv+"="+schema)
}

// startHelperProc runs the test named helper in a process of its own,
// with env added to its environment, and waits for it to print READY.
func startHelperProc(t *testing.T, helper string, env ...string) *fleettest.Proc {
	t.Helper()
	return fleettest.StartHelper(t, helper, append(env, "QUEUE_PG_URL="+pgURL())...)
}

// fleetQueue starts this process's queue on e's schema.
func fleetQueue(t *testing.T, e *env) *queue.Queue[int] {
	t.Helper()
	q, err := queue.NewWithStore(newStore[int](t, e, pgstore.WithWorkerID("parent")), fleettest.Failing, fleettest.HealthOptions()...)
	require.NoError(t, err)
	require.NoError(t, q.Start(context.Background()))
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	return q
}

// TestFleetTargetHealth: suspension, disabling with its reason, the
// breaker and the fan-out cadence set in one process hold in the other;
// and a disabled target stays disabled after both restart
// (fleettest.TargetHealth). The views follow the database's
// notifications.
func TestFleetTargetHealth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fleettest.TargetHealth(t,
		func(t *testing.T) *fleettest.Proc { return startFleetProc(t, e.schema) },
		func(t *testing.T) *queue.Queue[int] { return fleetQueue(t, e) },
		pollTick)
}

// TestFleetWithoutListen: a process that does not LISTEN sees another's
// change at its next reload, within a second (and a round trip).
func TestFleetWithoutListen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := startFleetProc(t, e.schema)
	q, err := queue.NewWithStore(newStore[int](t, e, pgstore.WithWorkerID("deaf"), pgstore.WithListen(false)),
		fleettest.Failing, fleettest.HealthOptions()...)
	require.NoError(t, err)
	require.NoError(t, q.Start(context.Background()))
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	require.Equal(t, "ok", b.Ask(t, "disable d gone"))
	changed := time.Now()
	fleettest.AwaitStatus(t, q, "d", `disabled=true reason="gone" suspended=false breaker=closed`, pollTick)
	seen := time.Since(changed)
	t.Logf("seen by the reload %s after the change", seen.Round(time.Millisecond))
	require.Less(t, seen, 5*time.Second, "the reload runs every second (the bound leaves room for a loaded machine)")
}

// TestUndecodableReachesOnDead: a job a queue of strings enqueued, claimed
// by a queue of ints of the same name, is dead-lettered through the
// queue's dead path: OnDead with a *queue.DecodeError, RecentErrors, one
// dead count (fleettest.UndecodableReachesOnDead).
func TestUndecodableReachesOnDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fleettest.UndecodableReachesOnDead(t,
		func(t *testing.T) storekit.Store[int] { return newStore[int](t, e) },
		func(t *testing.T) storekit.Store[string] { return newStore[string](t, e) })
}

// TestFleetResumeReleasesHeld: a Resume in one process, or by the store's
// admin backend (queuectl), releases the jobs another process holds for
// the target's suspension (fleettest.ResumeReleasesHeld).
func TestFleetResumeReleasesHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fleettest.ResumeReleasesHeld(t, func(t *testing.T) storekit.Store[int] { return newStore[int](t, e) }, pollTick)
}
