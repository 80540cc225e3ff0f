package queue

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One rule for every option: a zero argument (0, "", nil, an empty
// struct) keeps that setting's default. Each option is given only zeros
// and must leave the configuration as New builds it without options;
// WithCircuitBreaker changes only what it counts (every failure, not only
// timeouts), keeping the numbers.
func TestZeroArgumentsKeepTheDefaults(t *testing.T) {
	want := defaultConfig()
	require.NoError(t, want.validate())
	brk := want
	brk.targets.brkTimeouts = false
	for name, tc := range map[string]struct {
		opt  Option
		want config
	}{
		"WithName":              {WithName(""), want},
		"WithCapacity":          {WithCapacity(0, 0), want},
		"WithWorkers":           {WithWorkers(0, 0), want},
		"WithScaling":           {WithScaling(0, 0, 0, 0), want},
		"WithRequeueDelay":      {WithRequeueDelay(0), want},
		"WithPriorities":        {WithPriorities(""), want},
		"WithRetry":             {WithRetry(0, 0, 0), want},
		"WithRetryAfterBounds":  {WithRetryAfterBounds(0, 0), want},
		"WithJobTimeout":        {WithJobTimeout(0), want},
		"WithClock":             {WithClock(nil), want},
		"WithLogger":            {WithLogger(nil), want},
		"WithRateLimit":         {WithRateLimit(RateLimit{}), want},
		"WithSuspend":           {WithSuspend(0, nil), want},
		"WithDisableAfter":      {WithDisableAfter(0), want},
		"WithCircuitBreaker":    {WithCircuitBreaker(0, 0, 0), brk},
		"WithTargetConcurrency": {WithTargetConcurrency(0), want},
		"WithFanout":            {WithFanout(0, 0, 0), want},
		"WithShuffle":           {WithShuffle(nil), want},
		"WithMetrics":           {WithMetrics(nil, 0), want},
		"WithObserver":          {WithObserver(nil), want},
		"WithWarnDepth":         {WithWarnDepth(0), want},
	} {
		t.Run(name, func(t *testing.T) {
			c := defaultConfig()
			require.NoError(t, tc.opt(&c))
			require.NoError(t, c.validate())
			// %#v prints func fields as their addresses: the same default
			// func prints the same.
			assert.Equal(t, fmt.Sprintf("%#v", tc.want), fmt.Sprintf("%#v", c))
		})
	}
}

// A zero argument keeps the setting as an earlier option left it, and a
// zero bound of a pair gives way to the other bound.
func TestZeroArgumentsBesideOthers(t *testing.T) {
	c := defaultConfig()
	require.NoError(t, WithWorkers(50, 0)(&c))
	assert.Equal(t, [2]int{50, 50}, [2]int{c.baseWorkers, c.maxWorkers}, "max 0 with base above the default max")
	require.NoError(t, WithWorkers(0, 4)(&c))
	assert.Equal(t, [2]int{4, 4}, [2]int{c.baseWorkers, c.maxWorkers}, "base 0 with max below the default base")
	c = defaultConfig()
	require.NoError(t, WithWorkers(2, 0)(&c))
	assert.Equal(t, [2]int{2, defaultMaxWorkers}, [2]int{c.baseWorkers, c.maxWorkers})
	require.NoError(t, WithRequeueDelay(time.Minute)(&c))
	require.NoError(t, WithRequeueDelay(0)(&c))
	assert.Equal(t, time.Minute, c.requeueDelay, "0 keeps what the earlier option set")
	require.NoError(t, WithCapacity(5, 0)(&c))
	require.NoError(t, c.validate())
	assert.Equal(t, [2]int{5, 500}, [2]int{c.capacity, c.maxPending})
}
