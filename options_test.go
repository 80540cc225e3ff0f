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
		{"zero capacity", queue.WithCapacity(0), "WithCapacity", "0"},
		{"negative capacity", queue.WithCapacity(-5), "WithCapacity", "-5"},
		{"capacity above the in-memory store's", queue.WithCapacity(queue.MaxMemoryCapacity + 1), "WithCapacity", "8388609"},
		{"no bound for the in-memory store", queue.WithCapacity(math.MaxInt), "WithCapacity", "holds at most 8388608"},
		{"zero base workers", queue.WithWorkers(0, 5), "WithWorkers", "0"},
		{"negative base workers", queue.WithWorkers(-1, 5), "WithWorkers", "-1"},
		{"zero max workers", queue.WithWorkers(2, 0), "WithWorkers", "0"},
		{"max below base", queue.WithWorkers(5, 2), "WithWorkers", "5, 2"},
		{"scale-up 0", queue.WithScaleThresholds(0, 0), "WithScaleThresholds", "0"},
		{"scale-up above 100", queue.WithScaleThresholds(101, 40), "WithScaleThresholds", "101"},
		{"scale-down negative", queue.WithScaleThresholds(60, -1), "WithScaleThresholds", "-1"},
		{"scale-down above 100", queue.WithScaleThresholds(60, 101), "WithScaleThresholds", "101"},
		{"scale-down equal to scale-up", queue.WithScaleThresholds(60, 60), "WithScaleThresholds", "60, 60"},
		{"scale-down above scale-up", queue.WithScaleThresholds(40, 60), "WithScaleThresholds", "40, 60"},
		{"zero scale interval", queue.WithScaleInterval(0), "WithScaleInterval", "0s"},
		{"negative scale interval", queue.WithScaleInterval(-time.Second), "WithScaleInterval", "-1s"},
		{"unknown scale policy", queue.WithScalePolicy(queue.ScalePolicy(9)), "WithScalePolicy", "9"},
		{"zero requeue delay", queue.WithRequeueDelay(0), "WithRequeueDelay", "0s"},
		{"no priorities", queue.WithPriorities(), "WithPriorities", "[]"},
		{"empty priority name", queue.WithPriorities(queue.Priority{Name: "", Weight: 1}), "WithPriorities", "must not be empty"},
		{"duplicate priority name", queue.WithPriorities(queue.Priority{Name: "a", Weight: 1}, queue.Priority{Name: "a", Weight: 2}), "WithPriorities", "a"},
		{"duplicate priority weight", queue.WithPriorities(queue.Priority{Name: "a", Weight: 1}, queue.Priority{Name: "b", Weight: 1}), "WithPriorities", "b"},
		{"too many priorities", queue.WithPriorities(levels(33)...), "WithPriorities", "33"},
		{"empty default priority", queue.WithDefaultPriority(""), "WithDefaultPriority", `""`},
		{"unknown default priority", queue.WithDefaultPriority("urgent"), "WithDefaultPriority", "urgent"},
		{"priorities without the default", queue.WithPriorities(queue.Priority{Name: "a", Weight: 1}, queue.Priority{Name: "b", Weight: 2}), "WithDefaultPriority", "normal"},
		{"zero max attempts", queue.WithMaxAttempts(0), "WithMaxAttempts", "0"},
		{"zero backoff base", queue.WithBackoff(0, time.Second), "WithBackoff", "0s"},
		{"zero backoff max", queue.WithBackoff(time.Second, 0), "WithBackoff", "0s"},
		{"backoff max below base", queue.WithBackoff(2*time.Second, time.Second), "WithBackoff", "2s, 1s"},
		{"retry floor under 1ms", queue.WithRetryAfterBounds(time.Microsecond, time.Minute), "WithRetryAfterBounds", "1µs"},
		{"zero retry floor", queue.WithRetryAfterBounds(0, time.Minute), "WithRetryAfterBounds", "0s"},
		{"retry ceiling at the floor", queue.WithRetryAfterBounds(time.Second, time.Second), "WithRetryAfterBounds", "1s, 1s"},
		{"zero max pending", queue.WithMaxPending(0), "WithMaxPending", "0"},
		{"max pending below capacity", queue.WithMaxPending(5), "WithMaxPending", "5"},
		{"negative job timeout", queue.WithJobTimeout(-time.Second), "WithJobTimeout", "-1s"},
		{"nil clock", queue.WithClock(nil), "WithClock", "nil"},
		{"nil logger", queue.WithLogger(nil), "WithLogger", "nil"},
		{"empty name", queue.WithName(""), "WithName", `""`},
		{"nil store", queue.WithStore[int](nil), "WithStore", "nil"},
		{"store of another payload type", queue.WithStore[string](memstore.New[string]()), "WithStore", "string"},
		{"nil OnDead", queue.WithOnDead[int](nil), "WithOnDead", "nil"},
		{"OnDead of another payload type", queue.WithOnDead(func(context.Context, queue.Job[string], error) {}), "WithOnDead", "string"},
		{"rate-limit threshold negative", queue.WithRateLimit(-1, 100, 200), "WithRateLimit", "-1"},
		{"rate-limit threshold above 100", queue.WithRateLimit(101, 100, 200), "WithRateLimit", "101"},
		{"zero rate", queue.WithRateLimit(80, 0, 200), "WithRateLimit", "0"},
		{"negative rate", queue.WithRateLimit(80, -3, 200), "WithRateLimit", "-3"},
		{"zero burst", queue.WithRateLimit(80, 100, 0), "WithRateLimit", "0"},
		{"negative burst", queue.WithRateLimit(80, 100, -1), "WithRateLimit", "-1"},
		{"zero rate-limit retry", queue.WithRateLimitRefusal(0, "busy"), "WithRateLimitRefusal", "0s"},
		{"negative rate-limit retry", queue.WithRateLimitRefusal(-time.Second, ""), "WithRateLimitRefusal", "-1s"},
		{"throttle threshold negative", queue.WithThrottle(-1, 20), "WithThrottle", "-1"},
		{"throttle threshold above 100", queue.WithThrottle(101, 20), "WithThrottle", "101"},
		{"throttle top-N 0 while on", queue.WithThrottle(60, 0), "WithThrottle", "0"},
		{"throttle top-N negative while on", queue.WithThrottle(60, -2), "WithThrottle", "-2"},
		{"zero fan-out max", queue.WithFanoutMax(0), "WithFanoutMax", "0"},
		{"nil shuffle", queue.WithShuffle(nil), "WithShuffle", "nil"},
		{"zero suspension", queue.WithSuspendDuration(0), "WithSuspendDuration", "0s"},
		{"negative suspension", queue.WithSuspendDuration(-time.Minute), "WithSuspendDuration", "-1m0s"},
		{"negative disable-after", queue.WithDisableAfter(-1), "WithDisableAfter", "-1"},
		{"breaker failures 0", queue.WithCircuitBreaker(0, time.Second, 1), "WithCircuitBreaker", "0"},
		{"breaker cool-down 0", queue.WithCircuitBreaker(3, 0, 1), "WithCircuitBreaker", "0s"},
		{"breaker probes 0", queue.WithCircuitBreaker(3, time.Second, 0), "WithCircuitBreaker", "0"},
		{"negative target concurrency", queue.WithTargetConcurrency(-1), "WithTargetConcurrency", "-1"},
		{"nil should-suspend", queue.WithShouldSuspend(nil), "WithShouldSuspend", "nil"},
		{"metrics sampling 0", queue.WithMetricsSampling(0), "WithMetricsSampling", "0"},
		{"negative warn depth", queue.WithWarnDepth(-1), "WithWarnDepth", "-1"},
		{"nil observer", queue.WithObserver(nil), "WithObserver", "nil"},
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
	_, err := queue.New(nop, queue.WithCapacity(10), queue.WithMaxAttempts(0), queue.WithCapacity(-1))
	var oe *queue.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, "WithMaxAttempts", oe.Option)
}

func TestValidOptions(t *testing.T) {
	cases := []struct {
		name string
		opts []queue.Option
	}{
		{"none", nil},
		{"nil option ignored", []queue.Option{nil}},
		{"rate limiting off ignores rate and burst", []queue.Option{queue.WithRateLimit(0, 0, 0)}},
		{"throttling off ignores top-N", []queue.Option{queue.WithThrottle(0, 0)}},
		{"max equals base", []queue.Option{queue.WithWorkers(3, 3)}},
		{"thresholds at the edges", []queue.Option{queue.WithScaleThresholds(100, 0)}},
		{"one priority becomes the default", []queue.Option{queue.WithPriorities(queue.Priority{Name: "only", Weight: 0})}},
		{"default priority set before levels", []queue.Option{queue.WithDefaultPriority("b"),
			queue.WithPriorities(queue.Priority{Name: "a", Weight: 0}, queue.Priority{Name: "b", Weight: 1})}},
		{"zero job timeout", []queue.Option{queue.WithJobTimeout(0)}},
		{"disable-after and concurrency off", []queue.Option{queue.WithDisableAfter(0), queue.WithTargetConcurrency(0)}},
		{"everything", []queue.Option{
			queue.WithName("x"), queue.WithCapacity(5), queue.WithMaxPending(5), queue.WithWorkers(1, 2), queue.WithScaleThresholds(70, 30),
			queue.WithScaleInterval(time.Millisecond), queue.WithScalePolicy(queue.ScaleByDepth),
			queue.WithRequeueDelay(time.Second), queue.WithCoalesce(false), queue.WithMaxAttempts(1),
			queue.WithBackoff(time.Second, time.Second), queue.WithRetryAfterBounds(time.Millisecond, time.Minute),
			queue.WithJobTimeout(time.Second), queue.WithClock(queue.SystemClock{}),
			queue.WithStore[int](memstore.New[int]()),
			queue.WithOnDead(func(context.Context, queue.Job[int], error) {}),
			queue.WithRateLimit(50, 0.5, 1), queue.WithRateLimitRefusal(time.Second, "try later"), queue.WithThrottle(100, 1),
			queue.WithFanoutMax(1), queue.WithSuspendDuration(time.Second), queue.WithDisableAfter(1),
			queue.WithCircuitBreaker(1, time.Second, 1), queue.WithTargetConcurrency(1),
			queue.WithShouldSuspend(func(int, error) bool { return false }),
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
			q := newQueue(t, nop, queue.WithStore[int](s), queue.WithClock(clk), queue.WithCapacity(1),
				queue.WithRequeueDelay(math.MaxInt64))
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
	assert.Equal(t, map[string]int{"high": 0, "normal": 0, "low": 0}, st.ReadyByPriority)
}

// DefaultPriorities hands out a copy: changing what it returned (here, the
// default label's name and a weight) reaches neither a later call nor a
// later New, which once failed with "not one of the configured priorities".
func TestDefaultPrioritiesIsACopy(t *testing.T) {
	p := queue.DefaultPriorities()
	p[1].Name, p[2].Weight = "changed", 0
	assert.Equal(t, []queue.Priority{{Name: "high", Weight: 0}, {Name: "normal", Weight: 5}, {Name: "low", Weight: 10}},
		queue.DefaultPriorities())
	q, err := queue.New(nop)
	require.NoError(t, err, "a caller's change to the defaults must not reach a later New")
	defer func() { require.NoError(t, q.Stop(bg)) }()
	require.NoError(t, q.Enqueue(bg, queue.Job[int]{Key: "k"}))
	assert.Equal(t, map[string]int{"high": 0, "normal": 1, "low": 0}, q.Stats().ReadyByPriority)
}

func TestStoreBoundToOneQueue(t *testing.T) {
	s := memstore.New[int]()
	q, err := queue.New(nop, queue.WithStore[int](s))
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Stop(bg)) }()
	_, err = queue.New(nop, queue.WithStore[int](s))
	require.Error(t, err, "a store belongs to one queue")
	assert.False(t, errors.Is(err, queue.ErrClosed))
}
