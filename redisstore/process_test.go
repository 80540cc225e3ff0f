package redisstore

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storetest"
)

// The multi-process tests re-run this test binary as helper processes
// (TestHelperProcess) that work a queue through the queue engine.

const helperEnv = "REDISSTORE_HELPER"

// TestHelperProcess is not a test: it is the body of a helper process,
// selected by REDISSTORE_HELPER=mode. Modes:
//
//	work    run jobs: RPUSH "payload:attempt:pid:unixnano" to the ran list
//	        (the time the run began), then take REDISSTORE_WORK (a
//	        duration, default none) and succeed
//	hang    claim jobs: RPUSH the payload to the claimed list, never return
//	periodic run the periodic job "tick" every second: RPUSH
//	        "attempt pid key" to the periodic list
//	leader  run no jobs (a store without a queue), only take part in
//	        leader election and the janitor
//
// It prints "ready <owner>" once started and, in mode leader, "leader"
// when it leads.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process of the multi-process tests")
	}
	prefix := os.Getenv("REDISSTORE_PREFIX")
	c := redis.NewClient(&redis.Options{Addr: redisAddr()})
	lease, _ := time.ParseDuration(os.Getenv("REDISSTORE_LEASE"))
	work, _ := time.ParseDuration(os.Getenv("REDISSTORE_WORK"))
	// REDISSTORE_JANITOR sets the janitor interval, 100ms unless given.
	janitor, err := time.ParseDuration(os.Getenv("REDISSTORE_JANITOR"))
	if err != nil {
		janitor = 100 * time.Millisecond
	}
	s, err := New[int](c, WithPrefix(prefix), WithLeaseTTL(lease), WithJanitorInterval(janitor))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	ctx := context.Background()
	tag := "{" + prefix + ":q}"
	pid := os.Getpid()
	handler := func(ctx context.Context, j queue.Job[int]) error {
		switch mode {
		case "work":
			began := time.Now().UnixNano()
			if err := c.RPush(ctx, tag+":test:ran", fmt.Sprintf("%d:%d:%d:%d", j.Payload, j.Attempt, pid, began)).Err(); err != nil {
				return err
			}
			if work > 0 {
				t := time.NewTimer(work) // the job's work
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		case "periodic":
			return c.RPush(ctx, tag+":test:periodic", fmt.Sprintf("%d %d %s", j.Attempt, pid, j.Key)).Err()
		case "hang":
			c.RPush(context.Background(), tag+":test:claimed", j.Payload)
			select {}
		}
		return nil
	}
	if mode == "admit" {
		admitHelper(t, c, s, tag)
		return
	}
	if mode == "leader" {
		// The store alone, without a queue: it claims no job.
		cfg := storetest.Config("q", 10000, nil, func(queue.Event) {})
		cfg.Logger = quietLogger()
		if err := s.Init(cfg); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		if err := s.Start(ctx); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	} else {
		q, err := queue.NewWithStore(s, handler, queue.WithName("q"), queue.WithWorkers(4, 4), queue.WithLogger(quietLogger()))
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		if mode == "periodic" {
			if err := q.Periodic("tick", queue.Every(time.Second), queue.Job[int]{}, queue.PeriodicOptions{CatchUp: true}); err != nil {
				fmt.Println("error", err)
				os.Exit(2)
			}
		}
		if err := q.Start(ctx); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	fmt.Println("ready", s.owner)
	if mode == "leader" {
		// Leadership is the leader key in Redis, taken with SET NX once
		// no other process holds it: polled. The parent waits 15s.
		require.Eventually(t, s.lead.Leading, time.Minute, pollTick, "leadership")
		fmt.Println("leader")
	}
	select {}
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	lines chan string
	owner string
}

// startHelper starts a helper process in mode and waits for it to be ready.
// env adds variables (REDISSTORE_WORK, REDISSTORE_JANITOR).
func startHelper(t *testing.T, mode, prefix string, lease time.Duration, env ...string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, "REDISSTORE_PREFIX="+prefix,
		"REDISSTORE_LEASE="+lease.String(), "QUEUE_REDIS_ADDR="+redisAddr())
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, lines: make(chan string, 16)}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	l := h.expect(t, "ready", 30*time.Second)
	h.owner = strings.TrimPrefix(l, "ready ")
	return h
}

// expect waits for a line of the helper's output starting with prefix.
func (h *helper) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	timeout := time.After(within)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper exited before printing %q", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-timeout:
			t.Fatalf("helper printed no %q within %v", prefix, within)
		}
	}
}

func (h *helper) kill(t *testing.T) {
	t.Helper()
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = h.cmd.Wait()
}

// popN takes n entries from list, waiting with BLPOP (no polling).
func popN(t *testing.T, c *redis.Client, list string, n int, within time.Duration) []string {
	t.Helper()
	var out []string
	deadline := time.Now().Add(within)
	for len(out) < n {
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%s: got %d of %d entries within %v", list, len(out), n, within)
		}
		res, err := c.BLPop(context.Background(), max(left, time.Second), list).Result()
		if err != nil {
			t.Fatalf("%s: got %d of %d entries within %v: %v", list, len(out), n, within, err)
		}
		out = append(out, res[1])
	}
	return out
}

// leaderStore opens a store (no workers) and waits until it leads. It
// rescues expired leases every 100 ms, as every process does at its
// janitor interval, leader or not.
func leaderStore(t *testing.T, c *redis.Client, prefix string, lease time.Duration) *Store[int] {
	t.Helper()
	s := openStoreCfg(t, c, nil, func(cfg *storekit.Config) { cfg.Name = "q" },
		WithPrefix(prefix), WithLeaseTTL(lease), WithJanitorInterval(100*time.Millisecond))
	// Leadership is the leader key in Redis, taken with SET NX: polled.
	require.Eventually(t, s.lead.Leading, 10*time.Second, pollTick, "the test's store to become leader")
	return s
}

// TestKilledWorkerJobsRunAgain: a worker process killed with SIGKILL while
// running jobs; its jobs run again, in another process, once their leases
// expire.
func TestKilledWorkerJobsRunAgain(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	const lease = 2 * time.Second
	s := leaderStore(t, c, prefix, lease)
	ctx := context.Background()
	const jobs = 20
	for i := range jobs {
		if _, err := s.Add(ctx, queue.Job[int]{Payload: i, Key: "k" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	tag := "{" + prefix + ":q}"
	hang := startHelper(t, "hang", prefix, lease)
	hung := popN(t, c, tag+":test:claimed", 4, 30*time.Second)
	hang.kill(t)
	killed := time.Now()

	startHelper(t, "work", prefix, lease)
	ran := popN(t, c, tag+":test:ran", jobs, 60*time.Second)
	count := map[int]int{}
	attempt := map[int]int{}
	for _, r := range ran {
		f := strings.Split(r, ":")
		p, _ := strconv.Atoi(f[0])
		a, _ := strconv.Atoi(f[1])
		count[p]++
		attempt[p] = a
	}
	for i := range jobs {
		if count[i] != 1 {
			t.Errorf("job %d completed %d times", i, count[i])
		}
	}
	for _, h := range hung {
		p, _ := strconv.Atoi(h)
		if attempt[p] != 2 {
			t.Errorf("job %d of the killed worker ran again at attempt %d, want 2", p, attempt[p])
		}
	}
	again := time.Since(killed)
	t.Logf("the killed worker's %d jobs ran again %v after SIGKILL (lease %v)", len(hung), again.Round(time.Millisecond), lease)
	if again > lease+2*time.Second {
		t.Errorf("jobs ran again %v after the kill, want within lease %v + 2s", again, lease)
	}
	if n, _ := c.LLen(ctx, tag+":test:ran").Result(); n != 0 {
		t.Errorf("%d more runs after every job completed", n)
	}
}

// TestTwoProcessesEachJobOnce: two worker processes drain one queue; each
// job completes exactly once and both take part.
func TestTwoProcessesEachJobOnce(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	s := leaderStore(t, c, prefix, 5*time.Second)
	ctx := context.Background()
	const jobs = 2000
	for i := range jobs {
		if _, err := s.Add(ctx, queue.Job[int]{Payload: i}); err != nil {
			t.Fatal(err)
		}
	}
	tag := "{" + prefix + ":q}"
	startHelper(t, "work", prefix, 5*time.Second)
	startHelper(t, "work", prefix, 5*time.Second)
	ran := popN(t, c, tag+":test:ran", jobs, 90*time.Second)
	count := map[int]int{}
	pids := map[string]int{}
	for _, r := range ran {
		f := strings.Split(r, ":")
		p, _ := strconv.Atoi(f[0])
		count[p]++
		pids[f[2]]++
	}
	for i := range jobs {
		if count[i] != 1 {
			t.Errorf("job %d completed %d times", i, count[i])
		}
	}
	if len(pids) != 2 {
		t.Errorf("jobs ran in %d processes (%v), want 2", len(pids), pids)
	}
	t.Logf("jobs per process: %v", pids)
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 0 || st.Scheduled != 0 {
		t.Errorf("Stats after the run: %+v", st)
	}
}

// TestLeaderFailover: the leader process is killed; a standby takes over
// within the leader TTL (10 s by default) plus one second.
func TestLeaderFailover(t *testing.T) {
	c := needRedis(t)
	t.Parallel()
	prefix := testPrefix(t, c)
	lead := startHelper(t, "leader", prefix, DefaultLeaseTTL)
	lead.expect(t, "leader", 15*time.Second)
	s := openStoreCfg(t, c, nil, func(cfg *storekit.Config) { cfg.Name = "q" }, WithPrefix(prefix))
	ctx := context.Background()
	st, err := s.Stats(ctx)
	if err != nil || st.Leader {
		t.Fatalf("standby Stats = %+v, %v; want not leader", st, err)
	}
	key := "{" + prefix + ":q}:leader"
	if v, _ := c.Get(ctx, key).Result(); v != lead.owner {
		t.Fatalf("leader key holds %q, want the helper %q", v, lead.owner)
	}
	pttl, _ := c.PTTL(ctx, key).Result()
	lead.kill(t)
	killed := time.Now()
	// The dead leader's key expires in Redis after its TTL; the standby
	// takes it then: polled.
	require.Eventually(t, func() bool {
		st, err := s.Stats(ctx)
		return err == nil && st.Leader
	}, DefaultLeaderTTL+2*time.Second, pollTick, "failover after the leader died")
	took := time.Since(killed)
	t.Logf("failover %v after SIGKILL (leader key had %v left; TTL %v)", took.Round(time.Millisecond), pttl, DefaultLeaderTTL)
	if took > DefaultLeaderTTL+time.Second {
		t.Errorf("failover took %v, want within TTL %v + 1s", took, DefaultLeaderTTL)
	}
	if v, _ := c.Get(ctx, key).Result(); v != s.owner {
		t.Errorf("leader key holds %q after failover, want %q", v, s.owner)
	}
}

// TestKilledJobsRunAgainWithinLeasePlus2s: every job of a worker process
// killed with SIGKILL runs again within the lease TTL plus 2 s, whether
// the leader lives (case "leader alive": the killed worker alone dies,
// and a backlog of other jobs waits at the time) or dies with the worker
// (case "leader killed too"). Every process rescues expired leases, on
// its own tick, with the default janitor interval; a rescued job goes to
// the head of its ready list, where it was when it was claimed. Rescue
// used to be the leader's alone: with the leader killed too, the jobs
// waited for a new leader (the leader TTL, 10 s, more), and a rescued job
// went to the tail of its list, behind a backlog.
func TestKilledJobsRunAgainWithinLeasePlus2s(t *testing.T) {
	c := needRedis(t)
	const lease = 2 * time.Second
	janitor := "REDISSTORE_JANITOR=" + DefaultJanitorInterval.String()
	for _, killLeader := range []bool{false, true} {
		name := "leader alive"
		if killLeader {
			name = "leader killed too"
		}
		t.Run(name, func(t *testing.T) {
			prefix := testPrefix(t, c)
			tag := "{" + prefix + ":q}"
			ctx := context.Background()
			lead := startHelper(t, "leader", prefix, lease, janitor)
			lead.expect(t, "leader", 15*time.Second)
			// The test's store adds jobs; it stands by for leadership.
			s := openStoreCfg(t, c, nil, func(cfg *storekit.Config) { cfg.Name = "q" },
				WithPrefix(prefix), WithLeaseTTL(lease))
			const hung = 4
			for i := range hung {
				_, err := s.Add(ctx, queue.Job[int]{Payload: i, Key: "k" + strconv.Itoa(i)})
				require.NoError(t, err)
			}
			hang := startHelper(t, "hang", prefix, lease, janitor)
			popN(t, c, tag+":test:claimed", hung, 30*time.Second)
			startHelper(t, "work", prefix, lease, janitor, "REDISSTORE_WORK=10ms")
			hang.kill(t)
			if killLeader {
				lead.kill(t)
			}
			killed := time.Now()
			backlog := 0
			if !killLeader {
				// 2000 jobs of 10 ms for 4 workers: 5 s of work, more
				// than the lease.
				backlog = 2000
				for i := range backlog {
					_, err := s.Add(ctx, queue.Job[int]{Payload: 1000 + i})
					require.NoError(t, err)
				}
			}
			// The runs of the killed worker's jobs, each with the time it
			// began, from the ran list (BLPOP: no polling).
			again := map[int]time.Duration{}
			deadline := time.Now().Add(lease + 30*time.Second)
			for len(again) < hung {
				left := time.Until(deadline)
				require.Positive(t, left, "the killed worker's jobs ran again: %v of %d", again, hung)
				res, err := c.BLPop(ctx, max(left, time.Second), tag+":test:ran").Result()
				require.NoError(t, err, "the killed worker's jobs ran again: %v of %d", again, hung)
				f := strings.Split(res[1], ":")
				p, _ := strconv.Atoi(f[0])
				a, _ := strconv.Atoi(f[1])
				began, _ := strconv.ParseInt(f[3], 10, 64)
				if p < hung {
					require.Equal(t, 2, a, "attempt of the killed worker's job %d", p)
					require.NotContains(t, again, p, "job %d ran twice after the kill", p)
					again[p] = time.Unix(0, began).Sub(killed)
				}
			}
			var worst time.Duration
			for _, d := range again {
				worst = max(worst, d)
			}
			t.Logf("%s: the killed worker's %d jobs ran again at most %v after SIGKILL (lease %v, backlog %d jobs): %v",
				name, hung, worst.Round(time.Millisecond), lease, backlog, again)
			if worst > lease+2*time.Second {
				t.Errorf("jobs ran again %v after the kill, want within the lease %v + 2s", worst, lease)
			}
		})
	}
}
