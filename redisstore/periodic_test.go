package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue/storetest/fleettest"
)

// TestPeriodicTwoProcessesAcrossKill: two processes run the same
// one-second schedule on one queue; one is SIGKILLed and replaced. Every
// period from the first run to the last runs, and none is enqueued twice
// (a rescued run of a killed process comes back with the next attempt).
// The processes catch up (PeriodicOptions.CatchUp), so that a loop woken
// late on a loaded machine still runs its period, and a restart's catch-up
// meets the unique window of a period already run.
func TestPeriodicTwoProcessesAcrossKill(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	const lease = 2 * time.Second
	list := "{" + prefix + ":q}:test:periodic"
	a := startHelper(t, "periodic", prefix, lease)
	b := startHelper(t, "periodic", prefix, lease)
	runs := popN(t, c, list, 3, 30*time.Second)
	a.kill(t)
	runs = append(runs, popN(t, c, list, 3, 30*time.Second)...)
	a2 := startHelper(t, "periodic", prefix, lease)
	runs = append(runs, popN(t, c, list, 3, 30*time.Second)...)
	b.kill(t)
	a2.kill(t)
	rest, err := c.LRange(context.Background(), list, 0, -1).Result()
	require.NoError(t, err)
	runs = append(runs, rest...)

	// Each run is "attempt pid key"; the worker is the pid.
	fleettest.CheckPeriodicRuns(t, len(runs), 7, func(i int) (string, int, string) {
		f := strings.SplitN(runs[i], " ", 3)
		require.Len(t, f, 3, runs[i])
		attempt, err := strconv.Atoi(f[0])
		require.NoError(t, err, runs[i])
		return f[2], attempt, "pid " + f[1]
	})
}
