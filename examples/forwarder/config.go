package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/queuekit/queue"
)

// QueueConfig is the forwarder's queue settings as plain fields, so that
// they can come from flags, from the environment, from a JSON or TOML
// file, or be set by hand, and be turned into queue options with
// [QueueConfig.Options]:
//
//	cfg := DefaultQueueConfig()
//	if err := cfg.FromEnv(""); err != nil { ... }  // FORWARDER_QUEUE_SIZE=...
//	cfg.RegisterFlags(flag.CommandLine)           // -Q, -w, -W, --queue-scale-threshold, ...
//	flag.Parse()
//	opts, err := cfg.Options()
//
// The queue library itself is configured by options only; this binding
// lives with the forwarder because its flag and variable names are a
// tracker's (FORWARDER_*, --max-forwarders-per-announce). Registered
// after FromEnv, flags take their defaults from the environment, so a
// flag given on the command line wins over a variable and a variable wins
// over the built-in default. The zero QueueConfig is not useful: start
// from DefaultQueueConfig. Values are checked by queue.New (or
// [QueueConfig.Validate]), not by the binding, which only rejects text
// that is not a number.
type QueueConfig struct {
	// QueueSize bounds the ready queue (queue.WithCapacity). Default 10000.
	QueueSize int `json:"queue_size" toml:"queue_size"`
	// Workers is the number of workers always running
	// (queue.WithWorkers). Default 10.
	Workers int `json:"workers" toml:"workers"`
	// MaxWorkers is the most workers the pool scales up to. Default 0,
	// which means twice Workers: room to absorb a burst without an
	// unbounded pool.
	MaxWorkers int `json:"max_workers" toml:"max_workers"`
	// ScaleThresholdPct is the ready-queue fill (%) at or above which a
	// worker is added; one is retired below two thirds of it, so the pool
	// does not flap around a single threshold (60 and 40 by default). See
	// queue.WithScaling.
	ScaleThresholdPct int `json:"scale_threshold_pct" toml:"scale_threshold_pct"`
	// ThrottleThresholdPct is the fill (%) at or above which a fan-out is
	// cut to ThrottleTopN targets (queue.WithFanout). Default 60; 0
	// disables throttling.
	ThrottleThresholdPct int `json:"throttle_threshold_pct" toml:"throttle_threshold_pct"`
	// ThrottleTopN is how many targets a throttled fan-out keeps. Default 20.
	ThrottleTopN int `json:"throttle_top_n" toml:"throttle_top_n"`
	// FanoutMax caps every fan-out, throttled or not: the most upstream
	// trackers one announce is forwarded to (queue.WithFanout).
	// Default 100.
	FanoutMax int `json:"fanout_max" toml:"fanout_max"`
	// RateLimitThresholdPct is the fill (%) at or above which Admit
	// consults its token bucket (queue.WithRateLimit). Default 80; 0
	// disables rate limiting. The forwarder asks Admit before it forwards
	// a new peer's announce; a refusal sheds the forward (counted in
	// forwarder_forwards_shed_total), never the announce, which is
	// answered from the peer table either way.
	RateLimitThresholdPct int `json:"rate_limit_threshold_pct" toml:"rate_limit_threshold_pct"`
	// RateLimitPerSec is the token bucket's refill rate. Default 100.
	RateLimitPerSec float64 `json:"rate_limit_per_sec" toml:"rate_limit_per_sec"`
	// RateLimitBurst is the token bucket's size. Default 200.
	RateLimitBurst int `json:"rate_limit_burst" toml:"rate_limit_burst"`
	// RateLimitRetrySeconds is the retry hint of the queue's refusals
	// (queue.RateLimit's RetryAfter). Default 10. The forwarder refuses
	// no client, so none reads it; it is kept for configurations that set
	// it.
	RateLimitRetrySeconds int `json:"rate_limit_retry_seconds" toml:"rate_limit_retry_seconds"`
	// SuspendSeconds is how long an overloaded target (HTTP 429) is
	// suspended (queue.WithSuspend). Default 300.
	SuspendSeconds int `json:"suspend_seconds" toml:"suspend_seconds"`
	// RetryAttempts is how many times a failing job runs before it is
	// dead-lettered (queue.WithRetry). Default 3.
	RetryAttempts int `json:"retry_attempts" toml:"retry_attempts"`
	// RetryBaseMs is the first retry's backoff in milliseconds; it doubles
	// per attempt up to 5 minutes (queue.WithRetry). Default 1000.
	RetryBaseMs int `json:"retry_base_ms" toml:"retry_base_ms"`
}

// DefaultQueueConfig returns the forwarder's defaults, which are the
// queue's own: the options it yields configure what queue.New does when
// given none. As with the queue's options, a zero size, threshold (but
// RateLimitThresholdPct and ThrottleThresholdPct, where 0 turns the
// feature off), rate, count or duration takes the queue's default.
func DefaultQueueConfig() QueueConfig {
	return QueueConfig{
		QueueSize:             10000,
		Workers:               10,
		MaxWorkers:            0,
		ScaleThresholdPct:     60,
		ThrottleThresholdPct:  60,
		ThrottleTopN:          20,
		FanoutMax:             100,
		RateLimitThresholdPct: 80,
		RateLimitPerSec:       100,
		RateLimitBurst:        200,
		RateLimitRetrySeconds: 10,
		SuspendSeconds:        300,
		RetryAttempts:         3,
		RetryBaseMs:           1000,
	}
}

// configVar binds one field to its flag and its environment variable.
type configVar struct {
	flag  string
	env   string
	usage string
	value func(c *QueueConfig) flag.Value
}

// configVars lists the bindings, in the order -h prints them. The names
// are the ones tracker operators already use for these settings.
var configVars = []configVar{
	{"Q", "FORWARDER_QUEUE_SIZE", "ready-queue capacity: at most `N` jobs wait to run",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.QueueSize) }},
	{"w", "FORWARDER_WORKERS", "`N` workers always running",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.Workers) }},
	{"W", "MAX_FORWARDER_WORKERS", "scale up to at most `N` workers; 0, the default, means twice -w",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.MaxWorkers) }},
	{"queue-scale-threshold", "QUEUE_SCALE_THRESHOLD", "add a worker while the queue is at least `PCT`% full (one is retired below 2/3 of it)",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.ScaleThresholdPct) }},
	{"queue-throttle-threshold", "QUEUE_THROTTLE_THRESHOLD", "at `PCT`% full, fan out to --queue-throttle-top targets only; 0 disables throttling",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.ThrottleThresholdPct) }},
	{"queue-throttle-top", "QUEUE_THROTTLE_TOP", "fan out to `N` targets (forwarders) while throttling",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.ThrottleTopN) }},
	{"max-forwarders-per-announce", "MAX_FORWARDERS_PER_ANNOUNCE", "fan out to at most `N` targets (forwarders), throttled or not",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.FanoutMax) }},
	{"queue-rate-limit-threshold", "QUEUE_RATE_LIMIT_THRESHOLD", "at `PCT`% full, rate-limit the forwarding of new peers (their announces are answered either way); 0 disables rate limiting",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.RateLimitThresholdPct) }},
	{"rate-limit-initial-ps", "RATE_LIMIT_INITIAL_PER_SEC", "rate limiter refills `TOKENS` per second",
		func(c *QueueConfig) flag.Value { return (*floatValue)(&c.RateLimitPerSec) }},
	{"rate-limit-initial-burst", "RATE_LIMIT_INITIAL_BURST", "rate limiter holds at most `TOKENS` (its burst)",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.RateLimitBurst) }},
	{"rate-limit-retry", "RATE_LIMIT_RETRY_SECONDS", "the retry hint of a rate-limit refusal, `SECONDS` (or a duration such as 10s); the forwarder sheds the forward and shows it to no client",
		func(c *QueueConfig) flag.Value { return (*secondsValue)(&c.RateLimitRetrySeconds) }},
	{"forwarder-suspend", "FORWARDER_SUSPEND_SECONDS", "suspend an overloaded (HTTP 429) target for `SECONDS` (or a duration such as 5m)",
		func(c *QueueConfig) flag.Value { return (*secondsValue)(&c.SuspendSeconds) }},
	{"forwarder-retry-attempts", "FORWARDER_RETRY_ATTEMPTS", "run a failing job at most `N` times before dead-lettering it",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.RetryAttempts) }},
	{"forwarder-retry-base-ms", "FORWARDER_RETRY_BASE_MS", "retry a failed job after `MS` milliseconds, doubling per attempt up to 5m",
		func(c *QueueConfig) flag.Value { return (*intValue)(&c.RetryBaseMs) }},
}

// RegisterFlags defines one flag per field on fs, with the field's current
// value as the flag's default; each flag's usage names its environment
// variable. The flags are -Q, -w, -W, --queue-scale-threshold,
// --queue-throttle-threshold, --queue-throttle-top,
// --max-forwarders-per-announce, --queue-rate-limit-threshold,
// --rate-limit-initial-ps, --rate-limit-initial-burst, --rate-limit-retry,
// --forwarder-suspend, --forwarder-retry-attempts and
// --forwarder-retry-base-ms. Go's flag package accepts one dash or two.
//
// The flags write into c when fs is parsed, so c must outlive the parse.
// RegisterFlags panics, as flag.Var does, if a name is already defined.
func (c *QueueConfig) RegisterFlags(fs *flag.FlagSet) {
	for _, v := range configVars {
		fs.Var(v.value(c), v.flag, fmt.Sprintf("%s (env %s)", v.usage, v.env))
	}
}

// FromEnv sets each field whose environment variable is set and not
// empty, with prefix prepended to every name: FromEnv("") reads
// FORWARDER_QUEUE_SIZE, FromEnv("RETRACKER_") reads
// RETRACKER_FORWARDER_QUEUE_SIZE. Variables that are not set leave their
// fields alone. A value that does not parse is an error naming the
// variable; every malformed variable is reported (joined with
// errors.Join), and well-formed ones are applied regardless.
func (c *QueueConfig) FromEnv(prefix string) error {
	var errs []error
	for _, v := range configVars {
		name := prefix + v.env
		s, ok := os.LookupEnv(name)
		if !ok || strings.TrimSpace(s) == "" {
			continue
		}
		if err := v.value(c).Set(strings.TrimSpace(s)); err != nil {
			errs = append(errs, fmt.Errorf("forwarder: environment variable %s=%q: %w", name, s, err))
		}
	}
	return errors.Join(errs...)
}

// queueSettings are the arguments Options passes to the queue's options,
// worked out from a QueueConfig's fields: what each option receives.
type queueSettings struct {
	capacity, workers, maxWorkers int
	scaleUp, scaleDown            int
	throttlePct, throttleTopN     int
	fanoutMax                     int
	ratePct                       int
	ratePerSec                    float64
	rateBurst                     int
	retryAfter, suspend           time.Duration
	attempts                      int
	backoffBase, backoffMax       time.Duration
}

// backoffMax is the longest retry backoff: the first retry waits
// RetryBaseMs, each later one twice as long, up to this.
const backoffMax = 5 * time.Minute

// settings works out the options' arguments. It fails, with a
// *queue.OptionError naming the field "QueueConfig.<field>", only when a
// count of seconds or milliseconds does not fit in a time.Duration: the
// product would wrap, and SuspendSeconds=18446744074 would suspend for
// 0.29 s. Every other value is left for queue.New to check.
func (c QueueConfig) settings() (queueSettings, error) {
	maxWorkers := c.MaxWorkers
	if maxWorkers == 0 {
		maxWorkers = math.MaxInt // twice Workers, saturated
		if c.Workers <= math.MaxInt/2 {
			maxWorkers = 2 * c.Workers
		}
	}
	s := queueSettings{
		capacity: c.QueueSize, workers: c.Workers, maxWorkers: maxWorkers,
		scaleUp: c.ScaleThresholdPct, scaleDown: c.ScaleThresholdPct * 2 / 3,
		throttlePct: c.ThrottleThresholdPct, throttleTopN: c.ThrottleTopN,
		fanoutMax: c.FanoutMax,
		ratePct:   c.RateLimitThresholdPct, ratePerSec: c.RateLimitPerSec, rateBurst: c.RateLimitBurst,
		attempts: c.RetryAttempts,
	}
	var err error
	if s.retryAfter, err = duration("RateLimitRetrySeconds", c.RateLimitRetrySeconds, time.Second); err != nil {
		return s, err
	}
	if s.suspend, err = duration("SuspendSeconds", c.SuspendSeconds, time.Second); err != nil {
		return s, err
	}
	if s.backoffBase, err = duration("RetryBaseMs", c.RetryBaseMs, time.Millisecond); err != nil {
		return s, err
	}
	s.backoffMax = max(s.backoffBase, backoffMax)
	return s, nil
}

// duration returns n units, or an error naming the field when they do not
// fit in a time.Duration.
func duration(field string, n int, unit time.Duration) (time.Duration, error) {
	limit := int64(math.MaxInt64 / unit)
	if int64(n) > limit || int64(n) < -limit {
		return 0, &queue.OptionError{Option: "QueueConfig." + field, Value: n,
			Reason: fmt.Sprintf("must be within ±%d to fit in a time.Duration", limit)}
	}
	return time.Duration(n) * unit, nil
}

// Options turns the configuration into options for queue.New, with the
// rate-limit refusal worded as trackers word it ("tracker busy, retry in
// 10 seconds"; the forwarder itself sheds forwards on a refusal and shows
// it to no client). It fails only when a count of seconds or milliseconds is
// too large for a time.Duration (the error names the field); the other
// values are checked by queue.New, which names the option at fault.
func (c QueueConfig) Options() ([]queue.Option, error) {
	s, err := c.settings()
	if err != nil {
		return nil, err
	}
	topN := s.throttleTopN
	if s.throttlePct == 0 {
		topN = math.MaxInt // no fan-out is ever cut to fewer than its cap
	}
	return []queue.Option{
		queue.WithCapacity(s.capacity, 0),
		queue.WithWorkers(s.workers, s.maxWorkers),
		queue.WithScaling(queue.ScaleByFill, s.scaleUp, s.scaleDown, 0),
		queue.WithFanout(s.fanoutMax, s.throttlePct, topN),
		queue.WithRateLimit(queue.RateLimit{
			FillPct: s.ratePct, PerSecond: s.ratePerSec, Burst: s.rateBurst,
			RetryAfter: s.retryAfter, Reason: refusalReason, Disabled: s.ratePct == 0,
		}),
		queue.WithSuspend(s.suspend, nil),
		queue.WithRetry(s.attempts, s.backoffBase, s.backoffMax),
	}, nil
}

// Validate reports the first value queue.New would reject, as a
// *queue.OptionError: useful right after parsing flags. It builds a queue
// with the in-memory store, never started, and drops it, so QueueSize is
// checked against that store's limit (8 388 608, see queue.WithCapacity); a host
// that adds a durable store, which has no such limit, should let New
// check a larger QueueSize instead.
func (c QueueConfig) Validate() error {
	opts, err := c.Options()
	if err != nil {
		return err
	}
	_, err = queue.New(func(context.Context, queue.Job[struct{}]) error { return nil }, opts...)
	return err
}

// intValue is a flag.Value for an int field.
type intValue int

func (v *intValue) String() string { return strconv.Itoa(int(*v)) }
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	*v = intValue(n)
	return nil
}

// floatValue is a flag.Value for a float64 field.
type floatValue float64

func (v *floatValue) String() string { return strconv.FormatFloat(float64(*v), 'g', -1, 64) }
func (v *floatValue) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	*v = floatValue(f)
	return nil
}

// secondsValue is a flag.Value for a whole-seconds int field. It accepts
// a bare integer ("300") or a Go duration of whole seconds ("5m").
type secondsValue int

func (v *secondsValue) String() string { return strconv.Itoa(int(*v)) + "s" }
func (v *secondsValue) Set(s string) error {
	if n, err := strconv.Atoi(s); err == nil {
		*v = secondsValue(n)
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a number of seconds or a duration")
	}
	if d%time.Second != 0 {
		return errors.New("not a whole number of seconds")
	}
	*v = secondsValue(d / time.Second)
	return nil
}
