package queue_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/queuetest"
)

func targetStatus[T any](t *testing.T, q *queue.Queue[T], name string) queue.TargetStatus {
	t.Helper()
	st, ok := q.Target(name)
	require.True(t, ok, "target %q unknown", name)
	return st
}

func TestSuspensionExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop, queue.WithSuspend(5*time.Minute, nil))
		start := time.Now()
		require.NoError(t, q.Suspend("a", 0), "0: the configured duration")
		require.NoError(t, q.Suspend("b", time.Minute))
		assert.Equal(t, []string{"c"}, q.Fanout("k", []string{"a", "b", "c"}))
		assert.Equal(t, start.Add(5*time.Minute), targetStatus(t, q, "a").SuspendedUntil)
		assert.False(t, targetStatus(t, q, "a").Disabled)
		require.Len(t, q.Stats().Targets, 2)

		advance(time.Minute)
		assert.ElementsMatch(t, []string{"b", "c"}, q.Fanout("k", []string{"a", "b", "c"}))
		assert.True(t, targetStatus(t, q, "b").SuspendedUntil.IsZero())
		advance(4 * time.Minute)
		assert.ElementsMatch(t, []string{"a", "b", "c"}, q.Fanout("k", []string{"a", "b", "c"}), "expired by itself")
		assert.Empty(t, q.Stats().Targets)
	})
}

func TestTargetNamesAndResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop)
		err := q.Resume("never-seen")
		require.ErrorIs(t, err, queue.ErrUnknownTarget)
		assert.Contains(t, err.Error(), "never-seen")
		assert.ErrorIs(t, q.Suspend("", time.Second), queue.ErrUnknownTarget)
		assert.ErrorIs(t, q.Disable("", nil), queue.ErrUnknownTarget)
		assert.Error(t, q.Suspend("a", -time.Second), "negative duration")
		_, ok := q.Target("never-seen")
		assert.False(t, ok)

		require.NoError(t, q.Disable("a", errors.New("retry in: never")))
		require.NoError(t, q.Suspend("b", time.Hour))
		st := targetStatus(t, q, "a")
		assert.True(t, st.Disabled)
		assert.Equal(t, "retry in: never", st.Reason)
		assert.Equal(t, time.Now(), st.DisabledAt)
		assert.Empty(t, q.Fanout("k", []string{"a", "b"}))

		require.NoError(t, q.Resume("a"))
		require.NoError(t, q.Resume("b"))
		assert.ElementsMatch(t, []string{"a", "b"}, q.Fanout("k", []string{"a", "b"}))
		st = targetStatus(t, q, "a")
		assert.False(t, st.Disabled)
		assert.Empty(t, st.Reason)
		assert.Empty(t, q.Stats().Targets)
	})
}

func TestDisableReasonIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop)
		long := make([]byte, 10000)
		for i := range long {
			long[i] = 'x'
		}
		require.NoError(t, q.Disable("a", errors.New(string(long))))
		assert.LessOrEqual(t, len(targetStatus(t, q, "a").Reason), 256)
	})
}

func Test429SuspendsButDoesNotDisable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(_ context.Context, job queue.Job[int]) error {
			if len(rec.all()) == 1 {
				return queue.ClassifyHTTP(429, nil)
			}
			return nil
		}), queue.WithDisableAfter(1), queue.WithWorkers(1, 1))
		start := time.Now()
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k", Target: "a"}))
		synctest.Wait()
		st := targetStatus(t, q, "a")
		assert.False(t, st.Disabled, "an overload does not disable, even with WithDisableAfter(1)")
		assert.Equal(t, start.Add(300*time.Second), st.SuspendedUntil, "default suspension 300s")
		assert.Empty(t, q.Fanout("x", []string{"a"}))
		assert.Equal(t, 1, q.Stats().Store.Scheduled, "the job waits for the suspension to end")

		advance(300 * time.Second)
		runs := rec.all()
		require.Len(t, runs, 2)
		assert.Equal(t, 300*time.Second, runs[1].at.Sub(start))
		st2 := q.Stats()
		assert.Equal(t, uint64(1), st2.Done)
		assert.Zero(t, st2.Dead)
		balance(t, st2)
	})
}

func TestOverloadUsesAnAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		var dead atomic.Int32
		q := startQueue(t, rec.handler(func(context.Context, queue.Job[int]) error {
			return queue.Overloaded(errors.New("HTTP 429"))
		}), queue.WithWorkers(1, 1), queue.WithSuspend(time.Minute, nil))
		q.OnDead(func(_ context.Context, job queue.Job[int], err error) {
			assert.Equal(t, 3, job.Attempt)
			assert.ErrorContains(t, err, "429")
			dead.Add(1)
		})
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k", Target: "a"}))
		synctest.Wait()
		for range 2 {
			advance(time.Minute)
		}
		runs := rec.all()
		require.Len(t, runs, 3, "one run per attempt (default 3), each after the suspension")
		for i, r := range runs {
			assert.Equal(t, i+1, r.job.Attempt)
		}
		advance(time.Hour)
		assert.Len(t, rec.all(), 3, "dead-lettered: not run again")
		assert.Equal(t, int32(1), dead.Load())
		st := q.Stats()
		assert.Equal(t, uint64(2), st.Retried)
		assert.Equal(t, uint64(1), st.Dead)
		assert.Zero(t, st.Store.PendingKeys, "the key is released")
		balance(t, st)
	})
}

func TestJobsForSuspendedTargetWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[string]
		q := newQueue(t, rec.handler(nil), queue.WithWorkers(1, 1))
		require.NoError(t, q.Suspend("a", time.Minute))
		start := time.Now()
		for i := range 3 {
			require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: fmt.Sprint("a", i), Key: fmt.Sprint("a", i), Target: "a"}))
		}
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "b", Target: "b"}))
		require.NoError(t, q.Start(bg))
		synctest.Wait()
		assert.Equal(t, []string{"b"}, rec.payloads())
		st := q.Stats()
		assert.Equal(t, uint64(3), st.Deferred, "deferred, and counted")
		assert.Equal(t, 3, st.Store.Scheduled)
		assert.Equal(t, 3, st.Store.PendingKeys, "they keep their keys")
		balance(t, st)

		advance(time.Minute)
		assert.Equal(t, []string{"b", "a0", "a1", "a2"}, rec.payloads(), "run after the suspension, in order")
		for _, r := range rec.all()[1:] {
			assert.Equal(t, time.Minute, r.at.Sub(start))
			assert.Equal(t, 1, r.job.Attempt, "waiting does not use up an attempt")
		}
		balance(t, q.Stats())
	})
}

func TestJobsForDisabledTargetCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[string]
		q := newQueue(t, rec.handler(nil), queue.WithWorkers(1, 1))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "a1", Key: "a1", Target: "a"}))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "b", Target: "b"}))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "a2", Key: "a2", Target: "a"}, time.Minute))
		require.NoError(t, q.Disable("a", errors.New("HTTP 404")))
		require.NoError(t, q.Start(bg))
		advance(time.Minute)
		assert.Equal(t, []string{"b"}, rec.payloads())
		st := q.Stats()
		assert.Equal(t, uint64(2), st.Cancelled)
		assert.Zero(t, st.Store.PendingKeys, "their keys are released")
		balance(t, st)

		require.NoError(t, q.Resume("a"))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "a3", Key: "a1", Target: "a"}))
		synctest.Wait()
		assert.Equal(t, []string{"b", "a3"}, rec.payloads(), "Resume lets jobs run again")
	})
}

func TestDNSErrorDisablesAtOnce(t *testing.T) {
	dns := &net.DNSError{Err: "no such host", Name: "tracker.invalid", IsNotFound: true}
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"classified", queue.ClassifyHTTP(0, dns)},
		{"raw", fmt.Errorf("announce: %w", dns)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rec recorder[int]
				dead := make(chan error, 1)
				q := startQueue(t, rec.handler(func(context.Context, queue.Job[int]) error { return tc.err }),
					queue.WithDisableAfter(100), queue.WithRetry(10, 0, 0), queue.WithWorkers(1, 1))
				q.OnDead(func(_ context.Context, _ queue.Job[int], err error) { dead <- err })
				require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Target: "a"}))
				require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 2, Target: "a"}))
				advance(time.Hour)
				assert.Equal(t, []int{1}, rec.payloads(), "one run: no retry, and the next job is cancelled")
				st := targetStatus(t, q, "a")
				assert.True(t, st.Disabled)
				assert.Contains(t, st.Reason, "no such host")
				assert.ErrorIs(t, <-dead, dns)
				s := q.Stats()
				assert.Equal(t, uint64(1), s.Dead)
				assert.Equal(t, uint64(1), s.Cancelled)
				balance(t, s)
			})
		})
	}
}

func Test404DisablesWithReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := startQueue(t, func(context.Context, queue.Job[int]) error { return queue.ClassifyHTTP(404, nil) })
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Target: "a"}))
		synctest.Wait()
		st := targetStatus(t, q, "a")
		assert.True(t, st.Disabled)
		assert.Contains(t, st.Reason, "404")
		assert.Contains(t, st.Reason, "Not Found")
		assert.Equal(t, time.Now(), st.DisabledAt)
		ts := q.Stats().Targets
		require.Len(t, ts, 1)
		assert.Equal(t, "a", ts[0].Name)
		assert.True(t, ts[0].Disabled)
		assert.Equal(t, uint64(1), q.Stats().Dead)
	})
}

func TestConsecutiveFailuresDisable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[string]
		q := newQueue(t, rec.handler(func(_ context.Context, job queue.Job[string]) error {
			if job.Payload == "ok" {
				return nil
			}
			return errors.New("HTTP 500")
		}), queue.WithDisableAfter(3), queue.WithRetry(1, 0, 0), queue.WithWorkers(1, 1))
		for _, p := range []string{"fail", "fail", "ok", "fail", "fail"} {
			require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: p, Target: "a"}))
		}
		require.NoError(t, q.Start(bg))
		synctest.Wait()
		st := targetStatus(t, q, "a")
		assert.False(t, st.Disabled, "a success in between reset the count")
		assert.Equal(t, 2, st.Failures)

		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "fail", Target: "a"}))
		synctest.Wait()
		st = targetStatus(t, q, "a")
		assert.True(t, st.Disabled, "the third consecutive failure disables")
		assert.Contains(t, st.Reason, "3 consecutive failures")
		assert.Contains(t, st.Reason, "HTTP 500")
		assert.Equal(t, 3, st.Failures)

		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "ok", Target: "a"}))
		synctest.Wait()
		assert.Len(t, rec.all(), 6, "jobs of the disabled target do not run")
		s := q.Stats()
		assert.Equal(t, uint64(1), s.Cancelled)
		balance(t, s)
	})
}

func TestCircuitBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failing atomic.Bool
		failing.Store(true)
		probe := make(gate)
		var probing atomic.Bool
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, _ queue.Job[int]) error {
			if probing.Load() {
				if err := probe.wait(ctx); err != nil {
					return err
				}
			}
			if failing.Load() {
				return errors.New("HTTP 503")
			}
			return nil
		}), queue.WithCircuitBreaker(2, 30*time.Second, 1), queue.WithRetry(100, time.Second, time.Second), queue.WithWorkers(2, 2))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Target: "a"}))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 2, Target: "a"}))
		advance(2 * time.Second)

		assert.Equal(t, 2, rec.len(), "two failures opened the breaker; retries wait")
		assert.Equal(t, "open", targetStatus(t, q, "a").Breaker)
		assert.Empty(t, q.Fanout("k", []string{"a"}), "fan-out skips an open target")
		assert.False(t, targetStatus(t, q, "a").Disabled)
		assert.Equal(t, uint64(2), q.Stats().Deferred)

		// The cool-down ends at 30s: half-open, one probe at a time.
		probing.Store(true)
		failing.Store(false)
		advance(30*time.Second - 2*time.Second)
		assert.Equal(t, 3, rec.len(), "only the probe runs")
		st := targetStatus(t, q, "a")
		assert.Equal(t, "half-open", st.Breaker)
		assert.Equal(t, 1, st.Running, "the probe")
		assert.Equal(t, 1, st.Parked, "the other job waits for the probe's outcome")
		assert.Equal(t, 1, q.Stats().Running, "the probe runs")
		assert.Equal(t, 1, q.Stats().Depth, "the parked job waits to run, as a ready job does")

		probing.Store(false)
		close(probe) // the probe succeeds: closed
		synctest.Wait()
		assert.Equal(t, "closed", targetStatus(t, q, "a").Breaker)
		assert.Equal(t, 4, rec.len(), "the parked job runs as soon as the probe closes the breaker")
		assert.Equal(t, rec.all()[2].at, rec.all()[3].at)
		assert.Zero(t, targetStatus(t, q, "a").Parked)
		s := q.Stats()
		assert.Equal(t, uint64(2), s.Done)
		balance(t, s)
	})
}

func TestCircuitBreakerProbeFailureReopens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(context.Context, queue.Job[int]) error { return errors.New("down") }),
			queue.WithCircuitBreaker(1, 10*time.Second, 1), queue.WithRetry(100, time.Second, time.Second), queue.WithWorkers(1, 1))
		start := time.Now()
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Target: "a"}))
		synctest.Wait()
		assert.Equal(t, "open", targetStatus(t, q, "a").Breaker)
		advance(10 * time.Second)
		assert.Equal(t, 2, rec.len(), "the probe ran at the end of the cool-down")
		assert.Equal(t, 10*time.Second, rec.all()[1].at.Sub(start))
		assert.Equal(t, "open", targetStatus(t, q, "a").Breaker, "its failure re-opened the breaker")
		advance(9 * time.Second)
		assert.Equal(t, 2, rec.len())
		advance(time.Second)
		assert.Equal(t, 3, rec.len())
	})
}

func TestCircuitBreakerParkedJobsFollowTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var failing atomic.Bool
		failing.Store(true)
		probe := make(gate)
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, job queue.Job[int]) error {
			if job.Payload == 0 && job.Attempt > 1 {
				if err := probe.wait(ctx); err != nil {
					return err
				}
			}
			if failing.Load() {
				return errors.New("HTTP 503")
			}
			return nil
		}), queue.WithCircuitBreaker(1, 10*time.Second, 1), queue.WithRetry(100, time.Second, time.Second), queue.WithWorkers(4, 4))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 0, Target: "a"}))
		synctest.Wait()
		require.Equal(t, "open", targetStatus(t, q, "a").Breaker)

		// At the end of the cool-down job 0 probes; jobs arriving
		// meanwhile park behind it.
		advance(10 * time.Second)
		for i := 1; i <= 3; i++ {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i, Target: "a"}))
		}
		synctest.Wait()
		st := targetStatus(t, q, "a")
		require.Equal(t, "half-open", st.Breaker)
		assert.Equal(t, 1, st.Running)
		assert.Equal(t, 3, st.Parked)

		// The probe fails: the breaker re-opens and the parked jobs wait
		// for the new cool-down, without running.
		close(probe)
		synctest.Wait()
		st = targetStatus(t, q, "a")
		assert.Equal(t, "open", st.Breaker)
		assert.Zero(t, st.Parked)
		assert.Equal(t, 2, rec.len(), "the first run and the probe")
		assert.Equal(t, 4, q.Stats().Store.Scheduled, "the three, and the probe's retry")

		// The next probe succeeds: everything runs at once.
		failing.Store(false)
		advance(10 * time.Second)
		assert.Equal(t, "closed", targetStatus(t, q, "a").Breaker)
		assert.Equal(t, 6, rec.len())
		s := q.Stats()
		assert.Equal(t, uint64(4), s.Done)
		assert.Zero(t, s.Running)
		balance(t, s)
	})
}

func TestTargetConcurrencyLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			limit   = 3
			targets = 5
			jobs    = 1000
		)
		var running [targets]atomic.Int32
		var peak [targets]atomic.Int32
		var mu sync.Mutex
		ran := map[int]int{}
		q := startQueue(t, func(_ context.Context, job queue.Job[int]) error {
			i := job.Payload % targets
			n := running[i].Add(1)
			for {
				p := peak[i].Load()
				if n <= p || peak[i].CompareAndSwap(p, n) {
					break
				}
			}
			<-time.After(time.Millisecond) // simulated work, on the bubble's clock
			running[i].Add(-1)
			mu.Lock()
			ran[job.Payload]++
			mu.Unlock()
			return nil
		}, queue.WithTargetConcurrency(limit), queue.WithWorkers(50, 50), queue.WithCapacity(jobs, 0))
		for i := range jobs {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i, Target: fmt.Sprint("t", i%targets)}))
		}
		advance(time.Minute)
		require.NoError(t, q.Stop(bg))
		for i := range targets {
			assert.LessOrEqual(t, peak[i].Load(), int32(limit), "target %d", i)
			assert.Equal(t, int32(limit), peak[i].Load(), "target %d used its slots", i)
		}
		assert.Len(t, ran, jobs, "no job lost")
		for p, n := range ran {
			if n != 1 {
				t.Errorf("job %d ran %d times", p, n)
			}
		}
		st := q.Stats()
		assert.Equal(t, uint64(jobs), st.Done)
		balance(t, st)
		for i := range targets {
			assert.Zero(t, targetStatus(t, q, fmt.Sprint("t", i)).Running)
		}
	})
}

func TestTargetConcurrencyStopDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Jobs parked behind a busy target still run when the queue drains.
		g := make(gate)
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, _ queue.Job[int]) error { return g.wait(ctx) }),
			queue.WithTargetConcurrency(1), queue.WithWorkers(4, 4))
		for i := range 6 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i, Target: "a"}))
		}
		synctest.Wait()
		assert.Equal(t, 1, targetStatus(t, q, "a").Running)
		close(g)
		require.NoError(t, q.Stop(bg))
		assert.Equal(t, 6, rec.len())
		balance(t, q.Stats())
	})
}

func TestTargetConcurrencyShutdownPutsParkedJobsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, _ queue.Job[int]) error {
			<-ctx.Done()
			return ctx.Err()
		}), queue.WithTargetConcurrency(1), queue.WithWorkers(3, 3))
		for i := range 3 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i, Key: fmt.Sprint(i), Target: "a"}))
		}
		synctest.Wait()
		assert.Equal(t, 1, rec.len(), "one runs, two are parked for the slot")
		assert.Equal(t, 1, q.Stats().Running)
		assert.Equal(t, 2, q.Stats().Depth, "parked jobs wait to run, as ready jobs do")
		require.NoError(t, q.Shutdown(bg))
		st := q.Stats()
		assert.Equal(t, 1, rec.len(), "parked jobs do not start after Shutdown")
		assert.Zero(t, st.Running)
		assert.Equal(t, 3, st.Store.Scheduled, "all three are put back")
		assert.Equal(t, 3, st.Store.PendingKeys)
		assert.Equal(t, uint64(3), st.Deferred)
		assert.Zero(t, targetStatus(t, q, "a").Running)
		balance(t, st)
	})
}

func TestTargetConcurrencyParkedJobsSeeDisable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Jobs parked for a slot of a target that is disabled while they
		// wait are cancelled, not run.
		g := make(gate)
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, _ queue.Job[int]) error { return g.wait(ctx) }),
			queue.WithTargetConcurrency(1), queue.WithWorkers(3, 3))
		for i := range 3 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i, Target: "a"}))
		}
		synctest.Wait()
		require.Equal(t, 1, rec.len(), "one runs, two are parked")
		require.NoError(t, q.Disable("a", errors.New("gone")))
		close(g)
		synctest.Wait()
		st := q.Stats()
		assert.Equal(t, 1, rec.len(), "parked jobs of a disabled target do not run")
		assert.Equal(t, uint64(2), st.Cancelled)
		assert.Zero(t, targetStatus(t, q, "a").Running)
		balance(t, st)
	})
}

func TestTargetConcurrencyParkedJobsSeeSuspension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Jobs parked for a slot of a target that is suspended while they
		// wait run when the suspension ends, not before.
		g := make(gate)
		var rec recorder[int]
		// Every job waits on the gate, so whichever takes the slot first
		// holds it while the others park.
		q := startQueue(t, rec.handler(func(ctx context.Context, _ queue.Job[int]) error { return g.wait(ctx) }),
			queue.WithTargetConcurrency(1), queue.WithWorkers(3, 3))
		for i := range 3 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i, Target: "a"}))
		}
		synctest.Wait()
		require.Equal(t, 1, rec.len(), "one runs, two are parked")
		require.NoError(t, q.Suspend("a", time.Minute))
		close(g)
		synctest.Wait()
		assert.Equal(t, 1, rec.len(), "parked jobs wait for the suspension")
		advance(time.Minute)
		assert.Equal(t, 3, rec.len())
		balance(t, q.Stats())
	})
}

// Jobs parked for a busy target's slot wait to run as ready jobs do: they
// count in Depth and against the capacity, so Enqueue refuses jobs beyond
// it and Admit engages, instead of a busy target soaking up any number of
// jobs while Stats said the queue was empty.
func TestParkedJobsCountAgainstCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var ran atomic.Int32
		q, err := queue.New(func(context.Context, queue.Job[int]) error {
			<-gate
			ran.Add(1)
			return nil
		}, queue.WithTargetConcurrency(1), queue.WithWorkers(2, 2), queue.WithCapacity(10, 0),
			queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 1, Burst: 1}))
		require.NoError(t, err)
		queuetest.Start(t, q)
		ctx := context.Background()
		accepted := 0
		for i := range 100 {
			switch err := q.Enqueue(ctx, queue.Job[int]{Payload: i, Target: "t"}); {
			case err == nil:
				accepted++
			default:
				require.ErrorIs(t, err, queue.ErrQueueFull)
			}
			queuetest.Settle() // a worker parks what it can take
		}
		st := q.Stats()
		assert.Equal(t, 11, accepted, "capacity 10 waiting, and the one running")
		assert.Equal(t, 10, st.Depth, "parked and ready jobs alike")
		assert.Equal(t, 1, st.Running)
		assert.EqualValues(t, 100, st.FillPct)
		assert.EqualValues(t, 89, st.Counts.DroppedFull)
		assert.Positive(t, targetStatus(t, q, "t").Parked)
		require.NoError(t, q.Admit(), "one token in the bucket")
		assert.ErrorIs(t, q.Admit(), queue.ErrRateLimited, "the limiter engages: the queue is full")

		close(gate)
		queuetest.Settle()
		assert.EqualValues(t, 11, ran.Load())
		st = q.Stats()
		assert.Zero(t, st.Depth)
		assertAccounted(t, st)
	})
}

// Cancel, CancelMatch and Purge reach jobs parked for a busy target's
// slot: each is cancelled, counted, never run, and its key is free again.
func TestCancelReachesParkedJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gate := make(chan struct{})
		var mu sync.Mutex
		ran := map[string]int{}
		q, err := queue.New(func(_ context.Context, j queue.Job[int]) error {
			mu.Lock()
			ran[j.Key]++
			mu.Unlock()
			if j.Key == "busy" {
				<-gate
			}
			return nil
		}, queue.WithTargetConcurrency(1), queue.WithWorkers(2, 2))
		require.NoError(t, err)
		queuetest.Start(t, q)
		ctx := context.Background()
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: "busy", Target: "t"}))
		queuetest.Settle()
		for _, k := range []string{"a", "b1", "b2", "c"} {
			require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: k, Target: "t"}))
		}
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Target: "t"})) // no key
		queuetest.Settle()
		require.Equal(t, 5, targetStatus(t, q, "t").Parked)

		n, err := q.Cancel(ctx, "a")
		require.NoError(t, err)
		assert.Equal(t, 1, n, "Cancel reaches a parked job")
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: "a", Target: "t", Payload: 1}),
			"its key is free again")
		queuetest.Settle()
		n, err = q.CancelMatch(ctx, func(k string) bool { return k[0] == 'b' })
		require.NoError(t, err)
		assert.Equal(t, 2, n, "CancelMatch too")
		n, err = q.Purge(ctx)
		require.NoError(t, err)
		assert.Equal(t, 3, n, "Purge takes the rest: c, the job without key, and a's second job")
		assert.Zero(t, targetStatus(t, q, "t").Parked)

		close(gate)
		queuetest.Settle()
		mu.Lock()
		assert.Equal(t, map[string]int{"busy": 1}, ran, "no cancelled job ran")
		mu.Unlock()
		st := q.Stats()
		assert.EqualValues(t, 6, st.Cancelled)
		assertAccounted(t, st)
	})
}

// losingStore is the in-memory store with leases that heartbeats report
// lost for the IDs in lose.
type losingStore struct {
	*memstore.Store[int]
	lose sync.Map // job ID -> true
}

func (s *losingStore) Heartbeat(_ context.Context, ids []int64) ([]int64, error) {
	var lost []int64
	for _, id := range ids {
		if _, ok := s.lose.Load(id); ok {
			lost = append(lost, id)
		}
	}
	return lost, nil
}
func (s *losingStore) RescueExpired(context.Context) (int, error) { return 0, nil }
func (s *losingStore) HeartbeatInterval() time.Duration           { return time.Second }

// A parked job whose lease a heartbeat reports lost was rescued by
// another process: it leaves the FIFO and never runs here.
func TestParkedJobWithLostLeaseIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &losingStore{Store: memstore.New[int]()}
		gate := make(chan struct{})
		var mu sync.Mutex
		var ran []int
		q, err := queue.NewWithStore(st, func(_ context.Context, j queue.Job[int]) error {
			mu.Lock()
			ran = append(ran, j.Payload)
			mu.Unlock()
			if j.Payload == 1 {
				<-gate
			}
			return nil
		}, queue.WithTargetConcurrency(1), queue.WithWorkers(2, 2))
		require.NoError(t, err)
		queuetest.Start(t, q)
		ctx := context.Background()
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 1, Target: "t"}))
		queuetest.Settle()
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Payload: 2, Target: "t"}))
		queuetest.Settle()
		require.Equal(t, 1, targetStatus(t, q, "t").Parked)
		st.lose.Store(int64(2), true) // job 2's lease is lost
		queuetest.Advance(time.Second)
		assert.Zero(t, targetStatus(t, q, "t").Parked, "the heartbeat dropped it")
		close(gate)
		queuetest.Settle()
		mu.Lock()
		assert.Equal(t, []int{1}, ran, "the rescued job does not run here")
		mu.Unlock()
	})
}

// Only a probe's end frees a half-open breaker's probe slot: a job that
// started before the breaker opened and ends without a success or failure
// (here a BEP 31 "retry in") let a second probe start while the first
// still ran.
func TestHalfOpenProbesStayCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gateA, gateP := make(chan struct{}), make(chan struct{})
		var probes, maxProbes atomic.Int32
		q, err := queue.New(func(_ context.Context, j queue.Job[string]) error {
			switch j.Payload {
			case "A":
				<-gateA
				return queue.RetryAfter(time.Hour, errors.New("retry in 60 minutes"))
			case "F":
				return queue.Permanent(errors.New("down"))
			}
			n := probes.Add(1)
			for m := maxProbes.Load(); n > m && !maxProbes.CompareAndSwap(m, n); m = maxProbes.Load() {
			}
			<-gateP
			probes.Add(-1)
			return nil
		}, queue.WithCircuitBreaker(2, 30*time.Second, 1), queue.WithWorkers(4, 4))
		require.NoError(t, err)
		queuetest.Start(t, q)
		ctx := context.Background()
		require.NoError(t, q.Enqueue(ctx, queue.Job[string]{Payload: "A", Target: "t"}))
		queuetest.Settle() // A runs while the breaker is closed
		for range 2 {
			require.NoError(t, q.Enqueue(ctx, queue.Job[string]{Payload: "F", Target: "t"}))
		}
		queuetest.Settle()
		require.Equal(t, "open", targetStatus(t, q, "t").Breaker)
		queuetest.Advance(30 * time.Second)
		for range 2 {
			require.NoError(t, q.Enqueue(ctx, queue.Job[string]{Payload: "P", Target: "t"}))
		}
		queuetest.Settle()
		require.Equal(t, "half-open", targetStatus(t, q, "t").Breaker)
		require.EqualValues(t, 1, probes.Load(), "one probe runs, the other job waits for its outcome")

		close(gateA) // A ends with "retry in": neither success nor failure
		queuetest.Settle()
		assert.EqualValues(t, 1, maxProbes.Load(), "a non-probe's end freed a probe slot")
		assert.Equal(t, 1, targetStatus(t, q, "t").Parked)
		close(gateP)
		queuetest.Settle()
		assert.Equal(t, "closed", targetStatus(t, q, "t").Breaker)
		assert.Zero(t, targetStatus(t, q, "t").Parked)
	})
}

// TestResumeReleasesHeldJobs: a job that waits for its target's
// suspension runs as soon as the target is resumed, not at the end of the
// suspension; a job scheduled for later on purpose keeps its time, and a
// job of the target held after the Resume runs at once (issue #32).
func TestResumeReleasesHeldJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[string]
		q := newQueue(t, rec.handler(nil), queue.WithWorkers(1, 1))
		start := time.Now()
		require.NoError(t, q.Suspend("api", 30*time.Second))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "held", Key: "held", Target: "api"}))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "later", Target: "api", RunAt: start.Add(time.Hour)}))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "other", Target: "other", RunAt: start.Add(10 * time.Second)}))
		require.NoError(t, q.Start(bg))
		synctest.Wait()
		require.Empty(t, rec.payloads(), "api is suspended")
		require.Equal(t, 3, q.Stats().Store.Scheduled)

		advance(2 * time.Second)
		require.NoError(t, q.Resume("api"))
		synctest.Wait()
		require.Equal(t, []string{"held"}, rec.payloads(), "the held job runs at the Resume")
		assert.Equal(t, 2*time.Second, rec.all()[0].at.Sub(start))
		assert.Equal(t, 1, rec.all()[0].job.Attempt, "waiting does not use up an attempt")
		assert.Equal(t, 2, q.Stats().Store.Scheduled, "the jobs scheduled on purpose keep their time")

		advance(8 * time.Second)
		assert.Equal(t, []string{"held", "other"}, rec.payloads())
		advance(time.Hour - 10*time.Second)
		assert.Equal(t, []string{"held", "other", "later"}, rec.payloads())
		assert.Equal(t, time.Hour, rec.all()[2].at.Sub(start), "a job scheduled for later keeps its RunAt")
		balance(t, q.Stats())
	})
}
