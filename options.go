package queue

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Option configures a Queue. Options are applied in order by New, which
// validates each one and returns an *OptionError naming the first bad one.
//
// One rule holds for every option: a zero argument (0, "", nil, an empty
// RateLimit) leaves that setting as it is, which is its documented default
// unless an earlier option changed it. So WithWorkers(0, 50) raises only
// the maximum, and WithRetry(5, 0, 0) changes only the attempts. Negative
// values, and values that contradict each other (a maximum below its
// minimum), are refused with an *OptionError naming the option and the
// value. A bool argument (WithCoalesce) is taken as given.
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
	// handlers that wait on I/O rather than use CPU. On a store shared by
	// several processes (FleetSizer: pgstore, redisstore) each process
	// takes its share, the ready jobs divided by the live processes
	// (rounded up), so that the fleet's workers follow the depth once, not
	// once per process.
	ScaleByDepth
)

// The defaults, sized for a service that fans each request out to a few
// dozen I/O-bound jobs. They are not exported: each is stated in the
// godoc of the option that changes it.
const (
	defaultCapacity        = 10000
	pendingPerCapacity     = 100 // WithCapacity's default pending bound, per ready slot
	defaultWorkers         = 10
	defaultMaxWorkers      = 20
	defaultScaleUpPct      = 60
	defaultScaleDownPct    = 40
	defaultScaleInterval   = time.Second
	defaultRequeueDelay    = 10 * time.Second
	defaultMaxAttempts     = 3
	defaultBackoffBase     = time.Second
	defaultBackoffMax      = 5 * time.Minute
	defaultRetryFloor      = time.Second // WithRetryAfterBounds: the shortest RetryAfter delay
	defaultRetryCeiling    = 10 * time.Minute
	defaultSuspendDuration = storekit.DefaultSuspend
)

// minInterval is the shortest scale interval and requeue delay: below it
// the loops they pace would spin.
const minInterval = time.Millisecond

// DefaultPriorities returns the priority levels used unless WithPriorities
// is given: high (weight 0), normal (5) and low (10), weighted 6:3:1 (their
// Shares); "normal" is the default label. While all three have ready jobs,
// six claims in ten go to high, three to normal and one to low, so a
// steady stream of high-priority jobs delays a low-priority one by at most
// ten claims instead of starving it. For strict priorities set every
// Share to 0. Each call returns a new slice, so a caller may change it
// (to pass to WithPriorities or a store's storekit.Config) without changing
// the defaults of any later New.
func DefaultPriorities() []Priority {
	return []Priority{{Name: "high", Weight: 0, Share: 6}, {Name: "normal", Weight: 5, Share: 3}, {Name: "low", Weight: 10, Share: 1}}
}

type config struct {
	name            string
	capacity        int
	maxPending      int // 0: not set, pendingPerCapacity × capacity
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
	middleware      []Middleware                            // WithMiddleware, outermost first
	enqueueHooks    []func(context.Context, *JobInfo) error // WithEnqueueHook, in order
	claimGate       func(context.Context) error             // WithClaimGate

	admission admissionConfig
	targets   targetConfig
	metrics   metricsConfig
}

func defaultConfig() config {
	return config{
		name:            "default",
		capacity:        defaultCapacity,
		baseWorkers:     defaultWorkers,
		maxWorkers:      defaultMaxWorkers,
		scaleUp:         defaultScaleUpPct,
		scaleDown:       defaultScaleDownPct,
		scaleInterval:   defaultScaleInterval,
		requeueDelay:    defaultRequeueDelay,
		priorities:      DefaultPriorities(),
		defaultPriority: "normal",
		coalesce:        true,
		maxAttempts:     defaultMaxAttempts,
		backoffBase:     defaultBackoffBase,
		backoffMax:      defaultBackoffMax,
		retryFloor:      defaultRetryFloor,
		retryCeiling:    defaultRetryCeiling,
		admission:       defaultAdmission(),
		targets:         defaultTargets(),
	}
}

// validate checks what single options cannot: relations between values.
func (c *config) validate() error {
	if c.maxPending == 0 {
		c.maxPending = pendingPerCapacity * c.capacity
		if c.capacity > math.MaxInt/pendingPerCapacity {
			c.maxPending = math.MaxInt
		}
	}
	if c.maxPending < c.capacity {
		return optErr("WithCapacity", fmt.Sprintf("%d, %d", c.capacity, c.maxPending), "pending must be >= ready: the ready jobs are pending jobs too")
	}
	if c.maxWorkers < c.baseWorkers {
		return optErr("WithWorkers", fmt.Sprintf("%d, %d", c.baseWorkers, c.maxWorkers), "max workers must be >= base workers")
	}
	if c.scaleDown >= c.scaleUp {
		return optErr("WithScaling", fmt.Sprintf("%d, %d", c.scaleUp, c.scaleDown), "scale-down threshold must be below scale-up threshold")
	}
	if c.backoffMax < c.backoffBase {
		return optErr("WithRetry", fmt.Sprintf("%s, %s", c.backoffBase, c.backoffMax), "max backoff must be >= base backoff")
	}
	found := false
	for _, p := range c.priorities {
		found = found || p.Name == c.defaultPriority
	}
	if !found {
		return optErr("WithPriorities", strconv.Quote(c.defaultPriority), "%s", defaultNotALevel(c.defaultPriority, c.priorities))
	}
	if err := c.admission.validate(); err != nil {
		return err
	}
	return c.targets.validate()
}

// defaultNotALevel says why def, WithPriorities' default label, is not
// one of levels, and how to keep the default levels.
func defaultNotALevel(def string, levels []Priority) string {
	why := fmt.Sprintf("default label %q is not one of the levels (%s)", def, queuetype.PriorityNames(levels))
	if def != "normal" && slices.Equal(levels, DefaultPriorities()) {
		why += "; the default levels are DefaultPriorities(): name one of them, or pass levels of your own"
	}
	return why
}

// WithName names the queue (default "default"; "" keeps it). The name
// labels its metrics, logs and durable-store rows; several queues may
// share a Prometheus registry or a database when their names differ.
func WithName(name string) Option {
	return func(c *config) error {
		if name != "" {
			c.name = name
		}
		return nil
	}
}

// WithCapacity bounds the ready queue to ready jobs and everything the
// queue holds to pending jobs.
//
// ready (default 10000) bounds the jobs ready to run: Enqueue of a ready
// job beyond it returns ErrQueueFull. The bound is exact within each
// priority; across priorities concurrent Enqueue calls may overshoot it by
// at most the number of concurrent callers. The in-memory store reserves
// ready slots per priority level up front, at twice the capacity (about
// 1 GiB per priority in use at the limit), and accepts at most 1<<23
// (8 388 608): New fails beyond it. Durable stores have no such limit.
//
// pending bounds the jobs the queue holds in memory, waiting to run:
// ready, scheduled (retries and RetryAfter reruns included), coalesced
// reruns and jobs parked for a busy target's slot. Enqueue beyond it
// returns ErrPendingLimit (which matches ErrQueueFull too), counted as
// dropped_limit. 0 means the default, 100 times ready (0 ready keeps the
// ready default): 1 000 000 jobs at
// the default capacity, about 150 MB of small keyed jobs, where an
// unbounded schedule would grow until the host runs out of memory. pending
// must be at least ready; math.MaxInt turns the bound off.
//
// The pending bound refuses new jobs only: a retry, a RetryAfter rerun, a
// rerun released when its key's job ends, or a due job requeued for lack
// of room is a job already accepted, and is kept even past the bound. Like
// the ready bound, it is exact for one producer and may be overshot by the
// number of concurrent Enqueue callers.
//
// The pending bound applies to the in-memory store. A durable store keeps
// its ready and scheduled jobs in the database, not in this process, and
// shares them between processes: their size is the database's to bound
// (disk, or Redis's maxmemory), and counting them at every Enqueue would
// cost a round trip. Durable stores ignore it; ready still bounds their
// ready jobs.
func WithCapacity(ready, pending int) Option {
	return func(c *config) error {
		if ready < 0 {
			return optErr("WithCapacity", ready, "ready must be >= 1 (0 keeps the default)")
		}
		if pending < 0 {
			return optErr("WithCapacity", pending, "pending must be >= 0 (0 is 100 × ready, math.MaxInt no bound)")
		}
		if ready != 0 {
			c.capacity = ready
		}
		c.maxPending = pending
		return nil
	}
}

// WithWorkers sets the base and maximum number of workers (default 10 and
// 20). The pool never shrinks below base; max == base turns scaling off.
// WithScaling sets how the pool moves between them. A zero base or max
// keeps its default, moved to the other bound when the other is beyond
// it: WithWorkers(50, 0) is 50 and 50, WithWorkers(0, 4) is 4 and 4.
func WithWorkers(base, max int) Option {
	return func(c *config) error {
		if base < 0 {
			return optErr("WithWorkers", base, "base workers must be >= 1 (0 keeps the default)")
		}
		if max < 0 {
			return optErr("WithWorkers", max, "max workers must be >= 1 (0 keeps the default)")
		}
		if base == 0 {
			base = c.baseWorkers
			if max != 0 {
				base = min(base, max)
			}
		}
		if max == 0 {
			max = c.maxWorkers
			if max < base {
				max = base
			}
		}
		c.baseWorkers, c.maxWorkers = base, max
		return nil
	}
}

// WithScaling sets how the pool between WithWorkers' base and max sizes
// itself. policy picks the rule (default ScaleByFill). up and down are the
// ready-queue fill percentages at or above which ScaleByFill adds a worker
// (default 60) and below which it retires one (default 40); up must be in
// 1..100 and down below up. interval is how often the pool reconsiders its
// size, changing by at most one worker per interval (default 1s), and also
// how often WithWarnDepth is checked; it must be at least 1ms, since the
// scaler wakes every interval and a shorter one is a busy loop. A zero up,
// down or interval keeps that default, so WithScaling(ScaleByDepth, 0, 0, 0)
// changes the policy alone; to retire workers only when the queue is empty,
// give down 1 (below 1 % full).
func WithScaling(policy ScalePolicy, up, down int, interval time.Duration) Option {
	return func(c *config) error {
		if policy != ScaleByFill && policy != ScaleByDepth {
			return optErr("WithScaling", int(policy), "unknown policy")
		}
		if up < 0 || up > 100 {
			return optErr("WithScaling", up, "scale-up threshold must be in 1..100 (0 keeps the default)")
		}
		if down < 0 || down > 100 {
			return optErr("WithScaling", down, "scale-down threshold must be in 0..100 (0 keeps the default)")
		}
		if interval != 0 && interval < minInterval {
			return optErr("WithScaling", interval, "interval must be >= %s (0 keeps the default)", minInterval)
		}
		c.scalePolicy = policy
		if up != 0 {
			c.scaleUp = up
		}
		if down != 0 {
			c.scaleDown = down
		}
		if interval != 0 {
			c.scaleInterval = interval
		}
		return nil
	}
}

// WithRequeueDelay sets how long a due job waits when the ready queue is
// full as it is promoted (default 10s; 0 keeps it). Such a job is never
// dropped. The delay must be at least 1ms: a shorter one makes the
// scheduler spin while the queue is full. Like the other durations it has
// no upper bound.
func WithRequeueDelay(d time.Duration) Option {
	return func(c *config) error {
		if d == 0 {
			return nil
		}
		if d < minInterval {
			return optErr("WithRequeueDelay", d, "must be >= %s (0 keeps the default)", minInterval)
		}
		c.requeueDelay = d
		return nil
	}
}

// WithPriorities replaces the priority levels (default high=0, normal=5,
// low=10 weighted 6:3:1, as DefaultPriorities returns, with "normal" the
// default label) and names def, the label of jobs whose Priority is "".
// Names and weights must be unique and names non-empty; at most 32 levels.
// def must be one of the levels; "" keeps today's rule: "normal" (New
// fails naming WithPriorities when no level has that name), or the only
// level when there is one. No levels keeps the current ones (the default
// levels, unless an earlier WithPriorities replaced them), so
// WithPriorities("high") changes only the default label.
//
// Dispatch is weighted when every level has a Share (1..1000): while
// several levels have ready jobs, each gets at least its Share of the
// claims (its Share over the sum of all Shares), in a fixed interleaving
// (6:3:1 claims high, normal, high, low, ...), so a low level waits a
// bounded number of claims however busy the higher ones are. Within a
// level jobs run in FIFO order. Dispatch is strict when every Share is 0:
// a level runs only when no level of lower Weight has a ready job, which
// lets a steady stream of high-priority jobs keep the others waiting
// indefinitely; choose it when lower levels are truly optional work.
// Mixing zero and non-zero Shares is refused. The default is weighted
// because a queue that silently starves work is the worse surprise.
// Durable stores keep the interleaving per process, so across a fleet the
// proportions hold per process rather than exactly overall.
func WithPriorities(def string, levels ...Priority) Option {
	return func(c *config) error {
		if len(levels) == 0 {
			if def != "" {
				c.defaultPriority = def
			}
			return nil
		}
		if len(levels) > 32 {
			return optErr("WithPriorities", len(levels), "at most 32 levels")
		}
		sorted := make([]Priority, 0, len(levels))
		for _, p := range levels {
			if p.Name == "" {
				return optErr("WithPriorities", p, "level name must not be empty")
			}
			if p.Share < 0 || p.Share > storekit.MaxShare {
				return optErr("WithPriorities", p, "share must be in 0..%d", storekit.MaxShare)
			}
			if (p.Share == 0) != (levels[0].Share == 0) {
				return optErr("WithPriorities", p, "shares must be all 0 (strict) or all positive (weighted)")
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
		switch {
		case def != "":
		case len(sorted) == 1:
			def = sorted[0].Name
		default:
			def = "normal"
		}
		c.priorities, c.defaultPriority = sorted, def
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

// WithRetry sets how failing jobs are retried. maxAttempts is how many
// times a failing job runs before it is dead-lettered (default 3;
// Job.MaxAttempts overrides it per job). base and max shape the backoff
// after a failure (default 1s and 5m): attempt n waits a random time in
// [d/2, d] where d = min(max, base·2^(n-1)). A zero argument keeps its
// default; negative ones are refused, and max must not be below base.
func WithRetry(maxAttempts int, base, max time.Duration) Option {
	return func(c *config) error {
		if maxAttempts < 0 {
			return optErr("WithRetry", maxAttempts, "max attempts must be >= 1 (0 keeps the default)")
		}
		if base < 0 {
			return optErr("WithRetry", base, "base backoff must be > 0 (0 keeps the default)")
		}
		if max < 0 {
			return optErr("WithRetry", max, "max backoff must be > 0 (0 keeps the default)")
		}
		if maxAttempts != 0 {
			c.maxAttempts = maxAttempts
		}
		if base != 0 {
			c.backoffBase = base
		}
		if max != 0 {
			c.backoffMax = max
		}
		return nil
	}
}

// WithRetryAfterBounds sets the shortest and the longest RetryAfter delay
// that are honoured (default 1s and 10m). A shorter delay, zero or
// negative included, is raised to floor, so that a handler that keeps
// asking to retry at once runs at most once per floor instead of in a
// tight loop. A delay at or above ceiling (BEP 31) means done: the job is
// not retried. floor must be at least 1ms and below ceiling; a zero floor
// or ceiling keeps its default.
func WithRetryAfterBounds(floor, ceiling time.Duration) Option {
	return func(c *config) error {
		if floor != 0 && floor < minInterval {
			return optErr("WithRetryAfterBounds", floor, "floor must be >= %s: a shorter one lets a handler spin (0 keeps the default)", minInterval)
		}
		if ceiling < 0 {
			return optErr("WithRetryAfterBounds", ceiling, "ceiling must be > 0 (0 keeps the default)")
		}
		if floor == 0 {
			floor = c.retryFloor
		}
		if ceiling == 0 {
			ceiling = c.retryCeiling
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

// WithClock sets the queue's time source (default: package time; nil
// keeps it). Tests running in a testing/synctest bubble do not need it.
func WithClock(clk Clock) Option {
	return func(c *config) error {
		if clk != nil {
			c.clock = clk
		}
		return nil
	}
}

// WithLogger sets the logger (default: none, the queue is silent; nil
// keeps it). The queue logs with structured fields (queue, key, target,
// attempt, outcome) and never logs payloads.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l != nil {
			c.logger = l
		}
		return nil
	}
}

// WithClaimGate sets a gate every worker passes before it claims a job
// (default: none; nil keeps it). A worker calls gate and claims only once
// it returns nil, so a worker waiting in the gate holds no job: the jobs
// stay in the store, visible, cancellable and claimable by other
// processes. Use it to meter how fast jobs start (a token bucket, a
// budget that watches a shared resource) where a middleware would hold
// a claimed job while it waits.
//
// The gate admits a claim, not a job: a worker it lets through may then
// wait in Claim for a job to come, so after an idle spell up to the
// pool's workers can start jobs at once; and a store that claims ahead
// (see SetConcurrency) may hold a job claimed for a worker that waits in
// the gate. Workers under SetConcurrency's limit take their seat first,
// so at most the limit's workers are in the gate at once (more, briefly,
// just after it is lowered). gate is called from many workers at once and must be
// safe for concurrent use; it should return when ctx ends, which happens
// when the worker retires or the queue stops. An error other than one
// returned because ctx ended is counted (Counts.GateErrors), logged, and
// the worker calls the gate again after a backoff: 50 ms doubling with
// each error in a row up to 5 s, with jitter. Stop and Shutdown lift the
// gate: its ctx ends, and workers drain (Stop) or exit (Shutdown) without
// calling it again. Stats.AtGate counts the workers in the gate.
func WithClaimGate(gate func(ctx context.Context) error) Option {
	return func(c *config) error {
		if gate != nil {
			c.claimGate = gate
		}
		return nil
	}
}
