package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

	attempts := map[int64]map[string]string{}
	byPid := map[string]int{}
	for _, r := range runs {
		f := strings.SplitN(r, " ", 3)
		require.Len(t, f, 3, r)
		attempt, pid, key := f[0], f[1], f[2]
		stamp, ok := strings.CutPrefix(key, "periodic:tick:")
		require.True(t, ok, key)
		sec, err := strconv.ParseInt(stamp, 10, 64)
		require.NoError(t, err, key)
		if attempts[sec] == nil {
			attempts[sec] = map[string]string{}
		}
		if p, dup := attempts[sec][attempt]; dup {
			t.Errorf("period %s enqueued twice: attempt %s ran in pids %s and %s", key, attempt, p, pid)
		}
		attempts[sec][attempt] = pid
		byPid[pid]++
	}
	periods := make([]int64, 0, len(attempts))
	for p := range attempts {
		periods = append(periods, p)
	}
	sort.Slice(periods, func(i, j int) bool { return periods[i] < periods[j] })
	require.GreaterOrEqual(t, len(periods), 7)
	var missing []string
	for p := periods[0]; p <= periods[len(periods)-1]; p++ {
		if attempts[p] == nil {
			missing = append(missing, fmt.Sprint(p))
		}
	}
	assert.Empty(t, missing, "periods not run")
	t.Logf("%d periods, each run once, by pid: %v", len(periods), byPid)
}
