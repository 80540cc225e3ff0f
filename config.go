package queue

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is the configuration surface of a tracker forwarder's queue (seed
// 001) as plain fields, so that a host can fill it from flags, from the
// environment, from a JSON or TOML file, or by hand, and turn it into
// options with [Config.Options]:
//
//	cfg := queue.DefaultConfig()
//	if err := cfg.FromEnv(""); err != nil { ... }  // FORWARDER_QUEUE_SIZE=...
//	cfg.RegisterFlags(flag.CommandLine)           // -Q, -w, -W, --queue-scale-threshold, ...
//	flag.Parse()
//	q, err := queue.New(handler, cfg.Options()...)
//
// Registered after FromEnv, flags take their defaults from the environment,
// so a flag given on the command line wins over a variable and a variable
// wins over the built-in default. The zero Config is not useful: start from
// DefaultConfig. Values are checked by New (or [Config.Validate]), not by
// the binding, which only rejects text that is not a number.
type Config struct {
	// QueueSize bounds the ready queue ([WithCapacity]). Default 10000.
	QueueSize int `json:"queue_size" toml:"queue_size"`
	// Workers is the number of workers always running ([WithWorkers]).
	// Default 10.
	Workers int `json:"workers" toml:"workers"`
	// MaxWorkers is the most workers the pool scales up to. Default 0,
	// which means twice Workers (seed 000).
	MaxWorkers int `json:"max_workers" toml:"max_workers"`
	// ScaleThresholdPct is the ready-queue fill (%) at or above which a
	// worker is added; one is retired below two thirds of it (60 and 40 by
	// default, as in seed 000). See [WithScaleThresholds].
	ScaleThresholdPct int `json:"scale_threshold_pct" toml:"scale_threshold_pct"`
	// ThrottleThresholdPct is the fill (%) at or above which a fan-out is
	// cut to ThrottleTopN targets ([WithThrottle]). Default 60.
	ThrottleThresholdPct int `json:"throttle_threshold_pct" toml:"throttle_threshold_pct"`
	// ThrottleTopN is how many targets a throttled fan-out keeps. Default 20.
	ThrottleTopN int `json:"throttle_top_n" toml:"throttle_top_n"`
	// FanoutMax caps every fan-out, throttled or not (seed 001's
	// max_forwarders_per_announce, [WithFanoutMax]). Default 100.
	FanoutMax int `json:"fanout_max" toml:"fanout_max"`
	// RateLimitThresholdPct is the fill (%) at or above which Admit
	// consults its token bucket ([WithRateLimit]). Default 80; 0 disables
	// rate limiting.
	RateLimitThresholdPct int `json:"rate_limit_threshold_pct" toml:"rate_limit_threshold_pct"`
	// RateLimitPerSec is the token bucket's refill rate. Default 100.
	RateLimitPerSec float64 `json:"rate_limit_per_sec" toml:"rate_limit_per_sec"`
	// RateLimitBurst is the token bucket's size. Default 200.
	RateLimitBurst int `json:"rate_limit_burst" toml:"rate_limit_burst"`
	// RateLimitRetrySeconds is the retry hint a refused client gets
	// ([WithRateLimitRefusal]). Default 10.
	RateLimitRetrySeconds int `json:"rate_limit_retry_seconds" toml:"rate_limit_retry_seconds"`
	// SuspendSeconds is how long an overloaded target (HTTP 429) is
	// suspended ([WithSuspendDuration]). Default 300.
	SuspendSeconds int `json:"suspend_seconds" toml:"suspend_seconds"`
	// RetryAttempts is how many times a failing job runs before it is
	// dead-lettered ([WithMaxAttempts]). Default 3.
	RetryAttempts int `json:"retry_attempts" toml:"retry_attempts"`
	// RetryBaseMs is the first retry's backoff in milliseconds; it doubles
	// per attempt up to 5 minutes ([WithBackoff]). Default 1000.
	RetryBaseMs int `json:"retry_base_ms" toml:"retry_base_ms"`
}

// DefaultConfig returns seed 001's defaults, the same as New's when given
// no options.
func DefaultConfig() Config {
	return Config{
		QueueSize:             DefaultCapacity,
		Workers:               DefaultWorkers,
		MaxWorkers:            0,
		ScaleThresholdPct:     DefaultScaleUpPct,
		ThrottleThresholdPct:  DefaultThrottlePct,
		ThrottleTopN:          DefaultThrottleTopN,
		FanoutMax:             DefaultFanoutMax,
		RateLimitThresholdPct: DefaultRateLimitPct,
		RateLimitPerSec:       DefaultRateLimitPerSec,
		RateLimitBurst:        DefaultRateLimitBurst,
		RateLimitRetrySeconds: int(DefaultRateLimitRetryAfter / time.Second),
		SuspendSeconds:        int(DefaultSuspendDuration / time.Second),
		RetryAttempts:         DefaultMaxAttempts,
		RetryBaseMs:           int(DefaultBackoffBase / time.Millisecond),
	}
}

// configVar binds one field to its flag and its environment variable.
type configVar struct {
	flag  string
	env   string
	usage string
	value func(c *Config) flag.Value
}

// configVars lists the bindings in seed 001's order. Flag names and
// variable names are seed 001's where it names them.
var configVars = []configVar{
	{"Q", "FORWARDER_QUEUE_SIZE", "ready-queue capacity: at most `N` jobs wait to run",
		func(c *Config) flag.Value { return (*intValue)(&c.QueueSize) }},
	{"w", "FORWARDER_WORKERS", "`N` workers always running",
		func(c *Config) flag.Value { return (*intValue)(&c.Workers) }},
	{"W", "MAX_FORWARDER_WORKERS", "scale up to at most `N` workers; 0, the default, means twice -w",
		func(c *Config) flag.Value { return (*intValue)(&c.MaxWorkers) }},
	{"queue-scale-threshold", "QUEUE_SCALE_THRESHOLD", "add a worker while the queue is at least `PCT`% full (one is retired below 2/3 of it)",
		func(c *Config) flag.Value { return (*intValue)(&c.ScaleThresholdPct) }},
	{"queue-throttle-threshold", "QUEUE_THROTTLE_THRESHOLD", "at `PCT`% full, fan out to --queue-throttle-top targets only; 0 disables throttling",
		func(c *Config) flag.Value { return (*intValue)(&c.ThrottleThresholdPct) }},
	{"queue-throttle-top", "QUEUE_THROTTLE_TOP", "fan out to `N` targets (forwarders) while throttling",
		func(c *Config) flag.Value { return (*intValue)(&c.ThrottleTopN) }},
	{"max-forwarders-per-announce", "MAX_FORWARDERS_PER_ANNOUNCE", "fan out to at most `N` targets (forwarders), throttled or not",
		func(c *Config) flag.Value { return (*intValue)(&c.FanoutMax) }},
	{"queue-rate-limit-threshold", "QUEUE_RATE_LIMIT_THRESHOLD", "at `PCT`% full, rate-limit new requests; 0 disables rate limiting",
		func(c *Config) flag.Value { return (*intValue)(&c.RateLimitThresholdPct) }},
	{"rate-limit-initial-ps", "RATE_LIMIT_INITIAL_PER_SEC", "rate limiter refills `TOKENS` per second",
		func(c *Config) flag.Value { return (*floatValue)(&c.RateLimitPerSec) }},
	{"rate-limit-initial-burst", "RATE_LIMIT_INITIAL_BURST", "rate limiter holds at most `TOKENS` (its burst)",
		func(c *Config) flag.Value { return (*intValue)(&c.RateLimitBurst) }},
	{"rate-limit-retry", "RATE_LIMIT_RETRY_SECONDS", "tell a rate-limited client to retry in `SECONDS` (or a duration such as 10s)",
		func(c *Config) flag.Value { return (*secondsValue)(&c.RateLimitRetrySeconds) }},
	{"forwarder-suspend", "FORWARDER_SUSPEND_SECONDS", "suspend an overloaded (HTTP 429) target for `SECONDS` (or a duration such as 5m)",
		func(c *Config) flag.Value { return (*secondsValue)(&c.SuspendSeconds) }},
	{"forwarder-retry-attempts", "FORWARDER_RETRY_ATTEMPTS", "run a failing job at most `N` times before dead-lettering it",
		func(c *Config) flag.Value { return (*intValue)(&c.RetryAttempts) }},
	{"forwarder-retry-base-ms", "FORWARDER_RETRY_BASE_MS", "retry a failed job after `MS` milliseconds, doubling per attempt up to 5m",
		func(c *Config) flag.Value { return (*intValue)(&c.RetryBaseMs) }},
}

// RegisterFlags defines one flag per field on fs, with the field's current
// value as the flag's default; each flag's usage names its environment
// variable. Flag names are seed 001's: -Q, -w, -W, --queue-scale-threshold,
// --queue-throttle-threshold, --queue-throttle-top,
// --max-forwarders-per-announce, --queue-rate-limit-threshold,
// --rate-limit-initial-ps, --rate-limit-initial-burst, --rate-limit-retry,
// --forwarder-suspend, --forwarder-retry-attempts and
// --forwarder-retry-base-ms. Go's flag package accepts one dash or two.
//
// The flags write into c when fs is parsed, so c must outlive the parse.
// RegisterFlags panics, as flag.Var does, if a name is already defined.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
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
func (c *Config) FromEnv(prefix string) error {
	var errs []error
	for _, v := range configVars {
		name := prefix + v.env
		s, ok := os.LookupEnv(name)
		if !ok || strings.TrimSpace(s) == "" {
			continue
		}
		if err := v.value(c).Set(strings.TrimSpace(s)); err != nil {
			errs = append(errs, fmt.Errorf("queue: environment variable %s=%q: %w", name, s, err))
		}
	}
	return errors.Join(errs...)
}

// Options turns the configuration into options for New. It does not check
// the values; New does, and names the option at fault, or the field when
// a count of seconds or milliseconds is too large for a time.Duration.
func (c Config) Options() []Option {
	maxWorkers := c.MaxWorkers
	if maxWorkers == 0 {
		maxWorkers = math.MaxInt // twice Workers, saturated
		if c.Workers <= math.MaxInt/2 {
			maxWorkers = 2 * c.Workers
		}
	}
	return []Option{
		WithCapacity(c.QueueSize),
		WithWorkers(c.Workers, maxWorkers),
		WithScaleThresholds(c.ScaleThresholdPct, c.ScaleThresholdPct*2/3),
		WithThrottle(c.ThrottleThresholdPct, c.ThrottleTopN),
		WithFanoutMax(c.FanoutMax),
		WithRateLimit(c.RateLimitThresholdPct, c.RateLimitPerSec, c.RateLimitBurst),
		durationOption("RateLimitRetrySeconds", c.RateLimitRetrySeconds, time.Second, func(d time.Duration) Option {
			return WithRateLimitRefusal(d, "tracker busy") // the tracker's wording
		}),
		durationOption("SuspendSeconds", c.SuspendSeconds, time.Second, WithSuspendDuration),
		WithMaxAttempts(c.RetryAttempts),
		durationOption("RetryBaseMs", c.RetryBaseMs, time.Millisecond, func(base time.Duration) Option {
			return WithBackoff(base, max(base, DefaultBackoffMax))
		}),
	}
}

// durationOption returns opt(n units), or, when n units do not fit in a
// time.Duration, an option that fails with an *OptionError naming the
// field "Config.<field>": the product would wrap, and
// SuspendSeconds=18446744074 would suspend for 0.29 s.
func durationOption(field string, n int, unit time.Duration, opt func(time.Duration) Option) Option {
	limit := int64(math.MaxInt64 / unit)
	if int64(n) > limit || int64(n) < -limit {
		return func(*config) error {
			return optErr("Config."+field, n, "must be within ±%d to fit in a time.Duration", limit)
		}
	}
	return opt(time.Duration(n) * unit)
}

// Validate reports the first value New would reject, as an *OptionError,
// without building a queue: useful right after parsing flags. Config names
// no store, so Validate checks QueueSize against the in-memory store's
// limit, MaxMemoryCapacity, as New given only Options does; a host that
// adds WithStore for a durable store, which has no such limit, should let
// New check a larger QueueSize instead.
func (c Config) Validate() error {
	cfg := defaultConfig()
	for _, o := range c.Options() {
		if err := o(&cfg); err != nil {
			return err
		}
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.capacity > MaxMemoryCapacity {
		return memoryCapacityErr(cfg.capacity)
	}
	return nil
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
