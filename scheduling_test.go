package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
)

func TestScheduledJobRunsAtItsTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(nil))
		start := time.Now()
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 1}, 1500*time.Millisecond))
		require.NoError(t, q.EnqueueAt(bg, queue.Job[int]{Payload: 2}, start.Add(3*time.Second+7*time.Millisecond)))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 3, Key: "k"}, 250*time.Millisecond))

		advance(249 * time.Millisecond)
		assert.Zero(t, rec.len(), "not before its time")
		advance(time.Millisecond)
		require.Equal(t, 1, rec.len())
		advance(1249 * time.Millisecond)
		assert.Equal(t, 1, rec.len())
		advance(5 * time.Second)

		want := map[int]time.Duration{1: 1500 * time.Millisecond, 2: 3007 * time.Millisecond, 3: 250 * time.Millisecond}
		runs := rec.all()
		require.Len(t, runs, 3)
		for _, r := range runs {
			late := r.at.Sub(start) - want[r.job.Payload]
			assert.True(t, late >= 0 && late <= time.Millisecond, "job %d ran %v after its time", r.job.Payload, late)
			assert.Equal(t, start.Add(want[r.job.Payload]), r.job.RunAt, "the handler sees RunAt")
		}
		assert.Equal(t, []int{3, 1, 2}, rec.payloads())
	})
}

func TestScheduledJobAddedBeforeEarlierOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The scheduler sleeps until the earliest job; a new, earlier one
		// must wake it.
		var rec recorder[int]
		q := startQueue(t, rec.handler(nil))
		start := time.Now()
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 1}, time.Hour))
		synctest.Wait()
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 2}, time.Second))
		advance(time.Second)
		require.Equal(t, []int{2}, rec.payloads())
		assert.Equal(t, time.Second, rec.all()[0].at.Sub(start))
	})
}

func TestScheduledSameInstantFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(nil), queue.WithWorkers(1, 1))
		at := time.Now().Add(time.Minute)
		for i := range 50 {
			require.NoError(t, q.EnqueueAt(bg, queue.Job[int]{Payload: i}, at))
		}
		advance(time.Minute)
		want := make([]int, 50)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, rec.payloads())
	})
}

func TestFullQueueRequeuesDueJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		var rec recorder[string]
		q := startQueue(t, rec.handler(func(ctx context.Context, job queue.Job[string]) error {
			if job.Payload == "blocker" {
				return g.wait(ctx)
			}
			return nil
		}), queue.WithCapacity(1, 0), queue.WithWorkers(1, 1))
		start := time.Now()
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "blocker"}))
		synctest.Wait() // the only worker is busy
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "filler"}))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "due", Key: "d"}, time.Second))

		advance(time.Second)
		st := q.Stats()
		assert.Equal(t, uint64(1), st.Requeued, "due with a full queue: requeued")
		assert.Equal(t, 1, st.Store.Scheduled, "not lost")
		require.Len(t, st.NextScheduled, 1)
		assert.Equal(t, start.Add(11*time.Second), st.NextScheduled[0].RunAt, "rescheduled RequeueDelay (10s) later")
		assert.Equal(t, 10*time.Second, time.Until(st.NextScheduled[0].RunAt))
		balance(t, st)
		assert.ErrorIs(t, q.Enqueue(bg, queue.Job[string]{Payload: "x", Key: "d"}), queue.ErrDuplicate, "it keeps its key")

		close(g) // room frees: blocker, then filler run
		synctest.Wait()
		assert.Equal(t, []string{"blocker", "filler"}, rec.payloads())
		advance(9 * time.Second)
		assert.Equal(t, 2, rec.len(), "waits for its new time")
		advance(time.Second)
		require.Equal(t, []string{"blocker", "filler", "due"}, rec.payloads())
		assert.Equal(t, 11*time.Second, rec.all()[2].at.Sub(start))
		st = q.Stats()
		assert.Equal(t, uint64(3), st.Done)
		assert.Equal(t, uint64(1), st.Requeued)
		balance(t, st)
	})
}

func TestFullQueueRequeuesRepeatedly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(ctx context.Context, job queue.Job[int]) error {
			if job.Payload == 0 {
				return g.wait(ctx)
			}
			return nil
		}), queue.WithCapacity(2, 0), queue.WithWorkers(1, 1), queue.WithRequeueDelay(5*time.Second))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 0}))
		synctest.Wait()
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1}))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 2}))
		for i := range 5 {
			require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 10 + i}, time.Second))
		}
		advance(time.Second + 3*5*time.Second) // four promotion attempts, all refused
		st := q.Stats()
		assert.Equal(t, uint64(4*5), st.Requeued)
		assert.Equal(t, 5, st.Store.Scheduled)
		balance(t, st)

		close(g)
		// Room for two per promotion: 2+2+1 over the next three rounds.
		advance(15 * time.Second)
		assert.Equal(t, 8, rec.len())
		st = q.Stats()
		assert.Equal(t, uint64(8), st.Done)
		assert.Zero(t, st.Store.Scheduled)
		balance(t, st)
	})
}

func TestGroupDedupeOfScheduledJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[string]
		q := startQueue(t, rec.handler(nil))
		// A forwarder schedules re-announces per infohash:forwarder,
		// ignoring the peer.
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "p1", Key: "h:f:p1", Group: "h:f"}, time.Minute))
		err := q.EnqueueIn(bg, queue.Job[string]{Payload: "p2", Key: "h:f:p2", Group: "h:f"}, 2*time.Minute)
		assert.ErrorIs(t, err, queue.ErrDuplicate, "one scheduled job per group")
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "g2", Key: "h:g:p2", Group: "h:g"}, time.Minute), "other groups are free")
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "now", Key: "h:f:p3", Group: "h:f"}), "the group binds scheduled jobs only")
		synctest.Wait()
		assert.Equal(t, 0, q.Stats().Store.PendingKeys-2, "the refused job holds no key")

		advance(time.Minute)
		assert.ElementsMatch(t, []string{"now", "p1", "g2"}, rec.payloads())
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "p2", Key: "h:f:p2", Group: "h:f"}, time.Minute),
			"the group is free once its job was promoted")

		n, err := q.Cancel(bg, "h:f:p2")
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "p4", Key: "h:f:p4", Group: "h:f"}, time.Minute),
			"cancelling frees the group")
		advance(time.Minute)
		assert.ElementsMatch(t, []string{"now", "p1", "g2", "p4"}, rec.payloads())
		balance(t, q.Stats())
	})
}

func TestNextScheduled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, func(context.Context, queue.Job[int]) error { return nil })
		start := time.Now()
		for i := 12; i >= 1; i-- {
			require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: i, Key: string(rune('a' + i)), Target: "t"}, time.Duration(i)*time.Second))
		}
		_, err := q.Cancel(bg, string(rune('a'+2)))
		require.NoError(t, err)
		advance(500 * time.Millisecond)
		st := q.Stats()
		assert.Equal(t, 11, st.Store.Scheduled)
		require.Len(t, st.NextScheduled, 10)
		want := []int{1, 3, 4, 5, 6, 7, 8, 9, 10, 11}
		for i, s := range st.NextScheduled {
			d := time.Duration(want[i]) * time.Second
			assert.Equal(t, start.Add(d), s.RunAt)
			assert.Equal(t, d-500*time.Millisecond, time.Until(s.RunAt))
			assert.Equal(t, string(rune('a'+want[i])), s.Key)
			assert.Equal(t, "t", s.Target)
			assert.Equal(t, "normal", s.Priority)
		}
	})
}

func TestScheduleHoldsManyJobs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(nil), queue.WithCapacity(100000, 0))
		const n = 20000
		for i := range n {
			// Spread over 10s in a scrambled order.
			d := time.Duration((i*7919)%n) * (10 * time.Second / n)
			require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: i}, d+time.Millisecond))
		}
		assert.Equal(t, n, q.Stats().Store.Scheduled)
		advance(5 * time.Second)
		got := rec.len()
		assert.InDelta(t, n/2, got, n/100)
		advance(5*time.Second + time.Millisecond)
		assert.Equal(t, n, rec.len())
		st := q.Stats()
		assert.Zero(t, st.Requeued)
		balance(t, st)
	})
}

// timeClock is a Clock that calls package time (the bubble's, in a test),
// as the queue does without WithClock.
type timeClock struct{}

func (timeClock) Now() time.Time                       { return time.Now() }
func (timeClock) NewTimer(d time.Duration) queue.Timer { return timeTimer{time.NewTimer(d)} }

type timeTimer struct{ t *time.Timer }

func (t timeTimer) C() <-chan time.Time        { return t.t.C }
func (t timeTimer) Reset(d time.Duration) bool { return t.t.Reset(d) }
func (t timeTimer) Stop() bool                 { return t.t.Stop() }

// jumpClock is the system clock (the bubble's, in a test) shifted by an
// offset the test may change, to make the clock jump.
type jumpClock struct{ off atomic.Int64 }

func (c *jumpClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *jumpClock) NewTimer(d time.Duration) queue.Timer {
	return timeClock{}.NewTimer(d)
}

func TestEarlyJobGoesBackToSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := new(jumpClock)
		g := make(gate)
		var rec recorder[string]
		q := startQueue(t, rec.handler(func(ctx context.Context, job queue.Job[string]) error {
			if job.Payload == "blocker" {
				return g.wait(ctx)
			}
			return nil
		}), queue.WithClock(clk), queue.WithWorkers(1, 1))
		start := time.Now()
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "blocker"}))
		synctest.Wait()
		require.NoError(t, q.EnqueueIn(bg, queue.Job[string]{Payload: "job", Key: "k"}, time.Second))
		advance(time.Second)
		require.Equal(t, 1, q.Stats().Depth, "promoted; waiting for the busy worker")

		clk.off.Store(int64(-10 * time.Second)) // the clock jumps back
		close(g)
		synctest.Wait()
		assert.Equal(t, []string{"blocker"}, rec.payloads(), "taken before its time: not run")
		st := q.Stats()
		assert.Equal(t, 1, st.Store.Scheduled, "back on the schedule")
		assert.Equal(t, 1, st.Store.PendingKeys)

		advance(9 * time.Second)
		assert.Equal(t, 1, rec.len())
		advance(time.Second)
		require.Equal(t, []string{"blocker", "job"}, rec.payloads(), "runs when the clock reaches its time")
		assert.Equal(t, 11*time.Second, rec.all()[1].at.Sub(start))
		assert.Equal(t, 1, rec.all()[1].job.Attempt)
		balance(t, q.Stats())
	})
}

func TestEnqueueInNonPositiveIsNow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(nil))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 1, RunAt: time.Now().Add(time.Hour)}, 0))
		synctest.Wait()
		assert.Equal(t, []int{1}, rec.payloads(), "d <= 0 means now, whatever RunAt said")
	})
}

func TestCoalescedRerunWithFullQueueNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		var rec recorder[string]
		q := startQueue(t, rec.handler(func(ctx context.Context, job queue.Job[string]) error {
			if job.Payload == "first" {
				return g.wait(ctx)
			}
			return nil
		}), queue.WithCapacity(1, 0), queue.WithWorkers(1, 1))
		start := time.Now()
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "first", Key: "k"}))
		synctest.Wait()
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "rerun", Key: "k"}))
		require.NoError(t, q.Enqueue(bg, queue.Job[string]{Payload: "filler"}))
		close(g) // the rerun finds the queue full
		synctest.Wait()
		assert.Equal(t, []string{"first", "filler"}, rec.payloads())
		assert.Equal(t, 1, q.Stats().Store.Scheduled, "the rerun waits in the schedule")
		advance(10 * time.Second)
		require.Equal(t, []string{"first", "filler", "rerun"}, rec.payloads())
		assert.Equal(t, 10*time.Second, rec.all()[2].at.Sub(start))
		balance(t, q.Stats())
	})
}

// slipClock is a fake clock that, once armed, moves forward by slip just
// before a timer is reset: as a test's Advance does when it runs between
// the scheduler computing its wait and arming its timer.
type slipClock struct {
	*queuetest.FakeClock
	slip atomic.Int64
}

func (c *slipClock) NewTimer(d time.Duration) queue.Timer {
	return &slipTimer{Timer: c.FakeClock.NewTimer(d), c: c}
}

type slipTimer struct {
	queue.Timer
	c *slipClock
}

func (t *slipTimer) Reset(d time.Duration) bool {
	if s := t.c.slip.Swap(0); s > 0 {
		t.c.Advance(time.Duration(s))
	}
	return t.Timer.Reset(d)
}

func TestScheduleClockMovesWhileTimerIsArmed(t *testing.T) {
	// The scheduler computes its wait from now, then arms a timer for it;
	// a fake clock that moves in between used to make the timer fire one
	// step late, and a test (BenchmarkScheduleRun) that waits for the due
	// job before it moves the clock again waited for ever.
	synctest.Test(t, func(t *testing.T) {
		clk := &slipClock{FakeClock: queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))}
		var ran atomic.Int64
		q := startQueue(t, func(context.Context, queue.Job[int]) error { ran.Add(1); return nil }, queue.WithClock(clk))
		synctest.Wait()
		// The clock moves to the job's time while the timer is armed.
		clk.slip.Store(int64(time.Millisecond))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{}, time.Millisecond))
		synctest.Wait()
		require.Zero(t, clk.slip.Load(), "the scheduler reset its timer")
		assert.EqualValues(t, 1, ran.Load(), "the job is due at the clock's now, and ran")

		// The clock moves a step, short of the job's time, while the timer
		// is armed; the next step passes the job's time.
		clk.slip.Store(int64(time.Millisecond))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{}, 1500*time.Microsecond))
		synctest.Wait()
		require.Zero(t, clk.slip.Load(), "the scheduler reset its timer")
		assert.EqualValues(t, 1, ran.Load(), "not due yet")
		clk.Advance(time.Millisecond)
		synctest.Wait()
		assert.EqualValues(t, 2, ran.Load(), "the job is due, and ran at the first step past its time")
	})
}
