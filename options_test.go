package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/internal/memstore"
	"github.com/queuekit/queue/queuetest"
)

func nop(context.Context, queue.Job[int]) error { return nil }

func TestInvalidOptions(t *testing.T) {
	levels := func(n int) []queue.Priority {
		out := make([]queue.Priority, n)
		for i := range out {
			out[i] = queue.Priority{Name: fmt.Sprintf("p%d", i), Weight: i}
		}
		return out
	}
	cases := []struct {
		name   string
		opt    queue.Option
		option string // the option the error must name
		value  string // text the error must contain
	}{
		{"negative capacity", queue.WithCapacity(-5, 0), "WithCapacity", "-5"},
		{"capacity above the in-memory store's", queue.WithCapacity(1<<23+1, 0), "WithCapacity", "8388609"},
		{"no bound for the in-memory store", queue.WithCapacity(math.MaxInt, 0), "WithCapacity", "holds at most 8388608"},
		{"negative pending", queue.WithCapacity(10, -1), "WithCapacity", "-1"},
		{"pending below capacity", queue.WithCapacity(10000, 5), "WithCapacity", "10000, 5"},
		{"negative base workers", queue.WithWorkers(-1, 5), "WithWorkers", "-1"},
		{"max below base", queue.WithWorkers(5, 2), "WithWorkers", "5, 2"},
		{"scale-up negative", queue.WithScaling(queue.ScaleByFill, -1, 0, 0), "WithScaling", "-1"},
		{"scale-up above 100", queue.WithScaling(queue.ScaleByFill, 101, 40, 0), "WithScaling", "101"},
		{"scale-down negative", queue.WithScaling(queue.ScaleByFill, 60, -1, 0), "WithScaling", "-1"},
		{"scale-down above 100", queue.WithScaling(queue.ScaleByFill, 60, 101, 0), "WithScaling", "101"},
		{"scale-down equal to scale-up", queue.WithScaling(queue.ScaleByFill, 60, 60, 0), "WithScaling", "60, 60"},
		{"scale-down above scale-up", queue.WithScaling(queue.ScaleByFill, 40, 60, 0), "WithScaling", "40, 60"},
		{"scale-up below the default scale-down", queue.WithScaling(queue.ScaleByFill, 30, 0, 0), "WithScaling", "30, 40"},
		{"scale interval under 1ms", queue.WithScaling(queue.ScaleByFill, 0, 0, time.Microsecond), "WithScaling", "1µs"},
		{"negative scale interval", queue.WithScaling(queue.ScaleByFill, 0, 0, -time.Second), "WithScaling", "-1s"},
		{"unknown scale policy", queue.WithScaling(queue.ScalePolicy(9), 0, 0, 0), "WithScaling", "9"},
		{"empty priority name", queue.WithPriorities("", queue.Priority{Name: "", Weight: 1}), "WithPriorities", "must not be empty"},
		{"duplicate priority name", queue.WithPriorities("", queue.Priority{Name: "a", Weight: 1}, queue.Priority{Name: "a", Weight: 2}), "WithPriorities", "a"},
		{"duplicate priority weight", queue.WithPriorities("", queue.Priority{Name: "a", Weight: 1}, queue.Priority{Name: "b", Weight: 1}), "WithPriorities", "b"},
		{"too many priorities", queue.WithPriorities("", levels(33)...), "WithPriorities", "33"},
		{"unknown default priority", queue.WithPriorities("urgent", queue.DefaultPriorities()...), "WithPriorities", "urgent"},
		{"priorities without the default", queue.WithPriorities("", queue.Priority{Name: "a", Weight: 1}, queue.Priority{Name: "b", Weight: 2}), "WithPriorities", "normal"},
		{"negative max attempts", queue.WithRetry(-1, 0, 0), "WithRetry", "-1"},
		{"negative backoff base", queue.WithRetry(0, -time.Second, 0), "WithRetry", "-1s"},
		{"negative backoff max", queue.WithRetry(0, time.Second, -time.Second), "WithRetry", "-1s"},
		{"backoff max below base", queue.WithRetry(0, 2*time.Second, time.Second), "WithRetry", "2s, 1s"},
		{"backoff max below the default base", queue.WithRetry(0, 0, time.Millisecond), "WithRetry", "1s, 1ms"},
		{"retry floor under 1ms", queue.WithRetryAfterBounds(time.Microsecond, time.Minute), "WithRetryAfterBounds", "1µs"},
		{"retry ceiling at the floor", queue.WithRetryAfterBounds(time.Second, time.Second), "WithRetryAfterBounds", "1s, 1s"},
		{"negative job timeout", queue.WithJobTimeout(-time.Second), "WithJobTimeout", "-1s"},
		{"negative max workers", queue.WithWorkers(0, -1), "WithWorkers", "-1"},
		{"negative requeue delay", queue.WithRequeueDelay(-time.Second), "WithRequeueDelay", "-1s"},
		{"requeue delay under 1ms", queue.WithRequeueDelay(time.Microsecond), "WithRequeueDelay", "1µs"},
		{"unknown default label, default levels", queue.WithPriorities("urgent"), "WithPriorities", "DefaultPriorities()"},
		{"negative retry ceiling", queue.WithRetryAfterBounds(0, -time.Second), "WithRetryAfterBounds", "-1s"},
		{"retry ceiling below the default floor", queue.WithRetryAfterBounds(0, time.Millisecond), "WithRetryAfterBounds", "1s, 1ms"},
		{"pending below the default ready", queue.WithCapacity(0, 5), "WithCapacity", "10000, 5"},
		{"breaker failures negative", queue.WithCircuitBreaker(-1, time.Second, 1), "WithCircuitBreaker", "-1"},
		{"breaker cool-down negative", queue.WithCircuitBreaker(3, -time.Second, 1), "WithCircuitBreaker", "-1s"},
		{"breaker probes negative", queue.WithCircuitBreaker(3, time.Second, -1), "WithCircuitBreaker", "-1"},
		{"rate-limit threshold negative", queue.WithRateLimit(queue.RateLimit{FillPct: -1}), "WithRateLimit", "-1"},
		{"rate-limit threshold above 100", queue.WithRateLimit(queue.RateLimit{FillPct: 101}), "WithRateLimit", "101"},
		{"NaN rate", queue.WithRateLimit(queue.RateLimit{PerSecond: math.NaN()}), "WithRateLimit", "NaN"},
		{"infinite rate", queue.WithRateLimit(queue.RateLimit{PerSecond: math.Inf(1)}), "WithRateLimit", "Inf"},
		{"negative rate", queue.WithRateLimit(queue.RateLimit{PerSecond: -3}), "WithRateLimit", "-3"},
		{"negative burst", queue.WithRateLimit(queue.RateLimit{Burst: -1}), "WithRateLimit", "-1"},
		{"negative rate-limit retry", queue.WithRateLimit(queue.RateLimit{RetryAfter: -time.Second}), "WithRateLimit", "-1s"},
		{"throttle threshold negative", queue.WithFanout(0, -1, 20), "WithFanout", "-1"},
		{"throttle threshold above 100", queue.WithFanout(0, 101, 20), "WithFanout", "101"},
		{"throttle top-N negative", queue.WithFanout(0, 60, -2), "WithFanout", "-2"},
		{"negative fan-out max", queue.WithFanout(-1, 0, 0), "WithFanout", "-1"},
		{"negative suspension", queue.WithSuspend(-time.Minute, nil), "WithSuspend", "-1m0s"},
		{"negative disable-after", queue.WithDisableAfter(-1), "WithDisableAfter", "-1"},
		{"negative target concurrency", queue.WithTargetConcurrency(-1), "WithTargetConcurrency", "-1"},
		{"negative metrics sampling", queue.WithMetrics(nil, -1), "WithMetrics", "-1"},
		{"negative warn depth", queue.WithWarnDepth(-1), "WithWarnDepth", "-1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := queue.New(nop, tc.opt)
			require.Error(t, err)
			assert.Nil(t, q)
			var oe *queue.OptionError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, tc.option, oe.Option)
			assert.NotEmpty(t, oe.Reason)
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "queue: invalid option "+tc.option+"("), msg)
			assert.Contains(t, msg, tc.value)
		})
	}
}

func TestFirstBadOptionReported(t *testing.T) {
	_, err := queue.New(nop, queue.WithCapacity(10, 0), queue.WithRetry(-1, 0, 0), queue.WithCapacity(-1, 0))
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "WithRetry", oe.Option)
}

func TestValidOptions(t *testing.T) {
	cases := []struct {
		name string
		opts []queue.Option
	}{
		{"none", nil},
		{"nil option ignored", []queue.Option{nil}},
		{"rate limiting off ignores rate and burst", []queue.Option{queue.WithRateLimit(queue.RateLimit{Disabled: true})}},
		{"throttling off ignores top-N", []queue.Option{queue.WithFanout(0, 0, math.MaxInt)}},
		{"max equals base", []queue.Option{queue.WithWorkers(3, 3)}},
		{"thresholds at the edges", []queue.Option{queue.WithScaling(queue.ScaleByFill, 100, 0, 0)}},
		{"one priority becomes the default", []queue.Option{queue.WithPriorities("", queue.Priority{Name: "only", Weight: 0})}},
		{"default priority named with the levels", []queue.Option{
			queue.WithPriorities("b", queue.Priority{Name: "a", Weight: 0}, queue.Priority{Name: "b", Weight: 1})}},
		{"zeros keep the defaults", []queue.Option{queue.WithCapacity(0, 0), queue.WithWorkers(0, 0), queue.WithRequeueDelay(0),
			queue.WithRetryAfterBounds(0, 0), queue.WithCircuitBreaker(0, 0, 0), queue.WithName(""), queue.WithPriorities(""),
			queue.WithClock(nil), queue.WithLogger(nil), queue.WithShuffle(nil), queue.WithObserver(nil), queue.WithCapacity(1, 0), queue.WithScaling(queue.ScaleByFill, 0, 0, 0),
			queue.WithRetry(0, 0, 0), queue.WithRateLimit(queue.RateLimit{}), queue.WithFanout(0, 0, 0), queue.WithSuspend(0, nil),
			queue.WithMetrics(nil, 0)}},
		{"zero job timeout", []queue.Option{queue.WithJobTimeout(0)}},
		{"disable-after and concurrency off", []queue.Option{queue.WithDisableAfter(0), queue.WithTargetConcurrency(0)}},
		{"everything", []queue.Option{
			queue.WithName("x"), queue.WithCapacity(5, 5), queue.WithWorkers(1, 2), queue.WithScaling(queue.ScaleByDepth, 70, 30, time.Millisecond),
			queue.WithRequeueDelay(time.Second), queue.WithCoalesce(false), queue.WithRetry(1, time.Second, time.Second), queue.WithRetryAfterBounds(time.Millisecond, time.Minute),
			queue.WithJobTimeout(time.Second), queue.WithClock(timeClock{}),
			queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 0.5, Burst: 1, RetryAfter: time.Second, Reason: "try later"}), queue.WithFanout(1, 100, 1), queue.WithSuspend(time.Second, nil), queue.WithDisableAfter(1),
			queue.WithCircuitBreaker(1, time.Second, 1), queue.WithTargetConcurrency(1),
			queue.WithSuspend(0, func(int, error) bool { return false }),
			queue.WithShuffle(func(int, func(i, j int)) {}),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := queue.New(nop, tc.opts...)
			require.NoError(t, err)
			require.NoError(t, q.Stop(bg))
		})
	}
	t.Run("everything, on a store", func(t *testing.T) {
		q, err := queue.NewWithStore(memstore.New[int](), nop, cases[len(cases)-1].opts...)
		require.NoError(t, err)
		q.OnDead(func(context.Context, queue.Job[int], error) {})
		require.NoError(t, q.Stop(bg))
	})
}

// The store and the dead-letter hook are typed by the queue's payload, so
// the compiler refuses one of another type; what remains to check at run
// time is nil.
func TestNilStoreAndHook(t *testing.T) {
	_, err := queue.NewWithStore[int](nil, nop)
	require.ErrorContains(t, err, "queue: NewWithStore: the store is nil")
	_, err = queue.NewWithStore[int](memstore.New[int](), nil)
	require.ErrorContains(t, err, "queue: NewWithStore: the handler is nil")
	q := newQueue(t, nop)
	assert.PanicsWithValue(t, "queue: OnDead: nil hook", func() { q.OnDead(nil) })
}

// Like every duration option, WithRequeueDelay has no upper bound. A delay
// near math.MaxInt64 must keep a due job that finds the ready queue full
// out of the way for that long: were now+delay to wrap into the past, the
// job would be promoted, found no room and requeued again at once, in a hot
// loop on the scheduler goroutine.
func TestRequeueDelayHuge(t *testing.T) {
	for name, setup := range map[string]func(t *testing.T, q *queue.Queue[int], s *memstore.Store[int], clk *queuetest.FakeClock){
		"scheduled job due": func(t *testing.T, q *queue.Queue[int], _ *memstore.Store[int], clk *queuetest.FakeClock) {
			require.NoError(t, q.EnqueueIn(bg, queue.Job[int]{Payload: 2}, time.Second))
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 1})) // the ready queue is full
			clk.Advance(time.Second)
		},
		"coalesced rerun released": func(t *testing.T, q *queue.Queue[int], s *memstore.Store[int], _ *queuetest.FakeClock) {
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "k", Payload: 1}))
			j, err := s.Claim(bg)
			require.NoError(t, err)
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "k", Payload: 2})) // k's rerun
			require.NoError(t, q.Enqueue(bg, queue.Job[int]{Payload: 3}))           // the ready queue is full
			require.NoError(t, s.Complete(bg, j))                                   // the rerun finds no room
		},
	} {
		t.Run(name, func(t *testing.T) {
			clk := queuetest.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
			s := memstore.New[int]()
			q := newStoreQueue(t, s, nop, queue.WithClock(clk), queue.WithCapacity(1, 0), queue.WithRequeueDelay(math.MaxInt64))
			setup(t, q, s, clk)
			for range 3 {
				n, err := s.PromoteDue(bg)
				require.NoError(t, err)
				require.Zero(t, n)
			}
			next, err := s.Scheduled(bg, 1)
			require.NoError(t, err)
			require.Len(t, next, 1)
			assert.Greater(t, next[0].RunAt.Sub(clk.Now()), 200*365*24*time.Hour, "requeued to %v", next[0].RunAt)
			assert.LessOrEqual(t, q.Stats().Requeued, uint64(1), "requeued at most once, not at every promotion")
		})
	}
}

func TestDefaults(t *testing.T) {
	q, err := queue.New(nop)
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Stop(bg)) }()
	st := q.Stats()
	assert.Equal(t, "default", st.Name)
	assert.Equal(t, 10000, st.Capacity)
	assert.Equal(t, 10, st.BaseWorkers)
	assert.Equal(t, 20, st.MaxWorkers)
	assert.Equal(t, "new", st.State)
	assert.Equal(t, map[string]int{"high": 0, "normal": 0, "low": 0}, st.Store.ReadyByPriority)
}

// DefaultPriorities hands out a copy: changing what it returned (here, the
// default label's name and a weight) reaches neither a later call nor a
// later New, which once failed with "not one of the configured priorities".
func TestDefaultPrioritiesIsACopy(t *testing.T) {
	p := queue.DefaultPriorities()
	p[1].Name, p[2].Weight = "changed", 0
	assert.Equal(t, []queue.Priority{{Name: "high", Weight: 0, Share: 6}, {Name: "normal", Weight: 5, Share: 3}, {Name: "low", Weight: 10, Share: 1}},
		queue.DefaultPriorities())
	q, err := queue.New(nop)
	require.NoError(t, err, "a caller's change to the defaults must not reach a later New")
	defer func() { require.NoError(t, q.Stop(bg)) }()
	require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "k"}))
	assert.Equal(t, map[string]int{"high": 0, "normal": 1, "low": 0}, q.Stats().Store.ReadyByPriority)
}

func TestStoreBoundToOneQueue(t *testing.T) {
	s := memstore.New[int]()
	q, err := queue.NewWithStore(s, nop)
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Stop(bg)) }()
	_, err = queue.NewWithStore(s, nop)
	require.Error(t, err, "a store belongs to one queue")
	assert.False(t, errors.Is(err, queue.ErrClosed))
}
