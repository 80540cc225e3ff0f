package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/queuekit/queue"
)

func nopJob(context.Context, queue.Job[int]) error { return nil }

// The defaults configure what queue.New does given no options: each
// option receives the queue's documented default, and a queue built from
// them reports the same sizes as one built with none.
func TestDefaultConfigMatchesNew(t *testing.T) {
	got, err := DefaultQueueConfig().settings()
	require.NoError(t, err)
	assert.Equal(t, queueSettings{ // the defaults each queue option documents
		capacity: 10000, workers: 10, maxWorkers: 20,
		scaleUp: 60, scaleDown: 40,
		throttlePct: 60, throttleTopN: 20, fanoutMax: 100,
		ratePct: 80, ratePerSec: 100, rateBurst: 200,
		retryAfter: 10 * time.Second, suspend: 300 * time.Second,
		attempts: 3, backoffBase: time.Second, backoffMax: 5 * time.Minute,
	}, got)
	opts, err := DefaultQueueConfig().Options()
	require.NoError(t, err)
	configured, err := queue.New(nopJob, opts...)
	require.NoError(t, err)
	plain, err := queue.New(nopJob)
	require.NoError(t, err)
	c, p := configured.Stats(), plain.Stats()
	assert.Equal(t, []int{p.Capacity, p.BaseWorkers, p.MaxWorkers}, []int{c.Capacity, c.BaseWorkers, c.MaxWorkers})
}

// bindings lists every flag and environment name with the field each
// sets and a value to set it to.
var bindings = []struct {
	flag, env, value string
	get              func(QueueConfig) any
	want             any
}{
	{"Q", "FORWARDER_QUEUE_SIZE", "500", func(c QueueConfig) any { return c.QueueSize }, 500},
	{"w", "FORWARDER_WORKERS", "3", func(c QueueConfig) any { return c.Workers }, 3},
	{"W", "MAX_FORWARDER_WORKERS", "9", func(c QueueConfig) any { return c.MaxWorkers }, 9},
	{"queue-scale-threshold", "QUEUE_SCALE_THRESHOLD", "70", func(c QueueConfig) any { return c.ScaleThresholdPct }, 70},
	{"queue-throttle-threshold", "QUEUE_THROTTLE_THRESHOLD", "65", func(c QueueConfig) any { return c.ThrottleThresholdPct }, 65},
	{"queue-throttle-top", "QUEUE_THROTTLE_TOP", "7", func(c QueueConfig) any { return c.ThrottleTopN }, 7},
	{"max-forwarders-per-announce", "MAX_FORWARDERS_PER_ANNOUNCE", "40", func(c QueueConfig) any { return c.FanoutMax }, 40},
	{"queue-rate-limit-threshold", "QUEUE_RATE_LIMIT_THRESHOLD", "0", func(c QueueConfig) any { return c.RateLimitThresholdPct }, 0},
	{"rate-limit-initial-ps", "RATE_LIMIT_INITIAL_PER_SEC", "2.5", func(c QueueConfig) any { return c.RateLimitPerSec }, 2.5},
	{"rate-limit-initial-burst", "RATE_LIMIT_INITIAL_BURST", "15", func(c QueueConfig) any { return c.RateLimitBurst }, 15},
	{"rate-limit-retry", "RATE_LIMIT_RETRY_SECONDS", "30", func(c QueueConfig) any { return c.RateLimitRetrySeconds }, 30},
	{"forwarder-suspend", "FORWARDER_SUSPEND_SECONDS", "120", func(c QueueConfig) any { return c.SuspendSeconds }, 120},
	{"forwarder-retry-attempts", "FORWARDER_RETRY_ATTEMPTS", "5", func(c QueueConfig) any { return c.RetryAttempts }, 5},
	{"forwarder-retry-base-ms", "FORWARDER_RETRY_BASE_MS", "250", func(c QueueConfig) any { return c.RetryBaseMs }, 250},
}

func TestRegisterFlagsNames(t *testing.T) {
	for _, tc := range bindings {
		t.Run(tc.flag, func(t *testing.T) {
			c := DefaultQueueConfig()
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			c.RegisterFlags(fs)
			// Two dashes, as operators write the long names.
			require.NoError(t, fs.Parse([]string{"--" + tc.flag, tc.value}))
			assert.Equal(t, tc.want, tc.get(c))
			f := fs.Lookup(tc.flag)
			require.NotNil(t, f)
			assert.Contains(t, f.Usage, "env "+tc.env, "usage names the variable")
		})
	}
}

func TestRegisterFlagsDocumentsDefaults(t *testing.T) {
	c := DefaultQueueConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var out bytes.Buffer
	fs.SetOutput(&out)
	c.RegisterFlags(fs)
	fs.PrintDefaults()
	help := out.String()
	for _, want := range []string{
		"-Q N", "(default 10000)", "-w N", "(default 10)", "0, the default, means twice -w",
		"-queue-scale-threshold PCT", "(default 60)", "-queue-throttle-top N", "(default 20)",
		"-queue-rate-limit-threshold PCT", "(default 80)", "0 disables rate limiting",
		"-rate-limit-initial-ps TOKENS", "(default 100)", "(default 200)",
		"-forwarder-suspend SECONDS", "(default 300s)", "(default 3)", "(default 1000)",
	} {
		assert.Contains(t, help, want)
	}
	assert.Len(t, strings.Split(strings.TrimSpace(help), "\n"), 2*len(bindings), "one flag per binding")
}

func TestRegisterFlagsRejectsGarbage(t *testing.T) {
	c := DefaultQueueConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(&bytes.Buffer{})
	c.RegisterFlags(fs)
	err := fs.Parse([]string{"-Q", "lots"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "-Q")
	assert.Equal(t, 10000, c.QueueSize)
}

func TestFromEnvNames(t *testing.T) {
	for _, tc := range bindings {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			c := DefaultQueueConfig()
			require.NoError(t, c.FromEnv(""))
			assert.Equal(t, tc.want, tc.get(c))
		})
	}
}

func TestFromEnvPrefix(t *testing.T) {
	t.Setenv("FORWARDER_QUEUE_SIZE", "111")
	t.Setenv("RT_FORWARDER_QUEUE_SIZE", "222")
	c := DefaultQueueConfig()
	require.NoError(t, c.FromEnv("RT_"))
	assert.Equal(t, 222, c.QueueSize)
}

func TestFromEnvLeavesUnsetAndEmptyAlone(t *testing.T) {
	t.Setenv("FORWARDER_WORKERS", "")
	c := DefaultQueueConfig()
	require.NoError(t, c.FromEnv(""))
	assert.Equal(t, DefaultQueueConfig(), c)
}

func TestFromEnvMalformedNamesTheVariable(t *testing.T) {
	t.Setenv("FORWARDER_QUEUE_SIZE", "10k")
	t.Setenv("FORWARDER_SUSPEND_SECONDS", "1.5s")
	t.Setenv("RATE_LIMIT_INITIAL_PER_SEC", "fast")
	t.Setenv("FORWARDER_WORKERS", " 7 ")
	c := DefaultQueueConfig()
	err := c.FromEnv("")
	require.Error(t, err)
	for _, name := range []string{"FORWARDER_QUEUE_SIZE", "FORWARDER_SUSPEND_SECONDS", "RATE_LIMIT_INITIAL_PER_SEC"} {
		assert.Contains(t, err.Error(), name)
	}
	assert.NotContains(t, err.Error(), "FORWARDER_WORKERS")
	assert.Equal(t, 7, c.Workers, "well-formed variables are applied")
	assert.Equal(t, 10000, c.QueueSize, "malformed ones are not")
}

func TestSecondsAcceptDurations(t *testing.T) {
	for in, want := range map[string]int{"300": 300, "5m": 300, "90s": 90, "1h": 3600} {
		c := DefaultQueueConfig()
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		c.RegisterFlags(fs)
		require.NoError(t, fs.Parse([]string{"-forwarder-suspend", in}), in)
		assert.Equal(t, want, c.SuspendSeconds, in)
	}
}

func TestFlagsWinOverEnv(t *testing.T) {
	t.Setenv("FORWARDER_QUEUE_SIZE", "300")
	t.Setenv("FORWARDER_WORKERS", "2")
	c := DefaultQueueConfig()
	require.NoError(t, c.FromEnv(""))
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"-Q", "400"}))
	assert.Equal(t, 400, c.QueueSize)
	assert.Equal(t, 2, c.Workers)
}

func TestConfigOptions(t *testing.T) {
	c := DefaultQueueConfig()
	c.QueueSize, c.Workers, c.MaxWorkers = 50, 3, 0
	c.ScaleThresholdPct = 90
	c.ThrottleThresholdPct, c.ThrottleTopN, c.FanoutMax = 70, 5, 8
	c.RateLimitThresholdPct, c.RateLimitPerSec, c.RateLimitBurst, c.RateLimitRetrySeconds = 85, 7.5, 9, 20
	c.SuspendSeconds, c.RetryAttempts, c.RetryBaseMs = 60, 4, 400
	got, err := c.settings()
	require.NoError(t, err)
	assert.Equal(t, 50, got.capacity)
	assert.Equal(t, 3, got.workers)
	assert.Equal(t, 6, got.maxWorkers, "0 max workers means twice the base")
	assert.Equal(t, 90, got.scaleUp)
	assert.Equal(t, 60, got.scaleDown)
	assert.Equal(t, 70, got.throttlePct)
	assert.Equal(t, 5, got.throttleTopN)
	assert.Equal(t, 8, got.fanoutMax)
	assert.Equal(t, []any{85, 7.5, 9, 20 * time.Second}, []any{got.ratePct, got.ratePerSec, got.rateBurst, got.retryAfter})
	assert.Equal(t, time.Minute, got.suspend)
	assert.Equal(t, 4, got.attempts)
	assert.Equal(t, 400*time.Millisecond, got.backoffBase)
	assert.Equal(t, 5*time.Minute, got.backoffMax, "the queue's default")

	opts, err := c.Options()
	require.NoError(t, err)
	q, err := queue.New(nopJob, opts...)
	require.NoError(t, err, "the options pass New's checks, relations included")
	st := q.Stats()
	assert.Equal(t, []int{50, 3, 6}, []int{st.Capacity, st.BaseWorkers, st.MaxWorkers})
}

// A refused client reads the tracker's wording, with the configured hint.
func TestConfigRefusalWording(t *testing.T) {
	c := DefaultQueueConfig()
	c.QueueSize, c.RateLimitThresholdPct, c.RateLimitPerSec, c.RateLimitBurst, c.RateLimitRetrySeconds = 10, 50, 1, 1, 20
	opts, err := c.Options()
	require.NoError(t, err)
	q, err := queue.New(nopJob, opts...)
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, q.Enqueue(context.Background(), queue.Job[int]{}))
	}
	require.NoError(t, q.Admit(), "the burst")
	err = q.Admit()
	require.ErrorIs(t, err, queue.ErrRateLimited)
	assert.Equal(t, "tracker busy, retry in 20 seconds", err.Error())
	d, _ := queue.RetryDelay(err)
	assert.Equal(t, 20*time.Second, d)
}

func TestConfigRateLimitZeroDisables(t *testing.T) {
	c := DefaultQueueConfig()
	c.RateLimitThresholdPct, c.RateLimitPerSec, c.RateLimitBurst = 0, 0, 0
	require.NoError(t, c.Validate())
	opts, err := c.Options()
	require.NoError(t, err)
	q, err := queue.New(nopJob, opts...)
	require.NoError(t, err)
	assert.NoError(t, q.Admit())
}

func TestConfigValidate(t *testing.T) {
	// Variables, not constants: the cases that use them need 64-bit ints
	// (they are skipped elsewhere), and the test must build everywhere.
	wrap, max64, min64 := int64(18446744074), int64(math.MaxInt64), int64(math.MinInt64)
	wide := map[string]bool{"suspend wraps": true, "suspend just too long": true, "suspend far negative": true,
		"retry hint just too long": true, "retry base just too long": true, "retry base far negative": true}
	for name, tc := range map[string]struct {
		mut    func(*QueueConfig)
		option string
	}{
		"negative size":             {func(c *QueueConfig) { c.QueueSize = -1 }, "WithCapacity"},
		"max below base":            {func(c *QueueConfig) { c.Workers, c.MaxWorkers = 10, 5 }, "WithWorkers"},
		"threshold over 100":        {func(c *QueueConfig) { c.ThrottleThresholdPct = 101 }, "WithFanout"},
		"rate-limit negative burst": {func(c *QueueConfig) { c.RateLimitBurst = -1 }, "WithRateLimit"},
		"negative suspend":          {func(c *QueueConfig) { c.SuspendSeconds = -1 }, "WithSuspend"},
		"negative attempts":         {func(c *QueueConfig) { c.RetryAttempts = -1 }, "WithRetry"},
		"negative backoff":          {func(c *QueueConfig) { c.RetryBaseMs = -1 }, "WithRetry"},
		"scale threshold negative":  {func(c *QueueConfig) { c.ScaleThresholdPct = -3 }, "WithScaling"},
		// QueueConfig names no store: New uses the in-memory one.
		"size above memory limit": {func(c *QueueConfig) { c.QueueSize = 1<<23 + 1 /* above the in-memory store's limit */ }, "WithCapacity"},
		// n·unit must not wrap: 18446744074 s is 2^64 ns + 0.29 s.
		"suspend wraps":            {func(c *QueueConfig) { c.SuspendSeconds = int(wrap) }, "QueueConfig.SuspendSeconds"},
		"suspend just too long":    {func(c *QueueConfig) { c.SuspendSeconds = int(max64/int64(time.Second) + 1) }, "QueueConfig.SuspendSeconds"},
		"suspend far negative":     {func(c *QueueConfig) { c.SuspendSeconds = int(-wrap) }, "QueueConfig.SuspendSeconds"},
		"retry hint just too long": {func(c *QueueConfig) { c.RateLimitRetrySeconds = int(max64/int64(time.Second) + 1) }, "QueueConfig.RateLimitRetrySeconds"},
		"retry base just too long": {func(c *QueueConfig) { c.RetryBaseMs = int(max64/int64(time.Millisecond) + 1) }, "QueueConfig.RetryBaseMs"},
		"retry base far negative":  {func(c *QueueConfig) { c.RetryBaseMs = int(min64 / int64(time.Millisecond) * 2) }, "QueueConfig.RetryBaseMs"},
		"negative retry hint":      {func(c *QueueConfig) { c.RateLimitRetrySeconds = -1 }, "WithRateLimit"},
	} {
		t.Run(name, func(t *testing.T) {
			if wide[name] && strconv.IntSize < 64 {
				t.Skip("the value does not fit a", strconv.IntSize, "bit int")
			}
			c := DefaultQueueConfig()
			tc.mut(&c)
			err := c.Validate()
			var oe *queue.OptionError
			require.True(t, errors.As(err, &oe), "got %v", err)
			assert.Equal(t, tc.option, oe.Option)
			// Options or New agrees: a count too large for a Duration
			// stops at Options, any other bad value at New.
			opts, err := c.Options()
			if err == nil {
				_, err = queue.New(nopJob, opts...)
			}
			require.True(t, errors.As(err, &oe), "Options or New agrees: %v", err)
			assert.Equal(t, tc.option, oe.Option)
		})
	}
}

// The largest counts that fit in a time.Duration pass, and mean what they
// say.
func TestConfigLongestDurations(t *testing.T) {
	if strconv.IntSize < 64 {
		t.Skip("the counts do not fit a", strconv.IntSize, "bit int")
	}
	max64 := int64(math.MaxInt64) // a variable: the test builds everywhere
	c := DefaultQueueConfig()
	c.SuspendSeconds = int(max64 / int64(time.Second))
	c.RateLimitRetrySeconds = int(max64 / int64(time.Second))
	c.RetryBaseMs = int(max64 / int64(time.Millisecond))
	require.NoError(t, c.Validate())
	const years290 = 290 * 365 * 24 * time.Hour
	got, err := c.settings()
	require.NoError(t, err)
	assert.Greater(t, got.suspend, years290)
	assert.Greater(t, got.retryAfter, years290)
	assert.Greater(t, got.backoffBase, years290)
	opts, err := c.Options()
	require.NoError(t, err)
	q, err := queue.New(nopJob, opts...)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, q.Suspend("t", 0)) // 0: the configured duration
	st, _ := q.Target("t")
	assert.Greater(t, st.SuspendedUntil.Sub(now), years290)
}

// MaxWorkers 0 means twice Workers, saturated rather than wrapped.
func TestConfigMaxWorkersSaturates(t *testing.T) {
	c := DefaultQueueConfig()
	c.Workers, c.MaxWorkers = math.MaxInt/2+1, 0
	got, err := c.settings()
	require.NoError(t, err)
	assert.Equal(t, math.MaxInt, got.maxWorkers)
}

func TestConfigJSONTags(t *testing.T) {
	var c QueueConfig
	require.NoError(t, json.Unmarshal([]byte(`{"queue_size": 42, "workers": 2, "max_workers": 4,
		"throttle_top_n": 3, "rate_limit_per_sec": 1.5, "suspend_seconds": 9}`), &c))
	assert.Equal(t, QueueConfig{QueueSize: 42, Workers: 2, MaxWorkers: 4, ThrottleTopN: 3, RateLimitPerSec: 1.5, SuspendSeconds: 9}, c)
	b, err := json.Marshal(DefaultQueueConfig())
	require.NoError(t, err)
	assert.Contains(t, string(b), `"rate_limit_threshold_pct":80`)
}
