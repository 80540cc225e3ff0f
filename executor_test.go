package queue_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/queuekit/queue/storekit"
)

func TestPanicRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(_ context.Context, job queue.Job[int]) error {
			if job.Attempt == 1 {
				panic("kaboom")
			}
			return nil
		}), queue.WithRetry(0, time.Second, time.Second))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k", Target: "t"}))
		advance(time.Second)
		require.Equal(t, 2, rec.len(), "retried after the panic")
		st := q.Stats()
		assert.Equal(t, uint64(1), st.Panics)
		assert.Equal(t, uint64(1), st.Failed)
		assert.Equal(t, uint64(1), st.Retried)
		assert.Equal(t, uint64(1), st.Done)
		require.NotEmpty(t, st.RecentErrors)
		assert.Contains(t, st.RecentErrors[0].Error, "kaboom")
		assert.Equal(t, "k", st.RecentErrors[0].Key)
		balance(t, st)
	})
}

func TestPanicDeadLettered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dead := make(chan error, 1)
		q := startQueue(t, func(context.Context, queue.Job[int]) error { panic(errors.New("bad")) },
			queue.WithRetry(1, 0, 0))
		q.OnDead(func(_ context.Context, _ queue.Job[int], err error) { dead <- err })
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1}))
		synctest.Wait()
		err := <-dead
		var pe *queue.PanicError
		require.ErrorAs(t, err, &pe)
		assert.EqualError(t, pe.Value.(error), "bad")
		assert.NotEmpty(t, pe.Stack)
		assert.Equal(t, "running", q.Stats().State, "the queue survives")
	})
}

func TestRetryBackoffThenDeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type dl struct {
			job queue.Job[int]
			err error
		}
		dead := make(chan dl, 4)
		var rec recorder[int]
		boom := errors.New("boom")
		q := startQueue(t, rec.handler(func(context.Context, queue.Job[int]) error { return boom }),
			queue.WithRetry(5, time.Second, 6*time.Second))
		q.OnDead(func(_ context.Context, job queue.Job[int], err error) { dead <- dl{job, err} })
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		advance(time.Minute)

		runs := rec.all()
		require.Len(t, runs, 5)
		// Attempt n waits a random time in [d/2, d], d = min(6s, 1s·2^(n-1)).
		caps := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 6 * time.Second}
		for i := 1; i < len(runs); i++ {
			assert.Equal(t, i+1, runs[i].job.Attempt)
			wait := runs[i].at.Sub(runs[i-1].at)
			d := caps[i-1]
			assert.True(t, wait >= d/2 && wait <= d, "wait before attempt %d: %v not in [%v, %v]", i+1, wait, d/2, d)
		}
		got := <-dead
		assert.Equal(t, 5, got.job.Attempt)
		assert.Equal(t, "k", got.job.Key)
		assert.Equal(t, 1, got.job.Payload)
		assert.ErrorIs(t, got.err, boom)
		st := q.Stats()
		assert.Equal(t, uint64(5), st.Failed)
		assert.Equal(t, uint64(4), st.Retried)
		assert.Equal(t, uint64(1), st.Dead)
		assert.Zero(t, st.Store.PendingKeys)
		balance(t, st)
	})
}

func TestBackoffJitterSpread(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Many jobs failing once: their retry delays spread over [d/2, d].
		var mu sync.Mutex
		first := map[int]time.Time{}
		var delays []time.Duration
		q := startQueue(t, func(_ context.Context, job queue.Job[int]) error {
			mu.Lock()
			defer mu.Unlock()
			if job.Attempt == 1 {
				first[job.Payload] = time.Now()
				return errors.New("once")
			}
			delays = append(delays, time.Since(first[job.Payload]))
			return nil
		}, queue.WithRetry(0, 8*time.Second, time.Minute), queue.WithCapacity(1000, 0))
		for i := range 200 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
		}
		advance(time.Minute)
		require.Len(t, delays, 200)
		var lo, hi int
		for _, d := range delays {
			require.True(t, d >= 4*time.Second && d <= 8*time.Second, "%v", d)
			if d < 6*time.Second {
				lo++
			} else {
				hi++
			}
		}
		assert.Greater(t, lo, 50, "jittered, not fixed")
		assert.Greater(t, hi, 50, "jittered, not fixed")
	})
}

func TestJobMaxAttemptsOverride(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(context.Context, queue.Job[int]) error { return errors.New("x") }),
			queue.WithRetry(5, time.Millisecond, time.Millisecond))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, MaxAttempts: 2}))
		advance(time.Second)
		assert.Equal(t, 2, rec.len())
		assert.Equal(t, uint64(1), q.Stats().Dead)
	})
}

func TestPermanentDeadAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dead := make(chan error, 1)
		var rec recorder[int]
		q := startQueue(t, rec.handler(func(context.Context, queue.Job[int]) error {
			return queue.Permanent(errors.New("malformed"))
		}), queue.WithRetry(10, 0, 0))
		q.OnDead(func(_ context.Context, _ queue.Job[int], err error) { dead <- err })
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		advance(time.Hour)
		assert.Equal(t, 1, rec.len())
		err := <-dead
		assert.True(t, queue.IsPermanent(err))
		assert.EqualError(t, errors.Unwrap(err), "malformed")
		st := q.Stats()
		assert.Equal(t, uint64(1), st.Dead)
		assert.Zero(t, st.Retried)
		assert.Zero(t, st.Store.PendingKeys)
	})
}

func TestRetryAfterBEP31(t *testing.T) {
	cases := []struct {
		name     string
		ceiling  time.Duration // 0: default (10 min)
		delay    time.Duration
		rerunsAt time.Duration // 0: treated as done, no rerun
	}{
		{name: "under the ceiling", delay: 30 * time.Second, rerunsAt: 30 * time.Second},
		{name: "just under the ceiling", delay: 10*time.Minute - time.Second, rerunsAt: 10*time.Minute - time.Second},
		{name: "zero", delay: 0, rerunsAt: time.Second}, // raised to the floor
		{name: "at the ceiling", delay: 10 * time.Minute},
		{name: "above the ceiling", delay: time.Hour},
		{name: "custom ceiling", ceiling: time.Minute, delay: time.Minute},
		{name: "under custom ceiling", ceiling: time.Minute, delay: 59 * time.Second, rerunsAt: 59 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var rec recorder[int]
				opts := []queue.Option{}
				if tc.ceiling > 0 {
					opts = append(opts, queue.WithRetryAfterBounds(time.Second, tc.ceiling))
				}
				q := startQueue(t, rec.handler(func(_ context.Context, job queue.Job[int]) error {
					assert.Equal(t, 1, job.Attempt, "RetryAfter does not use up an attempt")
					if rec.len() == 1 {
						return queue.RetryAfter(tc.delay, errors.New("tracker busy"))
					}
					return nil
				}), opts...)
				start := time.Now()
				require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
				advance(time.Hour)
				runs := rec.all()
				st := q.Stats()
				assert.Equal(t, uint64(1), st.Done)
				assert.Zero(t, st.Store.PendingKeys)
				if tc.rerunsAt == 0 {
					assert.Len(t, runs, 1, "treated as done")
					assert.Zero(t, st.Retried)
					return
				}
				require.Len(t, runs, 2)
				assert.Equal(t, (tc.rerunsAt/time.Second)*time.Second, runs[1].at.Sub(start), "re-run at now+d")
				assert.Equal(t, uint64(1), st.Retried)
			})
		})
	}
}

func TestRetryAfterDoesNotUseAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// RetryAfter is the downstream asking us to come back later, not a
		// failure of ours: it must not use up WithRetry's maxAttempts.
		var calls int
		var mu sync.Mutex
		q := startQueue(t, func(context.Context, queue.Job[int]) error {
			mu.Lock()
			defer mu.Unlock()
			calls++
			if calls <= 3 {
				return queue.RetryAfter(time.Second, nil)
			}
			return errors.New("real failure")
		}, queue.WithRetry(2, time.Second, time.Second))
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1}))
		advance(time.Minute)
		assert.Equal(t, 5, calls, "three retry-afters, then two real attempts")
		st := q.Stats()
		assert.Equal(t, uint64(1), st.Dead)
		assert.Equal(t, uint64(4), st.Retried)
	})
}

// lostLeaseStore is the in-memory store behind the Store interface, with
// outcomes that report the claim lost (ErrLeaseLost), as a durable store
// does for a run whose lease expired and whose job was rescued.
type lostLeaseStore struct{ *memstore.Store[int] }

var errLost = fmt.Errorf("teststore: %w", storekit.ErrLeaseLost)

func (lostLeaseStore) Complete(context.Context, queue.Job[int]) error { return errLost }
func (lostLeaseStore) Dead(context.Context, queue.Job[int], error) error {
	return errLost
}
func (lostLeaseStore) Retry(context.Context, queue.Job[int], time.Time, error) error {
	return errLost
}

// A run whose claim the store lost counts no outcome: the job is the
// rescue's to end, and counting it here too (done, retried or dead, and
// OnDead) counted one job twice across processes.
func TestLostLeaseCountsNoOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dead atomic.Int32
		q, err := queue.NewWithStore(lostLeaseStore{memstore.New[int]()}, func(_ context.Context, j queue.Job[int]) error {
			switch j.Payload {
			case 1:
				return nil
			case 2:
				return queue.Permanent(errors.New("no"))
			}
			return errors.New("transient")
		}, queue.WithWorkers(1, 1))
		require.NoError(t, err)
		q.OnDead(func(context.Context, queue.Job[int], error) { dead.Add(1) })
		queuetest.Start(t, q)
		for p := range 3 {
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Payload: p + 1}))
		}
		queuetest.Settle()
		c := q.Stats().Counts
		assert.Zero(t, c.Done)
		assert.Zero(t, c.Dead)
		assert.Zero(t, c.Retried)
		assert.Zero(t, dead.Load(), "OnDead is the rescue's to call")
		assert.EqualValues(t, 2, c.Failed, "failed runs are still counted as failures")
	})
}

// spinGuard is how many runs a RetryAfter test allows before its handler
// gives up and returns nil: a queue that reruns a RetryAfter(0) at once
// would otherwise spin forever in the bubble, where no time passes, and
// the test would hang instead of failing.
const spinGuard = 1000

func TestRetryAfterZeroDoesNotSpin(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		floor time.Duration // 0: the default, 1 s
	}{
		{name: "zero", delay: 0},
		{name: "negative", delay: -time.Minute},
		{name: "under the floor", delay: 10 * time.Millisecond},
		{name: "custom floor", delay: 0, floor: 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var runs atomic.Int64
				var opts []queue.Option
				floor := time.Second
				if tc.floor > 0 {
					floor = tc.floor
					opts = append(opts, queue.WithRetryAfterBounds(tc.floor, 10*time.Minute))
				}
				q := startQueue(t, func(context.Context, queue.Job[int]) error {
					if runs.Add(1) > spinGuard {
						return nil
					}
					return queue.RetryAfter(tc.delay, errors.New("tracker busy"))
				}, opts...)
				require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1}))
				advance(floor - time.Millisecond)
				assert.EqualValues(t, 1, runs.Load(), "no rerun before the floor")
				// One run per floor: at 0, floor, 2·floor, ..., 10·floor.
				advance(10 * floor)
				assert.EqualValues(t, 11, runs.Load(), "one rerun per %s", floor)
				st := q.Stats()
				assert.Equal(t, 1, st.Store.Scheduled, "the rerun waits in the schedule")
				assert.EqualValues(t, 11, st.Retried, "every run asked to retry")
			})
		})
	}
}

func TestStopReturnsWhileHandlerKeepsAskingToRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs atomic.Int64
		q := startQueue(t, func(context.Context, queue.Job[int]) error {
			if runs.Add(1) > spinGuard {
				return nil
			}
			return queue.RetryAfter(0, errors.New("tracker busy"))
		})
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "k"}))
		synctest.Wait()
		require.EqualValues(t, 1, runs.Load())

		ctx, cancel := context.WithTimeout(bg, 3*time.Second)
		defer cancel()
		start := time.Now()
		require.NoError(t, q.Stop(ctx))
		assert.Zero(t, time.Since(start), "Stop returns at once: nothing is ready")
		assert.EqualValues(t, 1, runs.Load(), "the drain does not run the rerun")
		st := q.Stats()
		assert.Equal(t, 1, st.Store.Scheduled, "the rerun is kept, as scheduled jobs are")
		assert.Equal(t, 1, st.Store.PendingKeys, "and keeps its key")
		assert.Zero(t, st.Done)
		balance(t, st)
	})
}

func TestStopDrainKeepsRetriesThatComeDueDuringIt(t *testing.T) {
	// Two workers drain six ready jobs of 2 s each: the drain lasts 6 s,
	// and the first jobs' reruns (RetryAfter, and a failure's backoff)
	// come due during it. They were put back after the drain began, so
	// they are kept for the next start, not run: otherwise handlers that
	// keep asking to retry would keep the drain, and Stop, going forever.
	for _, tc := range []struct {
		name string
		err  error
	}{
		{name: "retry after", err: queue.RetryAfter(0, errors.New("tracker busy"))},
		{name: "failure", err: errors.New("upstream down")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var runs atomic.Int64
				q := startQueue(t, func(ctx context.Context, _ queue.Job[int]) error {
					if runs.Add(1) > spinGuard {
						return nil
					}
					select {
					case <-time.After(2 * time.Second):
					case <-ctx.Done():
						return ctx.Err()
					}
					return tc.err
				}, queue.WithWorkers(2, 2), queue.WithRetry(100, time.Second, time.Second))
				for i := range 6 {
					require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
				}
				synctest.Wait()
				ctx, cancel := context.WithTimeout(bg, time.Minute)
				defer cancel()
				start := time.Now()
				require.NoError(t, q.Stop(ctx))
				assert.Equal(t, 6*time.Second, time.Since(start), "the drain ran the six ready jobs, two at a time")
				assert.EqualValues(t, 6, runs.Load(), "each job ran once")
				st := q.Stats()
				assert.Equal(t, 6, st.Store.Scheduled, "every rerun is kept")
				balance(t, st)
			})
		})
	}
}
