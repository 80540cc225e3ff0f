package queue_test

// Misuse: what the queue does when its caller gets the lifecycle wrong,
// races it, blocks it, or feeds it odd values. Each behaviour tested here
// is documented on the method it concerns (queue.go) and listed in
// docs/OPERATIONS.md, "Guarantees".

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
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

// runSet records which jobs (by payload) ran, and how often.
type runSet struct {
	mu   sync.Mutex
	runs map[int]int
}

func (s *runSet) add(p int) {
	s.mu.Lock()
	if s.runs == nil {
		s.runs = map[int]int{}
	}
	s.runs[p]++
	s.mu.Unlock()
}

func (s *runSet) snapshot() map[int]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int]int, len(s.runs))
	for k, v := range s.runs {
		out[k] = v
	}
	return out
}

func TestMisuseStartTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var runs runSet
		q := startQueue(t, func(_ context.Context, j queue.Job[int]) error { runs.add(j.Payload); return nil },
			queue.WithWorkers(2, 2))
		require.ErrorIs(t, q.Start(bg), queue.ErrStarted)
		require.ErrorIs(t, q.Start(context.Background()), queue.ErrStarted)
		queuetest.Settle()
		assert.Equal(t, 2, q.Stats().Workers, "a second Start adds no workers")

		for i := range 10 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
		}
		queuetest.Settle()
		for i := range 10 {
			assert.Equal(t, 1, runs.snapshot()[i], "job %d runs once", i)
		}
		require.NoError(t, q.Stop(bg))
		assert.ErrorIs(t, q.Start(bg), queue.ErrClosed, "Start after Stop")
		queuetest.CheckCounts(t, q)
	})
}

func TestMisuseStopTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := make(gate)
		var runs runSet
		q := startQueue(t, func(ctx context.Context, j queue.Job[int]) error {
			runs.add(j.Payload)
			if j.Payload == 0 {
				return g.wait(ctx)
			}
			return nil
		}, queue.WithWorkers(1, 1))
		for i := range 3 {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
		}
		queuetest.Settle()

		// Stop, Stop and Shutdown at once, from three goroutines: all wait
		// for the same drain, and all return nil once it is done.
		errs := make(chan error, 3)
		go func() { errs <- q.Stop(bg) }()
		go func() { errs <- q.Stop(bg) }()
		queuetest.Settle()
		select {
		case err := <-errs:
			t.Fatalf("Stop returned %v while a job still ran", err)
		default:
		}
		close(g)
		for range 2 {
			require.NoError(t, <-errs)
		}
		require.NoError(t, q.Stop(bg), "Stop after Stop returns at once")
		require.NoError(t, q.Shutdown(bg), "Shutdown after Stop returns at once")
		<-q.Done()
		assert.Equal(t, map[int]int{0: 1, 1: 1, 2: 1}, runs.snapshot(), "the ready jobs drained, once each")
		queuetest.CheckCounts(t, q)
	})
}

func TestMisuseStopBeforeStart(t *testing.T) {
	for _, shutdown := range []bool{false, true} {
		t.Run(fmt.Sprintf("shutdown=%v", shutdown), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var runs runSet
				q := newQueue(t, func(_ context.Context, j queue.Job[int]) error { runs.add(j.Payload); return nil })
				require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, Key: "ready"}))
				require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 2, Key: "later"}, time.Minute))

				start := time.Now()
				if shutdown {
					require.NoError(t, q.Shutdown(bg))
				} else {
					require.NoError(t, q.Stop(bg))
				}
				assert.Zero(t, time.Since(start), "nothing to wait for")
				<-q.Done()
				assert.ErrorIs(t, q.Start(bg), queue.ErrClosed)
				assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Payload: 3}), queue.ErrClosed)

				queuetest.Advance(time.Hour)
				assert.Empty(t, runs.snapshot(), "a queue that never started runs nothing")
				st := queuetest.CheckCounts(t, q)
				assert.Equal(t, 1, st.Depth, "the ready job stays in the store")
				assert.Equal(t, 1, st.Store.Scheduled, "the scheduled job stays in the store")
				assert.Equal(t, "stopped", st.State)
			})
		})
	}
}

// TestMisuseEnqueueRacingStop: every Enqueue that races Stop either returns
// an error (ErrClosed; ErrDuplicate for a pending key) or its job has run by
// the time Stop returns — coalesced reruns of running keys included. Rounds
// give the race different interleavings. (A rerun whose key is released
// while the ready queue is full waits WithRequeueDelay in the schedule,
// which Stop keeps: the queue here never fills.)
func TestMisuseEnqueueRacingStop(t *testing.T) {
	const (
		rounds      = 20
		producers   = 6
		warm        = 20   // jobs each producer enqueues before Stop begins
		perProducer = 2000 // at most; the queue never fills, so no rerun waits for room
	)
	var raced atomic.Int64 // producers that met ErrClosed: the race happened
	for round := range rounds {
		synctest.Test(t, func(t *testing.T) {
			var runs runSet
			q := startQueue(t, func(_ context.Context, j queue.Job[int]) error { runs.add(j.Payload); return nil },
				queue.WithWorkers(3, 3), queue.WithCapacity(producers*perProducer+1, 0))
			var (
				mu       sync.Mutex
				accepted []int
				warmed   sync.WaitGroup
				done     sync.WaitGroup
			)
			warmed.Add(producers)
			for p := range producers {
				done.Add(1)
				go func() {
					defer done.Done()
					var once sync.Once
					defer once.Do(warmed.Done)
					for i := range perProducer {
						payload := p*1_000_000 + i
						job := queue.Job[int]{Payload: payload}
						if i%3 == 0 {
							job.Key = fmt.Sprintf("k%d", i%7) // some keys repeat: duplicates and coalesced reruns
						}
						err := q.Enqueue(bg, job)
						if i == warm {
							once.Do(warmed.Done)
						}
						switch {
						case err == nil:
							mu.Lock()
							accepted = append(accepted, payload)
							mu.Unlock()
						case errors.Is(err, queue.ErrClosed):
							raced.Add(1)
							return
						case errors.Is(err, queue.ErrDuplicate):
						default:
							t.Errorf("Enqueue: %v", err)
							return
						}
					}
				}()
			}
			warmed.Wait()
			require.NoError(t, q.Stop(bg), "round %d", round)
			ran := runs.snapshot() // what had run when Stop returned
			done.Wait()

			mu.Lock()
			defer mu.Unlock()
			require.NotEmpty(t, accepted)
			for _, p := range accepted {
				if ran[p] != 1 {
					st := q.Stats()
					t.Fatalf("round %d: job %d was accepted but had run %d times when Stop returned (ready %d, scheduled %d %+v, waiting %d, running %d)",
						round, p, ran[p], st.Depth, st.Store.Scheduled, st.NextScheduled, st.Store.Waiting, st.Running)
				}
			}
			queuetest.Settle()
			assert.Equal(t, ran, runs.snapshot(), "nothing runs after Stop returned")
			st := queuetest.CheckCounts(t, q)
			assert.Equal(t, uint64(len(accepted)), st.Enqueued)
			assert.Equal(t, uint64(len(accepted)), st.Done)
		})
	}
	t.Logf("%d of %d producers were still enqueueing when Stop began", raced.Load(), rounds*producers)
	assert.Positive(t, raced.Load(), "no Enqueue raced Stop")
}

// TestMisuseShutdownStuckHandlers: handlers that ignore their context and
// never return. Shutdown returns when its context ends, with a
// *queue.StuckError naming exactly the stuck jobs; Stop does the same.
func TestMisuseShutdownStuckHandlers(t *testing.T) {
	for _, how := range []string{"Shutdown", "Stop"} {
		t.Run(how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				release := make(chan struct{})
				var mu sync.Mutex
				var stuckIDs []int64
				q := startQueue(t, func(_ context.Context, j queue.Job[int]) error {
					mu.Lock()
					stuckIDs = append(stuckIDs, j.ID)
					mu.Unlock()
					<-release // ignores ctx: stuck until the test lets go
					return nil
				}, queue.WithWorkers(3, 3))
				defer func() {
					select {
					case <-release:
					default:
						close(release) // a failed assertion must not strand the bubble
					}
				}()
				for i := range 5 {
					require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: i}))
				}
				queuetest.Settle()
				require.Equal(t, 3, q.Stats().Running)

				stop := q.Shutdown
				if how == "Stop" {
					stop = q.Stop
				}
				ctx, cancel := context.WithTimeout(bg, 30*time.Second)
				defer cancel()
				start := time.Now()
				err := stop(ctx)
				assert.Equal(t, 30*time.Second, time.Since(start), "returns when ctx ends, not before, not after")
				var stuck *queue.StuckError
				require.ErrorAs(t, err, &stuck)
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				mu.Lock()
				assert.ElementsMatch(t, stuckIDs, stuck.JobIDs, "the stuck jobs, exactly")
				mu.Unlock()
				assert.Contains(t, err.Error(), "3 job(s) still running")
				select {
				case <-q.Done():
					t.Fatal("Done closed while handlers run")
				default:
				}
				assert.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Payload: 9}), queue.ErrClosed)

				// Asking again waits again, and says the same.
				ctx2, cancel2 := context.WithTimeout(bg, time.Second)
				defer cancel2()
				require.ErrorAs(t, stop(ctx2), &stuck)
				assert.Len(t, stuck.JobIDs, 3)

				close(release)
				<-q.Done()
				require.NoError(t, q.Shutdown(bg))
				st := queuetest.CheckCounts(t, q)
				assert.Equal(t, 0, st.Running)
				if how == "Stop" {
					assert.Equal(t, uint64(5), st.Done, "the stuck jobs returned nil at last, then Stop drained the other two")
					assert.Equal(t, 0, st.Depth)
				} else {
					assert.Equal(t, uint64(3), st.Done, "a stuck handler that returns nil at last is done")
					assert.Equal(t, 2, st.Depth, "Shutdown leaves ready jobs in the store")
				}
			})
		})
	}
}

// TestMisuseHandlerCallsItsQueue: a handler may call Enqueue (even on a
// full queue: ErrQueueFull at once), EnqueueIn, Cancel, Admit, Fanout and
// Stats on its own queue without deadlock; while the queue stops, its
// Enqueue returns ErrClosed; a Stop it calls itself waits for the handler,
// so it returns only when its context ends, with a *StuckError naming the
// caller's own job.
func TestMisuseHandlerCallsItsQueue(t *testing.T) {
	t.Run("full queue", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var q *queue.Queue[int]
			results := make(chan []error, 1)
			q = startQueue(t, func(ctx context.Context, j queue.Job[int]) error {
				if j.Payload != 0 {
					return nil
				}
				errs := []error{
					q.Enqueue(ctx, queue.Job[int]{Payload: 1}),                // fills the queue (capacity 1)
					q.Enqueue(ctx, queue.Job[int]{Payload: 2}),                // full
					q.Enqueue(ctx, queue.Job[int]{Payload: 3, Key: j.Key}),    // its own running key: coalesced
					q.EnqueueIn(ctx, queue.Job[int]{Payload: 4}, time.Second), // scheduled: not bound by capacity
					q.Admit(), // fill 100 %: the bucket decides (it has tokens)
					func() error { _, err := q.Cancel(ctx, "nothing"); return err }(), // no deadlock on the key set
					func() error { _ = q.Fanout(j.Key, []string{"a"}); _ = q.Stats(); return nil }(),
				}
				results <- errs
				return nil
			}, queue.WithCapacity(1, 0), queue.WithWorkers(1, 1))
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 0, Key: "self"}))
			errs := <-results
			assert.NoError(t, errs[0])
			assert.ErrorIs(t, errs[1], queue.ErrQueueFull)
			assert.NoError(t, errs[2])
			assert.NoError(t, errs[3])
			assert.NoError(t, errs[4])
			assert.NoError(t, errs[5])
			// The rerun found the queue full when its key was released: it
			// waits WithRequeueDelay, like a due job that finds no room.
			queuetest.Advance(10 * time.Second) // the default requeue delay
			st := queuetest.CheckCounts(t, q)
			assert.Equal(t, uint64(4), st.Done, "0, 1, the rerun 3 and the scheduled 4")
			assert.Equal(t, uint64(1), st.DroppedFull)
		})
	})

	t.Run("enqueue while stopping", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var q *queue.Queue[int]
			g := make(gate)
			got := make(chan error, 1)
			q = startQueue(t, func(ctx context.Context, j queue.Job[int]) error {
				if err := g.wait(ctx); err != nil {
					return err
				}
				got <- q.Enqueue(ctx, queue.Job[int]{Payload: 2})
				return nil
			}, queue.WithWorkers(1, 1))
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1}))
			queuetest.Settle()
			stopped := make(chan error, 1)
			go func() { stopped <- q.Stop(bg) }()
			queuetest.Settle()
			close(g)
			assert.ErrorIs(t, <-got, queue.ErrClosed)
			require.NoError(t, <-stopped)
		})
	})

	t.Run("handler calls Stop", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var q *queue.Queue[int]
			got := make(chan error, 1)
			var id int64
			q = startQueue(t, func(ctx context.Context, j queue.Job[int]) error {
				id = j.ID
				ctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				got <- q.Stop(ctx) // waits for this very handler
				return nil
			}, queue.WithWorkers(1, 1))
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1}))
			err := <-got
			var stuck *queue.StuckError
			require.ErrorAs(t, err, &stuck)
			assert.Equal(t, []int64{id}, stuck.JobIDs)
			<-q.Done() // the handler returned, so the queue stopped
			require.NoError(t, q.Stop(bg))
		})
	})
}

type nilPayload struct{ Peer string }

// TestMisuseNilPayloadPointer: a nil pointer payload is a payload like any
// other: it is stored, retried, coalesced, scheduled, dead-lettered and
// handed to the handler as nil; the queue never dereferences payloads.
func TestMisuseNilPayloadPointer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var seen []*nilPayload
		var dead []queue.Job[*nilPayload]
		q := startQueue(t, func(_ context.Context, j queue.Job[*nilPayload]) error {
			mu.Lock()
			seen = append(seen, j.Payload)
			mu.Unlock()
			if j.Key == "fail" {
				return errors.New("boom")
			}
			return nil
		}, queue.WithWorkers(1, 1), queue.WithRetry(2, time.Second, time.Second))
		q.OnDead(func(_ context.Context, j queue.Job[*nilPayload], _ error) {
			mu.Lock()
			dead = append(dead, j)
			mu.Unlock()
		})
		require.NoError(t, q.Enqueue(bg, queue.Job[*nilPayload]{}))
		require.NoError(t, q.Enqueue(bg, queue.Job[*nilPayload]{Key: "fail"}))
		require.NoError(t, q.EnqueueIn(bg, queue.Job[*nilPayload]{Key: "later", Payload: nil}, time.Minute))
		require.NoError(t, q.Enqueue(bg, queue.Job[*nilPayload]{Payload: &nilPayload{Peer: "p"}}))
		queuetest.Advance(2 * time.Minute)

		rec := httptest.NewRecorder()
		q.StatsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats?format=json", nil))
		assert.Equal(t, http.StatusOK, rec.Code)

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, seen, 5, "4 jobs, one of them run twice")
		assert.Equal(t, 4, countNil(seen), "nil stays nil, retries included")
		i := slices.IndexFunc(seen, func(p *nilPayload) bool { return p != nil })
		require.GreaterOrEqual(t, i, 0)
		assert.Equal(t, "p", seen[i].Peer)
		require.Len(t, dead, 1)
		assert.Nil(t, dead[0].Payload)
		queuetest.CheckCounts(t, q)
	})
}

func countNil(ps []*nilPayload) int {
	n := 0
	for _, p := range ps {
		if p == nil {
			n++
		}
	}
	return n
}

// TestMisuseHugeKey: a 1 MiB key works like any other (dedupe, coalescing,
// Cancel, CancelMatch, scheduling). Keys are kept and compared whole; the
// cost is their length per pending job, and Stats, /stats, logs and the
// recent-error ring show them in full (see Queue.Enqueue).
func TestMisuseHugeKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		key := strings.Repeat("k", 1<<20)
		other := key[:len(key)-1] + "x" // differs in the last byte only
		g := make(gate)
		var mu sync.Mutex
		var keys []string
		q := startQueue(t, func(ctx context.Context, j queue.Job[int]) error {
			mu.Lock()
			keys = append(keys, j.Key)
			mu.Unlock()
			if j.Payload == 1 {
				return g.wait(ctx)
			}
			return nil
		}, queue.WithWorkers(1, 1))

		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: key, Payload: 1}))
		queuetest.Settle() // running
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: key, Payload: 2}), "coalesced")
		require.ErrorIs(t, q.Enqueue(bg, queue.Job[int]{Key: key, Payload: 3}), queue.ErrDuplicate)
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: other, Payload: 4}), "a different key, however long")
		n, err := q.Cancel(bg, other)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Key: other, Group: key, Payload: 5}, time.Minute))
		st := q.Stats()
		require.Len(t, st.NextScheduled, 1)
		assert.Equal(t, other, st.NextScheduled[0].Key)
		n, err = q.CancelMatch(bg, func(k string) bool { return k == other })
		require.NoError(t, err)
		assert.Equal(t, 1, n)

		close(g)
		queuetest.Advance(time.Minute)
		mu.Lock()
		assert.Len(t, keys, 2, "the holder and its rerun")
		for _, k := range keys {
			assert.True(t, k == key, "the handler sees the key whole")
		}
		mu.Unlock()
		st = queuetest.CheckCounts(t, q)
		assert.Equal(t, 0, st.Store.PendingKeys)
		assert.Equal(t, uint64(2), st.Cancelled)
	})
}

// TestMisuseExtremeOptionValues: option values at the edge of their types
// are accepted and do not overflow: a backoff that would double past
// math.MaxInt64, a retry hint of math.MaxInt64, a suspension that ends
// after 2262 (where time.Time.UnixNano overflows), and an in-memory
// capacity too large to allocate (refused by New).
func TestMisuseExtremeOptionValues(t *testing.T) {
	t.Run("backoff", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var runs runSet
			q := startQueue(t, func(_ context.Context, j queue.Job[int]) error {
				runs.add(j.Payload)
				return errors.New("boom")
			}, queue.WithRetry(3, 1<<62+1, math.MaxInt64),
				queue.WithScaling(queue.ScaleByFill, 0, 0, math.MaxInt64)) // no scaler ticks across centuries of fake time
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1}))
			queuetest.Settle()
			next := q.Stats().NextScheduled
			require.Len(t, next, 1)
			assert.GreaterOrEqual(t, time.Until(next[0].RunAt), time.Duration(1<<61), "the first retry waits base/2 at least")
			queuetest.Advance(time.Until(next[0].RunAt)) // about a century: the second run fails, and backoff doubles past MaxInt64
			assert.Equal(t, 2, runs.snapshot()[1])
			next = q.Stats().NextScheduled
			require.Len(t, next, 1, "retried, not lost")
			assert.GreaterOrEqual(t, time.Until(next[0].RunAt), time.Duration(math.MaxInt64/2), "capped at max, not wrapped into the past")
			queuetest.CheckCounts(t, q)
			// The third run would be past 2262, beyond the fake clock's range.
		})
	})

	t.Run("retry hint", func(t *testing.T) {
		assert.Equal(t, "busy, retry in 9223372037 seconds", refusal(t, queue.RateLimit{RetryAfter: math.MaxInt64}).Error())
		assert.Equal(t, "busy, retry in 2 seconds", refusal(t, queue.RateLimit{RetryAfter: 1001 * time.Millisecond}).Error())
	})

	t.Run("suspension past 2262", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			q := newQueue(t, func(context.Context, queue.Job[int]) error { return nil },
				queue.WithSuspend(math.MaxInt64, nil), queue.WithCircuitBreaker(1, math.MaxInt64, 1))
			require.NoError(t, q.Suspend("t", 0))
			assert.Equal(t, []string{"u"}, q.Fanout("k", []string{"t", "u"}), "still suspended")
			q.SetNextDue("u", "k", time.Now().Add(math.MaxInt64))
			assert.False(t, q.Due("u", "k"), "due in 292 years is not due now")
		})
	})

	t.Run("capacity", func(t *testing.T) {
		for _, n := range []int{1<<23 + 1 /* above the in-memory store's limit */, math.MaxInt} {
			_, err := queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithCapacity(n, 0))
			var oe *queue.OptionError
			require.ErrorAs(t, err, &oe, "capacity %d", n)
			assert.Equal(t, "WithCapacity", oe.Option)
		}
	})
}

// A CancelMatch predicate that panics (a host such as net/http recovers
// it) leaves no key shard locked, and the jobs it cancelled before the
// panic are counted.
func TestCancelMatchPredicatePanics(t *testing.T) {
	q, err := queue.New(func(context.Context, queue.Job[int]) error { return nil })
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 200 {
		require.NoError(t, q.Enqueue(ctx, queue.Job[int]{Key: fmt.Sprint("k", i)}))
	}
	seen := 0
	require.PanicsWithValue(t, "bad predicate", func() {
		_, _ = q.CancelMatch(ctx, func(string) bool {
			if seen++; seen == 100 {
				panic("bad predicate")
			}
			return true
		})
	})
	s := q.Stats()
	assert.EqualValues(t, 99, s.Cancelled, "the jobs cancelled before the panic are counted")
	assert.Equal(t, 101, s.Depth)
	// Every shard is unlocked: these would block on a leaked lock.
	freed := 0
	for i := range 200 {
		switch err := q.Enqueue(ctx, queue.Job[int]{Key: fmt.Sprint("k", i)}); {
		case err == nil:
			freed++
		default:
			require.ErrorIs(t, err, queue.ErrDuplicate)
		}
	}
	assert.Equal(t, 99, freed, "exactly the cancelled keys are free again")
	n, err := q.CancelMatch(ctx, func(string) bool { return true })
	require.NoError(t, err)
	assert.Equal(t, 200, n)
}

// A panicking OnDead or observer hook is host code running on a worker:
// the panic is recovered and logged, the worker carries on, and every job
// is still counted.
func TestHookPanicsAreRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs syncBuffer
		q, err := queue.New(func(_ context.Context, j queue.Job[int]) error {
			if j.Payload%2 == 0 {
				return queue.Permanent(errors.New("no"))
			}
			return nil
		}, queue.WithWorkers(1, 1),
			queue.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			queue.WithObserver(func(ev queue.Event) {
				if ev.Kind == queue.EventDone {
					panic("observer")
				}
			}))
		require.NoError(t, err)
		q.OnDead(func(context.Context, queue.Job[int], error) { panic("on dead") })
		queuetest.Start(t, q)
		for i := range 10 {
			require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Payload: i}))
		}
		queuetest.Settle()
		c := q.Stats().Counts
		assert.EqualValues(t, 5, c.Done)
		assert.EqualValues(t, 5, c.Dead)
		assert.Equal(t, 5, strings.Count(logs.String(), "OnDead hook panicked"))
		assert.Equal(t, 5, strings.Count(logs.String(), "observer hook panicked"))
	})
}

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestMisuseBadJobFieldsRefused(t *testing.T) {
	// A negative MaxAttempts, and an ID or Attempt the caller set, are
	// refused rather than silently replaced: the queue assigns IDs and
	// counts attempts (deduplicate with Key; limit with MaxAttempts).
	cases := []struct {
		name string
		job  queue.Job[int]
		want []string // in the error's text
	}{
		{"negative max attempts", queue.Job[int]{MaxAttempts: -1}, []string{"MaxAttempts", "-1"}},
		{"caller-set ID", queue.Job[int]{ID: 42}, []string{"ID", "42", "Key"}},
		{"caller-set attempt", queue.Job[int]{Attempt: 3}, []string{"Attempt", "3", "MaxAttempts"}},
		{"negative unique window", queue.Job[int]{Key: "k", UniqueFor: -time.Second}, []string{"UniqueFor", "-1s"}},
		{"unique window without key", queue.Job[int]{UniqueFor: time.Hour}, []string{"UniqueFor", "1h0m0s", "Key"}},
		{"target not UTF-8", queue.Job[int]{Target: "api\xff"}, []string{"Target", `"api\xff"`, "UTF-8"}},
		{"target with NUL", queue.Job[int]{Target: "api\x00"}, []string{"Target", `"api\x00"`, "NUL"}},
		{"target too long", queue.Job[int]{Target: strings.Repeat("t", 1025)}, []string{"Target", "1025 bytes", "1024"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, nop)
			for name, enqueue := range map[string]func(queue.Job[int]) error{
				"Enqueue":   func(j queue.Job[int]) error { return q.Enqueue(bg, j) },
				"EnqueueIn": func(j queue.Job[int]) error { return q.EnqueueIn(bg, j, time.Hour) },
				"EnqueueAt": func(j queue.Job[int]) error { return q.EnqueueAt(bg, j, time.Now()) },
			} {
				err := enqueue(tc.job)
				require.ErrorIs(t, err, queue.ErrInvalidJob, name)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w, name)
				}
			}
			st := q.Stats()
			assert.Zero(t, st.Enqueued, "nothing was accepted")
			assert.Zero(t, st.Depth+st.Store.Scheduled)
		})
	}
	t.Run("a received job enqueued again, cleared", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var again atomic.Int64
			var first atomic.Bool
			var q *queue.Queue[int]
			q = startQueue(t, func(ctx context.Context, j queue.Job[int]) error {
				if j.Payload == 1 && first.CompareAndSwap(false, true) {
					err := q.Enqueue(ctx, j)
					assert.ErrorIs(t, err, queue.ErrInvalidJob, "ID and Attempt are set")
					j.ID, j.Attempt, j.Payload = 0, 0, 2
					assert.NoError(t, q.Enqueue(ctx, j))
					return nil
				}
				again.Add(1)
				return nil
			})
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1, MaxAttempts: 2}))
			synctest.Wait()
			assert.EqualValues(t, 1, again.Load())
		})
	})
}

func TestMisuseNewNilHandler(t *testing.T) {
	q, err := queue.New[int](nil)
	assert.Nil(t, q)
	require.Error(t, err)
	assert.Equal(t, "queue: New: the handler is nil", err.Error())
	var oe *queue.OptionError
	assert.False(t, errors.As(err, &oe), "a handler is not an option")
}

func TestMisuseStoreSharedByTwoQueues(t *testing.T) {
	store := memstore.New[int]()
	q1, err := queue.NewWithStore(store, nop, queue.WithName("first"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = q1.Shutdown(bg) })
	q2, err := queue.NewWithStore(store, nop, queue.WithName("second"))
	assert.Nil(t, q2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `already belongs to queue "first"`)
	assert.NotContains(t, err.Error(), "queue: store: queue:", "one prefix")
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "NewWithStore", oe.Option)

	// Two queues racing to bind one store: exactly one wins.
	store = memstore.New[int]()
	var wg sync.WaitGroup
	var won atomic.Int32
	for i := range 8 {
		wg.Go(func() {
			q, err := queue.NewWithStore(store, nop, queue.WithName(fmt.Sprint("q", i)))
			if err == nil {
				won.Add(1)
				_ = q.Shutdown(bg)
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 1, won.Load())
}

func TestMisuseDuplicateNamesItsKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(t, nop)
		require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "infohash:peer"}))
		err := q.Enqueue(bg, queue.Job[int]{Key: "infohash:peer"})
		require.ErrorIs(t, err, queue.ErrDuplicate)
		var de *queue.DuplicateError
		require.ErrorAs(t, err, &de)
		assert.Equal(t, "infohash:peer", de.Key)
		assert.Contains(t, err.Error(), `"infohash:peer"`)

		require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Key: "a", Group: "infohash:upstream"}, time.Hour))
		err = q.EnqueueIn(bg, queue.Job[int]{Key: "b", Group: "infohash:upstream"}, time.Hour)
		require.ErrorIs(t, err, queue.ErrDuplicate)
		require.ErrorAs(t, err, &de)
		assert.Equal(t, "infohash:upstream", de.Group)
		assert.Contains(t, err.Error(), `group "infohash:upstream"`)
	})
}

// Start(nil) is a programmer error: a panic that says so, not a nil
// dereference inside package context.
func TestMisuseStartNilContext(t *testing.T) {
	q := newQueue(t, func(context.Context, queue.Job[int]) error { return nil })
	assert.PanicsWithValue(t, "queue: Start: nil context", func() {
		//lint:ignore SA1012 the misuse under test
		_ = q.Start(nil)
	})
}

// An Enqueue whose ctx is already done is refused, with an error matching
// ctx.Err(), on every store (pgstore and redisstore must: they would use
// the ctx for the round trip), and nothing is stored.
func TestMisuseEnqueueCancelledContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ran atomic.Int32
		q := startQueue(t, func(context.Context, queue.Job[int]) error { ran.Add(1); return nil })
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := q.Enqueue(ctx, queue.Job[int]{Key: "k", Payload: 1})
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, "queue: Enqueue: context canceled", err.Error())
		require.ErrorIs(t, q.EnqueueIn(ctx, queue.Job[int]{Payload: 2}, time.Hour), context.Canceled)
		synctest.Wait()
		assert.Zero(t, ran.Load())
		st := q.Stats()
		assert.Zero(t, st.Enqueued)
		assert.Zero(t, st.Depth)
		// The key was not taken.
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{Key: "k", Payload: 1}))
	})
}

// Errors about priorities name the valid ones, and say the prefix once.
func TestMisusePriorityErrorsListTheLevels(t *testing.T) {
	q := newQueue(t, func(context.Context, queue.Job[int]) error { return nil })
	err := q.Enqueue(bg, queue.Job[int]{Priority: "urgent"})
	require.ErrorIs(t, err, queue.ErrUnknownPriority)
	assert.Equal(t, `queue: unknown priority "urgent" (the queue's priorities: high, normal, low)`, err.Error())

	err = q.Periodic("x", queue.Every(time.Minute), queue.Job[int]{Priority: "urgent"}, queue.PeriodicOptions{})
	require.ErrorIs(t, err, queue.ErrUnknownPriority)
	assert.Equal(t, `queue: Periodic("x"): unknown priority "urgent" (the queue's priorities: high, normal, low)`, err.Error())
	err = q.Periodic("x", queue.Every(time.Minute), queue.Job[int]{ID: 3}, queue.PeriodicOptions{})
	require.ErrorIs(t, err, queue.ErrInvalidJob)
	assert.Equal(t, 1, strings.Count(err.Error(), "queue:"), err.Error())
	err = q.Periodic("x", queue.Every(time.Minute), queue.Job[int]{Key: "k"}, queue.PeriodicOptions{})
	require.ErrorIs(t, err, queue.ErrInvalidJob)
	assert.Equal(t, 1, strings.Count(err.Error(), "queue:"), err.Error())

	_, err = queue.New(func(context.Context, queue.Job[int]) error { return nil }, queue.WithPriorities("urgent"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "DefaultPriorities()")
	_, err = queue.New(func(context.Context, queue.Job[int]) error { return nil },
		queue.WithPriorities("urgent", queue.DefaultPriorities()...))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"urgent" is not one of the levels (high, normal, low)`)
}
