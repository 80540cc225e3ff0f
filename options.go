package queue

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/queuekit/queue/internal/memstore"
)

// Option configures a Queue. Options are applied in order by New, which
// validates each one and returns an *OptionError naming the first bad one.
type Option func(*config) error

// ScalePolicy decides how many workers the pool wants.
type ScalePolicy int

const (
	// ScaleByFill (the default) adds one worker per scale interval while
	// the ready queue's fill is at or above the scale-up threshold and
	// retires one while it is below the scale-down threshold.
	ScaleByFill ScalePolicy = iota
	// ScaleByDepth sets the desired worker count to the number of ready
	// jobs, bounded by the base and max worker counts, moving one worker
	// per scale interval toward it: one worker per waiting job, for
	// handlers that wait on I/O rather than use CPU.
	ScaleByDepth
)

// Defaults: sized for a service that fans each request out to a few
// dozen I/O-bound jobs, and documented on each option.
const (
	DefaultCapacity        = 10000
	PendingPerCapacity     = 100 // WithMaxPending's default, per unit of capacity
	DefaultWorkers         = 10
	DefaultMaxWorkers      = 20
	DefaultScaleUpPct      = 60
	DefaultScaleDownPct    = 40
	DefaultScaleInterval   = time.Second
	DefaultRequeueDelay    = 10 * time.Second
	DefaultMaxAttempts     = 3
	DefaultBackoffBase     = time.Second
	DefaultBackoffMax      = 5 * time.Minute
	DefaultRetryFloor      = time.Second // WithRetryAfterBounds: the shortest RetryAfter delay
	DefaultRetryCeiling    = 10 * time.Minute
	DefaultSuspendDuration = 300 * time.Second
)

// minInterval is the shortest scale interval and requeue delay: below it
// the loops they pace would spin.
const minInterval = time.Millisecond

// DefaultPriorities returns the priority levels used unless WithPriorities
// is given: high (weight 0), normal (5) and low (10); "normal" is the
// default label. Each call returns a new slice, so a caller may change it
// (to pass to WithPriorities or a store's StoreConfig) without changing
// the defaults of any later New.
func DefaultPriorities() []Priority {
	return []Priority{{Name: "high", Weight: 0}, {Name: "normal", Weight: 5}, {Name: "low", Weight: 10}}
}

type config struct {
	name            string
	capacity        int
	maxPending      int // 0: not set, PendingPerCapacity × capacity
	baseWorkers     int
	maxWorkers      int
	scaleUp         int
	scaleDown       int
	scaleInterval   time.Duration
	scalePolicy     ScalePolicy
	requeueDelay    time.Duration
	priorities      []Priority
	defaultPriority string
	coalesce        bool
	maxAttempts     int
	backoffBase     time.Duration
	backoffMax      time.Duration
	retryFloor      time.Duration
	retryCeiling    time.Duration
	jobTimeout      time.Duration
	clock           Clock
	logger          *slog.Logger
	store           any // Store[T], checked by New
	onDead          any // func(context.Context, Job[T], error), checked by New

	admission admissionConfig
	targets   targetConfig
	metrics   metricsConfig
}

func defaultConfig() config {
	return config{
		name:            "default",
		capacity:        DefaultCapacity,
		baseWorkers:     DefaultWorkers,
		maxWorkers:      DefaultMaxWorkers,
		scaleUp:         DefaultScaleUpPct,
		scaleDown:       DefaultScaleDownPct,
		scaleInterval:   DefaultScaleInterval,
		requeueDelay:    DefaultRequeueDelay,
		priorities:      DefaultPriorities(),
		defaultPriority: "normal",
		coalesce:        true,
		maxAttempts:     DefaultMaxAttempts,
		backoffBase:     DefaultBackoffBase,
		backoffMax:      DefaultBackoffMax,
		retryFloor:      DefaultRetryFloor,
		retryCeiling:    DefaultRetryCeiling,
		admission:       defaultAdmission(),
		targets:         defaultTargets(),
	}
}

// validate checks what single options cannot: relations between values.
func (c *config) validate() error {
	if c.maxPending == 0 {
		c.maxPending = PendingPerCapacity * c.capacity
		if c.capacity > math.MaxInt/PendingPerCapacity {
			c.maxPending = math.MaxInt
		}
	}
	if c.maxPending < c.capacity {
		return optErr("WithMaxPending", c.maxPending, "must be >= WithCapacity (%d): the ready jobs are pending jobs too", c.capacity)
	}
	if c.maxWorkers < c.baseWorkers {
		return optErr("WithWorkers", fmt.Sprintf("%d, %d", c.baseWorkers, c.maxWorkers), "max workers must be >= base workers")
	}
	if c.scaleDown >= c.scaleUp {
		return optErr("WithScaleThresholds", fmt.Sprintf("%d, %d", c.scaleUp, c.scaleDown), "scale-down threshold must be below scale-up threshold")
	}
	if c.backoffMax < c.backoffBase {
		return optErr("WithBackoff", fmt.Sprintf("%s, %s", c.backoffBase, c.backoffMax), "max must be >= base")
	}
	found := false
	for _, p := range c.priorities {
		found = found || p.Name == c.defaultPriority
	}
	if !found {
		return optErr("WithDefaultPriority", c.defaultPriority, "not one of the configured priorities")
	}
	if err := c.admission.validate(); err != nil {
		return err
	}
	return c.targets.validate()
}

// WithName names the queue (default "default"). The name labels its
// metrics, logs and durable-store rows; several queues may share a
// Prometheus registry or a database when their names differ.
func WithName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return optErr("WithName", `""`, "must not be empty")
		}
		c.name = name
		return nil
	}
}

// MaxMemoryCapacity is the largest WithCapacity the in-memory store
// accepts: it allocates each priority's ready queue up front, at twice the
// capacity (about 1 GiB per priority in use at this limit). Durable stores
// have no such limit.
const MaxMemoryCapacity = memstore.MaxCapacity

// WithCapacity bounds the ready queue (default 10000). Enqueue of a ready
// job beyond it returns ErrQueueFull. WithMaxPending bounds the ready jobs
// and every other job the queue holds together. The bound is exact within each
// priority; across priorities concurrent Enqueue calls may overshoot it by
// at most the number of concurrent callers. The in-memory store reserves
// capacity slots per priority level up front and accepts at most
// MaxMemoryCapacity (New fails beyond it).
func WithCapacity(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return optErr("WithCapacity", n, "must be >= 1")
		}
		c.capacity = n
		return nil
	}
}

// WithMaxPending bounds the jobs the queue holds in memory, waiting to
// run: ready, scheduled (retries and RetryAfter reruns included),
// coalesced reruns and jobs parked for a busy target's slot. Enqueue
// beyond it returns ErrPendingLimit (which matches ErrQueueFull too),
// counted as dropped_limit. The default is PendingPerCapacity (100)
// times WithCapacity: 1 000 000 jobs at the default capacity, about
// 150 MB of small keyed jobs, where an unbounded schedule would grow
// until the host runs out of memory. n must be at least WithCapacity;
// math.MaxInt turns the bound off.
//
// The bound refuses new jobs only: a retry, a RetryAfter rerun, a rerun
// released when its key's job ends, or a due job requeued for lack of
// room is a job already accepted, and is kept even past the bound. Like
// the capacity, it is exact for one producer and may be overshot by the
// number of concurrent Enqueue callers.
//
// It applies to the in-memory store. A durable store keeps its ready and
// scheduled jobs in the database, not in this process, and shares them
// between processes: their size is the database's to bound (disk, or
// Redis's maxmemory), and counting them at every Enqueue would cost a
// round trip. Durable stores ignore it; WithCapacity still bounds their
// ready jobs.
func WithMaxPending(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return optErr("WithMaxPending", n, "must be >= 1 (math.MaxInt for no bound)")
		}
		c.maxPending = n
		return nil
	}
}

// WithWorkers sets the base and maximum number of workers (default 10 and
// 20). The pool never shrinks below base; max == base turns scaling off.
func WithWorkers(base, max int) Option {
	return func(c *config) error {
		if base < 1 {
			return optErr("WithWorkers", base, "base workers must be >= 1")
		}
		if max < 1 {
			return optErr("WithWorkers", max, "max workers must be >= 1")
		}
		c.baseWorkers, c.maxWorkers = base, max
		return nil
	}
}

// WithScaleThresholds sets the ready-queue fill percentages at or above
// which a worker is added (default 60) and below which one is retired
// (default 40). up must be in 1..100, down in 0..up-1.
func WithScaleThresholds(up, down int) Option {
	return func(c *config) error {
		if up < 1 || up > 100 {
			return optErr("WithScaleThresholds", up, "scale-up threshold must be in 1..100")
		}
		if down < 0 || down > 100 {
			return optErr("WithScaleThresholds", down, "scale-down threshold must be in 0..100")
		}
		c.scaleUp, c.scaleDown = up, down
		return nil
	}
}

// WithScaleInterval sets how often the pool reconsiders its size (default
// 1s). It changes by at most one worker per interval. The interval must be
// at least 1ms: the scaler wakes every interval, so a shorter one is a
// busy loop.
func WithScaleInterval(d time.Duration) Option {
	return func(c *config) error {
		if d < minInterval {
			return optErr("WithScaleInterval", d, "must be >= %s", minInterval)
		}
		c.scaleInterval = d
		return nil
	}
}

// WithScalePolicy selects how the pool sizes itself (default ScaleByFill).
func WithScalePolicy(p ScalePolicy) Option {
	return func(c *config) error {
		if p != ScaleByFill && p != ScaleByDepth {
			return optErr("WithScalePolicy", int(p), "unknown policy")
		}
		c.scalePolicy = p
		return nil
	}
}

// WithRequeueDelay sets how long a due job waits when the ready queue is
// full as it is promoted (default 10s). Such a job is never dropped. The
// delay must be at least 1ms: a shorter one makes the scheduler spin while
// the queue is full. Like the other durations it has no upper bound.
func WithRequeueDelay(d time.Duration) Option {
	return func(c *config) error {
		if d < minInterval {
			return optErr("WithRequeueDelay", d, "must be >= %s", minInterval)
		}
		c.requeueDelay = d
		return nil
	}
}

// WithPriorities replaces the priority levels (default high=0, normal=5,
// low=10). Lower weights run first; names and weights must be unique and
// names non-empty. If the default label is not among them, set it with
// WithDefaultPriority.
func WithPriorities(levels ...Priority) Option {
	return func(c *config) error {
		if len(levels) == 0 {
			return optErr("WithPriorities", "[]", "need at least one level")
		}
		if len(levels) > 32 {
			return optErr("WithPriorities", len(levels), "at most 32 levels")
		}
		sorted := make([]Priority, 0, len(levels))
		for _, p := range levels {
			if p.Name == "" {
				return optErr("WithPriorities", p, "level name must not be empty")
			}
			for _, q := range sorted {
				if q.Name == p.Name || q.Weight == p.Weight {
					return optErr("WithPriorities", p, "duplicate name or weight")
				}
			}
			i := len(sorted)
			for i > 0 && sorted[i-1].Weight > p.Weight {
				i--
			}
			sorted = append(sorted, Priority{})
			copy(sorted[i+1:], sorted[i:])
			sorted[i] = p
		}
		c.priorities = sorted
		if len(sorted) == 1 {
			c.defaultPriority = sorted[0].Name
		}
		return nil
	}
}

// WithDefaultPriority sets the label used for jobs with Priority ""
// (default "normal").
func WithDefaultPriority(label string) Option {
	return func(c *config) error {
		if label == "" {
			return optErr("WithDefaultPriority", `""`, "must not be empty")
		}
		c.defaultPriority = label
		return nil
	}
}

// WithCoalesce decides what Enqueue does with a key whose job is running
// (default true): coalesce it into exactly one more run after the current
// one ends, or, with false, return ErrDuplicate, for hosts whose running
// job already covers what a second one would do.
func WithCoalesce(on bool) Option {
	return func(c *config) error { c.coalesce = on; return nil }
}

// WithMaxAttempts sets how many times a failing job runs before it is
// dead-lettered (default 3). Job.MaxAttempts overrides it per job.
func WithMaxAttempts(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return optErr("WithMaxAttempts", n, "must be >= 1")
		}
		c.maxAttempts = n
		return nil
	}
}

// WithBackoff sets the retry backoff after a failure (default 1s base,
// 5m max): attempt n waits a random time in [d/2, d] where
// d = min(max, base·2^(n-1)).
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) error {
		if base <= 0 {
			return optErr("WithBackoff", base, "base must be > 0")
		}
		if max <= 0 {
			return optErr("WithBackoff", max, "max must be > 0")
		}
		c.backoffBase, c.backoffMax = base, max
		return nil
	}
}

// WithRetryAfterBounds sets the shortest and the longest RetryAfter delay
// that are honoured (default 1s and 10m). A shorter delay, zero or
// negative included, is raised to floor, so that a handler that keeps
// asking to retry at once runs at most once per floor instead of in a
// tight loop. A delay at or above ceiling (BEP 31) means done: the job is
// not retried. floor must be at least 1ms and below ceiling.
func WithRetryAfterBounds(floor, ceiling time.Duration) Option {
	return func(c *config) error {
		if floor < minInterval {
			return optErr("WithRetryAfterBounds", floor, "floor must be >= %s: a shorter one lets a handler spin", minInterval)
		}
		if ceiling <= floor {
			return optErr("WithRetryAfterBounds", fmt.Sprintf("%s, %s", floor, ceiling), "ceiling must be above floor")
		}
		c.retryFloor, c.retryCeiling = floor, ceiling
		return nil
	}
}

// WithJobTimeout bounds each handler run (default 0: no timeout). The
// handler's context is cancelled when it passes; the run counts as failed
// if the handler returns an error.
func WithJobTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return optErr("WithJobTimeout", d, "must be >= 0")
		}
		c.jobTimeout = d
		return nil
	}
}

// WithClock sets the queue's time source (default: package time). Tests
// running in a testing/synctest bubble do not need it.
func WithClock(clk Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return optErr("WithClock", nil, "must not be nil")
		}
		c.clock = clk
		return nil
	}
}

// WithLogger sets the logger (default: none, the queue is silent). The
// queue logs with structured fields (queue, key, target, attempt, outcome)
// and never logs payloads.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return optErr("WithLogger", nil, "must not be nil")
		}
		c.logger = l
		return nil
	}
}

// WithStore sets where jobs live (default: in memory). T must match the
// queue's payload type; New reports a mismatch. The store must not be
// shared with another Queue.
func WithStore[T any](s Store[T]) Option {
	return func(c *config) error {
		if s == nil {
			return optErr("WithStore", nil, "must not be nil")
		}
		c.store = s
		return nil
	}
}

// WithOnDead sets a hook called with each dead-lettered job and its last
// error, from the worker that ran it. T must match the queue's payload type.
// A panic in the hook is recovered and logged; the job stays counted dead.
func WithOnDead[T any](fn func(ctx context.Context, job Job[T], err error)) Option {
	return func(c *config) error {
		if fn == nil {
			return optErr("WithOnDead", nil, "must not be nil")
		}
		c.onDead = fn
		return nil
	}
}
