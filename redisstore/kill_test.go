package redisstore

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// ownRedis is a redis-server of the test's own, without persistence, on
// 127.0.0.1: a test may kill it (a shared server must never be killed)
// and start it again on the same port, empty.
type ownRedis struct {
	port int
	dir  string
	cmd  *exec.Cmd
}

// startOwnRedis starts a redis-server on a free port. Without the binary
// the test skips, except under CI=true, where it fails.
func startOwnRedis(t *testing.T) *ownRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := "redis-server not installed: " + err.Error()
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	r := &ownRedis{port: port, dir: t.TempDir()}
	r.start(t)
	t.Cleanup(func() {
		if r.cmd != nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	})
	return r
}

func (r *ownRedis) addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// start runs the server (again) on r's port and waits until it answers.
func (r *ownRedis) start(t *testing.T) {
	t.Helper()
	r.cmd = exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", r.dir, "--loglevel", "warning")
	require.NoError(t, r.cmd.Start())
	c := redis.NewClient(&redis.Options{Addr: r.addr(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	// A server just started answers once it listens: polled.
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err() == nil
	}, 10*time.Second, pollTick, "redis-server on %s to answer", r.addr())
}

// kill stops the server with SIGKILL, by its PID, and waits for it to exit.
func (r *ownRedis) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGKILL))
	_ = r.cmd.Wait()
	r.cmd = nil
}

// TestRedisKilledMidAdds kills a Redis without persistence while producers
// enqueue, keeps them enqueueing while it is down, starts it again (empty)
// on the same port and keeps them enqueueing after. The jobs that were in
// Redis at the kill are lost with it, as documented; every job whose
// Enqueue began after the kill and returned nil must run, once.
//
// What used to lose such jobs: the ID counter lives in Redis and restarts
// from zero with it, while the process still held IDs reserved from the
// old counter and used them for the jobs it took during the outage. Once
// the new counter reached those IDs, a new job got the ID of a job written
// back from the fallback; the add script, which treats an ID it has seen
// as a repeated call, answered "added before", and Enqueue returned nil
// for a job that was never stored.
func TestRedisKilledMidAdds(t *testing.T) {
	t.Parallel()
	srv := startOwnRedis(t)
	c := redis.NewClient(&redis.Options{
		Addr: srv.addr(), DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
		PoolTimeout: 500 * time.Millisecond, MaxRetries: 1,
	})
	t.Cleanup(func() { c.Close() })
	s, err := New[int](c, WithPrefix("kill"), WithHealthCheck(50*time.Millisecond, 300*time.Millisecond),
		WithFallback(100000), WithPollInterval(200*time.Millisecond))
	require.NoError(t, err)
	var mu sync.Mutex
	runs := map[int]int{}
	q, err := queue.NewWithStore(s, func(ctx context.Context, j queue.Job[int]) error {
		mu.Lock()
		runs[j.Payload]++
		mu.Unlock()
		return nil
	}, queue.WithWorkers(4, 4), queue.WithCapacity(100000, 0), queue.WithLogger(quietLogger()))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, q.Start(ctx))
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = q.Stop(sctx)
		_ = s.Close(sctx)
	}()

	// Four producers enqueue payloads 0, 1, 2, ..., each noting whether
	// its Enqueue began after the kill and whether it returned nil.
	var (
		next     atomic.Int64
		killed   atomic.Bool
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		accMu    sync.Mutex
		after    []int // accepted, Enqueue begun after the kill
		before   int   // accepted, Enqueue begun before the kill
		refused  []error
		accepted queuetest.Counter
	)
	for range 4 {
		wg.Go(func() {
			tick := time.NewTicker(200 * time.Microsecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				n := int(next.Add(1) - 1)
				late := killed.Load()
				err := q.Enqueue(ctx, queue.Job[int]{Payload: n})
				accMu.Lock()
				switch {
				case err != nil:
					refused = append(refused, err)
				case late:
					after = append(after, n)
				default:
					before++
				}
				accMu.Unlock()
				if err == nil {
					accepted.Add()
				}
			}
		})
	}
	stopProducers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopProducers()

	// 1100 jobs (IDs reserved 256 at a time: the last block is part used)
	// before the kill; then the outage lasts until the fallback took 600
	// jobs (the rest of the block, then IDs of its own).
	queuetest.Await(t, accepted.Reached(1100), 60*time.Second, "1100 jobs enqueued before the kill")
	srv.kill(t)
	killed.Store(true)
	atKill := accepted.Load()
	// The store switches to its fallback when a command or its health
	// check fails; it counts what the fallback took: polled.
	require.Eventually(t, func() bool { return s.nFallback.Load() >= 600 }, 60*time.Second, pollTick,
		"the fallback to take 600 jobs")
	srv.start(t)
	// The store notices Redis answers again by its health check: polled.
	require.Eventually(t, func() bool { return s.shards[0].healthy.Load() }, 30*time.Second, pollTick,
		"the store back on Redis")
	atBack := accepted.Load()
	// As many jobs again after Redis is back as before the kill, so that
	// the new ID counter passes the IDs used before and during the outage.
	queuetest.Await(t, accepted.Reached(atBack+2*atKill), 60*time.Second, "jobs enqueued after Redis came back")
	stopProducers()
	accMu.Lock()
	defer accMu.Unlock()
	require.Empty(t, refused, "Enqueue errors (the fallback is big enough for the outage)")
	t.Logf("accepted: %d before the kill, %d after it (%d by the time Redis was back); fallback took %d, wrote back %d",
		before, len(after), atBack-atKill, s.nFallback.Load(), s.nWrittenBack.Load())

	// Every job accepted after the kill runs. Runs are counted by the
	// handler, with no event for "all of them": polled.
	missing := func() []int {
		mu.Lock()
		defer mu.Unlock()
		var m []int
		for _, n := range after {
			if runs[n] == 0 {
				m = append(m, n)
			}
		}
		return m
	}
	if !assertEventually(60*time.Second, func() bool { return len(missing()) == 0 }) {
		m := missing()
		t.Fatalf("%d of the %d jobs accepted after the kill never ran, e.g. %v", len(m), len(after), m[:min(len(m), 10)])
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range after {
		if runs[n] != 1 {
			t.Errorf("job %d, accepted after the kill, ran %d times", n, runs[n])
		}
	}
	lost := 0
	for n := range before + len(after) {
		if runs[n] == 0 {
			lost++
		}
	}
	t.Logf("%d jobs accepted before the kill were lost with Redis", lost)
}

// assertEventually polls cond every pollTick until it holds or within
// passes, and reports whether it held.
func assertEventually(within time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(pollTick)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
	return true
}

// TestAddAfterRedisLostTheCounter: Redis loses the ID counter (here its
// keys are deleted, as a restart without persistence does) while a
// process still holds a block of IDs reserved from it; another process
// then reserves the same numbers again from the new counter. The first
// process's next job must still be stored, under an ID of a new block:
// it used to be reported added ("seen" for the other process's job of
// the same ID) and never stored.
func TestAddAfterRedisLostTheCounter(t *testing.T) {
	c := needRedis(t)
	prefix := testPrefix(t, c)
	a := openStore(t, c, nil, WithPrefix(prefix))
	b := openStore(t, c, nil, WithPrefix(prefix))
	ctx := context.Background()
	first, err := a.Add(ctx, queue.Job[int]{Payload: 1}) // a reserves IDs 1..256
	require.NoError(t, err)
	j := claimWithin(t, a, 5*time.Second)
	require.NoError(t, a.Complete(ctx, j))
	deleteKeys(c, "{"+prefix+":*")
	var bIDs []int64
	for i := range 3 {
		added, err := b.Add(ctx, queue.Job[int]{Payload: 100 + i}) // b reserves 1..256 again
		require.NoError(t, err)
		bIDs = append(bIDs, added.ID)
	}
	added, err := a.Add(ctx, queue.Job[int]{Payload: 2})
	require.NoError(t, err)
	require.NotContains(t, bIDs, added.ID, "a's job shares an ID with one of b's (b's IDs %v, a's first %d)", bIDs, first.ID)
	got := map[int]bool{}
	for range 4 {
		j := claimWithin(t, b, 5*time.Second)
		got[j.Payload] = true
		require.NoError(t, b.Complete(ctx, j))
	}
	require.Equal(t, map[int]bool{2: true, 100: true, 101: true, 102: true}, got)
}
