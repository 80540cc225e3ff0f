package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storetest/fleettest"
)

// The fleet concurrency tests run a queue with a per-target limit of 1 in
// this process and another in a helper process (TestFleetConcurrencyHelper,
// this test binary re-run), on one prefix. Each job's handler records in
// Redis that it runs: INCR of a counter of the target's running jobs when
// it starts (a value above 1 is counted as an overlap), DECR when it ends,
// and a count of runs per job and per process. A job with payload -1
// blocks in the helper until the process is killed.

const slotsEnv = "REDISSTORE_SLOTS"

// probeKeys are the probe's keys under prefix.
func probeKeys(prefix string) (running, overlaps, runs, procs string) {
	tag := "{" + prefix + ":probe}"
	return tag + ":running", tag + ":overlaps", tag + ":runs", tag + ":procs"
}

// probeOrder is the list of the runs, in the order they started: each
// "<process> <jobs parked in it>".
func probeOrder(prefix string) string { return "{" + prefix + ":probe}:order" }

// slotHandler records each run under prefix, as proc, with the jobs of
// its target that parked reports; a run takes work.
func slotHandler(c redis.UniversalClient, prefix, proc string, block bool, work time.Duration, parked func() int) queue.Handler[int] {
	running, overlaps, runs, procs := probeKeys(prefix)
	order := probeOrder(prefix)
	return func(ctx context.Context, j queue.Job[int]) error {
		bg := context.WithoutCancel(ctx)
		n, err := c.Incr(bg, running).Result()
		if err != nil {
			return err
		}
		if n > 1 {
			c.Incr(bg, overlaps)
		}
		if n > 2 {
			c.Incr(bg, overlaps+"2")
		}
		c.HIncrBy(bg, runs, strconv.Itoa(j.Payload), 1)
		c.HIncrBy(bg, procs, proc, 1)
		c.RPush(bg, order, fmt.Sprint(proc, " ", parked()))
		if j.Payload == -1 && block {
			fmt.Println("RUNNING")
			<-make(chan struct{}) // until the process is killed
		}
		time.Sleep(work) // the job's work: long enough for two runs to overlap
		return c.Decr(bg, running).Err()
	}
}

// TestFleetConcurrencyHelper is the helper process of the fleet
// concurrency tests; it does nothing in a normal test run. Its
// environment gives the prefix, its name, workers, limit, lease and the
// work of a job.
func TestFleetConcurrencyHelper(t *testing.T) {
	prefix := os.Getenv(slotsEnv)
	if prefix == "" {
		t.Skip("helper process of the fleet concurrency tests")
	}
	name := os.Getenv(slotsEnv + "_NAME")
	workers, _ := strconv.Atoi(os.Getenv(slotsEnv + "_WORKERS"))
	limit, _ := strconv.Atoi(os.Getenv(slotsEnv + "_LIMIT"))
	lease, _ := time.ParseDuration(os.Getenv(slotsEnv + "_LEASE"))
	work, _ := time.ParseDuration(os.Getenv(slotsEnv + "_WORK"))
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	defer c.Close()
	s, err := New[int](c, WithPrefix(prefix), WithWorkerID(name), WithLeaseTTL(lease))
	require.NoError(t, err)
	var q *queue.Queue[int]
	q, err = queue.NewWithStore(s, slotHandler(c, prefix, name, true, work, fleettest.Parked(&q, "x")), fleettest.SlotOptions(workers, limit)...)
	require.NoError(t, err)
	_ = fleettest.RunHelper(t, q, nil) // until the parent closes stdin
}

// slotProc is a process of the fleet concurrency tests: its name, its
// workers, the target's limit, its lease and the work of a job.
type slotProc struct {
	name           string
	workers, limit int
	lease, work    time.Duration
}

// defaultSlotProc is the helper of the limit and crash tests: a limit of
// 1, jobs of 2 ms.
func defaultSlotProc(workers int, lease time.Duration) slotProc {
	return slotProc{name: "helper", workers: workers, limit: 1, lease: lease, work: 2 * time.Millisecond}
}

// startSlotProc starts a helper process as sp on prefix.
func startSlotProc(t *testing.T, prefix string, sp slotProc) *fleettest.Proc {
	t.Helper()
	return startHelperProc(t, "TestFleetConcurrencyHelper", slotsEnv+"="+prefix, slotsEnv+"_NAME="+sp.name,
		fmt.Sprint(slotsEnv, "_WORKERS=", sp.workers), fmt.Sprint(slotsEnv, "_LIMIT=", sp.limit),
		fmt.Sprint(slotsEnv, "_LEASE=", sp.lease), fmt.Sprint(slotsEnv, "_WORK=", sp.work))
}

// slotQueue makes this process's queue on prefix, as sp (named "parent"),
// started if start.
func slotQueue(t *testing.T, c redis.UniversalClient, prefix string, sp slotProc, start bool) *queue.Queue[int] {
	t.Helper()
	s, err := New[int](c, WithPrefix(prefix), WithWorkerID("parent"), WithLeaseTTL(sp.lease))
	require.NoError(t, err)
	var q *queue.Queue[int]
	q, err = queue.NewWithStore(s, slotHandler(c, prefix, "parent", false, sp.work, fleettest.Parked(&q, "x")), fleettest.SlotOptions(sp.workers, sp.limit)...)
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
	sp := defaultSlotProc(4, DefaultLeaseTTL)
	p := startSlotProc(t, prefix, sp)
	q := slotQueue(t, c, prefix, sp, true)
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
	sp := defaultSlotProc(1, lease)
	p := startSlotProc(t, prefix, sp)
	q := slotQueue(t, c, prefix, sp, false) // started once the helper runs the blocking job
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

// TestFleetConcurrencyFair: three processes, a limit of 2 on one target,
// 4 workers each, and 90 jobs of 20 ms enqueued at once, which the three
// claim and park: the slots go round the processes that wait, so that
// none waits for the others' backlogs (before, a process holding a slot
// handed it to its own next parked job, and one that held none ran its
// jobs only once the others had run all of theirs). The line is FIFO by
// process and each process gets a slot in turn; a job waits for at most
// one slot per process per job parked before it in its own process. So
// each process runs, in the first half of the runs, at least 20 % of its
// own jobs (a fair share gives each about half; a starved process none),
// no process with jobs parked waits for more than fairMaxWait runs of
// the others in a row, and the limit holds.
func TestFleetConcurrencyFair(t *testing.T) {
	// A process in the line gets a slot once the (at most 2) processes
	// ahead of it have had one each; the runs the others hand on before
	// they learn that it waits come on top (3 to 9 seen in a row, in
	// all; a starved process waits for a holder's whole backlog).
	const fairMaxWait = 24
	c := needRedis(t)
	prefix := testPrefix(t, c)
	sp := slotProc{name: "p1", workers: 4, limit: 2, lease: DefaultLeaseTTL, work: 20 * time.Millisecond}
	p1 := startSlotProc(t, prefix, sp)
	sp.name = "p2"
	p2 := startSlotProc(t, prefix, sp)
	q := slotQueue(t, c, prefix, sp, true)
	const n = 90
	for i := range n {
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Target: "x", Payload: i}))
	}
	awaitRuns(t, c, prefix, n)
	_, overlaps, runs, _ := probeKeys(prefix)
	// The probe counts a run that starts while another runs as an
	// overlap: with a limit of 2, a run that starts while 2 run.
	require.Zero(t, c.Get(context.Background(), overlaps+"2").Val(), "runs of the target that began while 2 ran")
	got := c.HGetAll(context.Background(), runs).Val()
	require.Len(t, got, n, "every job ran")
	for payload, count := range got {
		require.Equal(t, "1", count, "job %s runs once", payload)
	}
	var order []fleettest.SlotRun
	for _, l := range c.LRange(context.Background(), probeOrder(prefix), 0, -1).Val() {
		var r fleettest.SlotRun
		_, err := fmt.Sscan(l, &r.Proc, &r.Parked)
		require.NoError(t, err, "run %q", l)
		order = append(order, r)
	}
	fleettest.CheckFairSlots(t, order, fairMaxWait)
	p1.Stop(t)
	p2.Stop(t)
}
