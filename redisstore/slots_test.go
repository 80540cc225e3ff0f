package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/fleetflow"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The fleet concurrency tests run a queue with a per-target limit of 1 in
// this process and another in a helper process (TestFleetConcurrencyHelper,
// this test binary re-run), on one prefix. Each job's handler records in
// Redis that it runs: INCR of a counter of the target's running jobs when
// it starts (a value above 1 is counted as an overlap), DECR when it ends,
// and a count of runs per job and per process. A job with payload -1
// blocks in the helper until the process is killed.

const slotsEnv = "REDISSTORE_SLOTS"

// slotKeys are the probe's keys under prefix.
func probeKeys(prefix string) (running, overlaps, runs, procs string) {
	tag := "{" + prefix + ":probe}"
	return tag + ":running", tag + ":overlaps", tag + ":runs", tag + ":procs"
}

// slotHandler records each run under prefix, as proc.
func slotHandler(c redis.UniversalClient, prefix, proc string, block bool) queue.Handler[int] {
	running, overlaps, runs, procs := probeKeys(prefix)
	return func(ctx context.Context, j queue.Job[int]) error {
		bg := context.WithoutCancel(ctx)
		n, err := c.Incr(bg, running).Result()
		if err != nil {
			return err
		}
		if n > 1 {
			c.Incr(bg, overlaps)
		}
		c.HIncrBy(bg, runs, strconv.Itoa(j.Payload), 1)
		c.HIncrBy(bg, procs, proc, 1)
		if j.Payload == -1 && block {
			fmt.Println("RUNNING")
			<-make(chan struct{}) // until the process is killed
		}
		time.Sleep(2 * time.Millisecond) // the job's work: long enough for two runs to overlap
		return c.Decr(bg, running).Err()
	}
}

// TestFleetConcurrencyHelper is the helper process of the fleet
// concurrency tests; it does nothing in a normal test run.
func TestFleetConcurrencyHelper(t *testing.T) {
	prefix := os.Getenv(slotsEnv)
	if prefix == "" {
		t.Skip("helper process of the fleet concurrency tests")
	}
	workers, _ := strconv.Atoi(os.Getenv(slotsEnv + "_WORKERS"))
	lease, _ := time.ParseDuration(os.Getenv(slotsEnv + "_LEASE"))
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	s, err := New[int](c, WithPrefix(prefix), WithWorkerID("helper"), WithLeaseTTL(lease))
	require.NoError(t, err)
	q, err := queue.NewWithStore(s, slotHandler(c, prefix, "helper", true), fleetflow.SlotOptions(workers)...)
	require.NoError(t, err)
	_ = fleetflow.RunHelper(t, q, nil) // until the parent closes stdin
}

func startSlotProc(t *testing.T, prefix string, workers int, lease time.Duration) *fleetflow.Proc {
	t.Helper()
	return startHelperProc(t, "TestFleetConcurrencyHelper", slotsEnv+"="+prefix,
		fmt.Sprint(slotsEnv, "_WORKERS=", workers), fmt.Sprint(slotsEnv, "_LEASE=", lease))
}

// slotQueue makes this process's queue on prefix, started if start.
func slotQueue(t *testing.T, c redis.UniversalClient, prefix string, workers int, lease time.Duration, start bool) *queue.Queue[int] {
	t.Helper()
	s, err := New[int](c, WithPrefix(prefix), WithWorkerID("parent"), WithLeaseTTL(lease))
	require.NoError(t, err)
	q, err := queue.NewWithStore(s, slotHandler(c, prefix, "parent", false), fleetflow.SlotOptions(workers)...)
	require.NoError(t, err)
	if start {
		require.NoError(t, q.Start(context.Background()))
	}
	t.Cleanup(func() { _ = q.Shutdown(context.Background()) })
	return q
}

// awaitRuns waits, at most 60 s, until n jobs ran.
func awaitRuns(t *testing.T, c redis.UniversalClient, prefix string, n int64) {
	t.Helper()
	_, _, runs, _ := probeKeys(prefix)
	require.Eventually(t, func() bool { return c.HLen(context.Background(), runs).Val() >= n }, 60*time.Second, 10*time.Millisecond, "%d runs", n)
}

// TestFleetConcurrencyLimit: with a limit of 1 on a target in each of two
// processes, and four workers in each, never more than one of the
// target's jobs runs at once across both, and every job runs once.
func TestFleetConcurrencyLimit(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	p := startSlotProc(t, prefix, 4, DefaultLeaseTTL)
	q := slotQueue(t, c, prefix, 4, DefaultLeaseTTL, true)
	const n = 100
	for i := range n {
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
	}
	awaitRuns(t, c, prefix, n)
	_, overlaps, runs, procs := probeKeys(prefix)
	require.Zero(t, c.Get(context.Background(), overlaps).Val(), "runs of the target that began while another ran")
	got := c.HGetAll(context.Background(), runs).Val()
	require.Len(t, got, n, "every job ran")
	for payload, count := range got {
		require.Equal(t, "1", count, "job %s runs once", payload)
	}
	t.Logf("runs by process: %v", c.HGetAll(context.Background(), procs).Val())
	p.Stop(t)
}

// TestFleetConcurrencyCrash: a process killed (SIGKILL) while a job of
// the target runs holds its slot until the lease expires (2 s here); the
// other process's job of the target waits, parked, until then, and runs
// after.
func TestFleetConcurrencyCrash(t *testing.T) {
	const lease = 2 * time.Second
	c := needRedis(t)
	prefix := testPrefix(t, c)
	p := startSlotProc(t, prefix, 1, lease)
	q := slotQueue(t, c, prefix, 1, lease, false) // started once the helper runs the blocking job
	require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: -1}))
	p.Expect(t, func(l string) bool { return l == "RUNNING" }, "the helper to run the blocking job")
	require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: 1}))
	require.NoError(t, q.Start(context.Background()))
	require.Eventually(t, func() bool { st, _ := q.Target("x"); return st.Parked == 1 }, 10*time.Second, 10*time.Millisecond,
		"the job parked for the slot the helper holds")
	require.Zero(t, q.Stats().Done)
	killed := p.Kill(t)
	awaitRuns(t, c, prefix, 2)
	t.Logf("the parked job ran %s after the kill (lease %s)", time.Since(killed).Round(time.Millisecond), lease)
	require.Eventually(t, func() bool { return q.Stats().Done >= 1 }, 10*time.Second, 10*time.Millisecond)
}
