package redisstore

import (
	"fmt"
	"time"

	"github.com/queuekit/queue"
	"github.com/redis/go-redis/v9"
)

// Option configures a Store. New validates every option and returns a
// *queue.OptionError naming the first bad one.
type Option func(*options) error

// Defaults of the options.
const (
	DefaultPrefix          = "queue"
	DefaultMaxPayload      = 1 << 20
	DefaultLeaseTTL        = 30 * time.Second
	DefaultLeaderTTL       = 10 * time.Second
	DefaultFallbackSize    = 10000
	DefaultHealthInterval  = time.Second
	DefaultHealthTimeout   = time.Second
	DefaultConnectTimeout  = 5 * time.Second
	DefaultPollInterval    = 2 * time.Second
	DefaultDeadRetention   = 7 * 24 * time.Hour
	DefaultDeadMax         = 10000
	DefaultJanitorInterval = time.Second
)

type options struct {
	prefix          string
	codec           queue.Codec
	maxPayload      int
	leaseTTL        time.Duration
	leaderTTL       time.Duration
	fallbackSize    int
	healthInterval  time.Duration
	healthTimeout   time.Duration
	connectTimeout  time.Duration
	startDegraded   bool
	pollInterval    time.Duration
	deadRetention   time.Duration
	deadMax         int
	janitorInterval time.Duration
	shardClients    map[string]redis.UniversalClient
}

func defaultOptions() options {
	return options{
		prefix:          DefaultPrefix,
		codec:           queue.JSONCodec{},
		maxPayload:      DefaultMaxPayload,
		leaseTTL:        DefaultLeaseTTL,
		leaderTTL:       DefaultLeaderTTL,
		fallbackSize:    DefaultFallbackSize,
		healthInterval:  DefaultHealthInterval,
		healthTimeout:   DefaultHealthTimeout,
		connectTimeout:  DefaultConnectTimeout,
		pollInterval:    DefaultPollInterval,
		deadRetention:   DefaultDeadRetention,
		deadMax:         DefaultDeadMax,
		janitorInterval: DefaultJanitorInterval,
	}
}

func optErr(option string, value any, reason string, args ...any) error {
	return &queue.OptionError{Option: option, Value: value, Reason: fmt.Sprintf(reason, args...)}
}

// WithPrefix sets the first part of the hash tag "{prefix:queue-name}" that
// starts every key of the queue (default "queue"). It must not be empty and
// must not contain '{', '}', spaces or control characters.
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		if why := validTagPart(prefix); why != "" {
			return optErr("WithPrefix", fmt.Sprintf("%q", prefix), "%s", why)
		}
		o.prefix = prefix
		return nil
	}
}

// WithCodec sets how payloads are encoded (default queue.JSONCodec). Every
// process of a queue must use the same codec.
func WithCodec(c queue.Codec) Option {
	return func(o *options) error {
		if c == nil {
			return optErr("WithCodec", nil, "must not be nil")
		}
		o.codec = c
		return nil
	}
}

// WithMaxPayload bounds the encoded size of one job's payload in bytes
// (default 1 MiB). A job above it is refused with a
// *queue.PayloadTooLargeError (matching queue.ErrPayloadTooLarge) and
// nothing is stored.
func WithMaxPayload(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return optErr("WithMaxPayload", n, "must be >= 1")
		}
		o.maxPayload = n
		return nil
	}
}

// WithLeaseTTL sets how long a claimed job stays leased without a heartbeat
// (default 30s). The queue heartbeats every third of it; a job whose
// process stops heartbeating runs again after it expires.
func WithLeaseTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond {
			return optErr("WithLeaseTTL", d, "must be >= 100ms")
		}
		o.leaseTTL = d
		return nil
	}
}

// WithLeaderTTL sets the TTL of the leader key (default 10s, as in seed
// 002). The leader renews it every third of the TTL; when the leader dies,
// another process takes over within the TTL plus half a second.
func WithLeaderTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 300*time.Millisecond {
			return optErr("WithLeaderTTL", d, "must be >= 300ms")
		}
		o.leaderTTL = d
		return nil
	}
}

// WithShard serves the jobs of the priority label from a separate Redis
// client (default: every priority on the client given to New), so that a
// backlog on one Redis never delays the priorities served by another.
// Labels given the same client share a shard. Dedupe by Key and Group and
// the Capacity bound hold per shard: jobs sharing a Key must use priorities
// of one shard. The label is checked against the queue's priorities in
// Init.
func WithShard(label string, client redis.UniversalClient) Option {
	return func(o *options) error {
		if client == nil {
			return optErr("WithShard", label, "client must not be nil")
		}
		if label == "" {
			return optErr("WithShard", `""`, "label must not be empty")
		}
		if o.shardClients == nil {
			o.shardClients = map[string]redis.UniversalClient{}
		}
		o.shardClients[label] = client
		return nil
	}
}

// WithFallback bounds the in-memory fallback queue that takes jobs while
// Redis is unreachable (default 10000 jobs). 0 turns the fallback off: Add
// then returns the connection error during an outage.
func WithFallback(size int) Option {
	return func(o *options) error {
		if size < 0 {
			return optErr("WithFallback", size, "must be >= 0")
		}
		o.fallbackSize = size
		return nil
	}
}

// WithHealthCheck sets how often each Redis is pinged and how long a ping
// may take (default 1s and 1s). A failed ping or command switches the store
// to its fallback; the first successful ping after that writes the fallback
// back and switches to Redis again.
func WithHealthCheck(interval, timeout time.Duration) Option {
	return func(o *options) error {
		if interval <= 0 {
			return optErr("WithHealthCheck", interval, "interval must be > 0")
		}
		if timeout <= 0 {
			return optErr("WithHealthCheck", timeout, "timeout must be > 0")
		}
		o.healthInterval, o.healthTimeout = interval, timeout
		return nil
	}
}

// WithConnect sets how long New waits for Redis to answer (default 5s) and
// what it does when Redis does not: return the error (degraded false, the
// default) or start on the in-memory fallback and switch to Redis once it
// answers (degraded true; needs the fallback on).
func WithConnect(timeout time.Duration, degraded bool) Option {
	return func(o *options) error {
		if timeout <= 0 {
			return optErr("WithConnect", timeout, "timeout must be > 0")
		}
		o.connectTimeout, o.startDegraded = timeout, degraded
		return nil
	}
}

// WithPollInterval sets the longest a waiting Claim sleeps without a wake-up
// before it looks again (default 2s). Wake-ups normally come at once from
// the wake list and at the next due time; the poll only bounds the delay
// after a lost wake-up.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return optErr("WithPollInterval", d, "must be > 0")
		}
		o.pollInterval = d
		return nil
	}
}

// WithDeadRetention sets how long dead-lettered jobs are kept and how many
// at most (default 7 days and 10000). The leader deletes older ones.
func WithDeadRetention(d time.Duration, max int) Option {
	return func(o *options) error {
		if d <= 0 {
			return optErr("WithDeadRetention", d, "must be > 0")
		}
		if max < 0 {
			return optErr("WithDeadRetention", max, "max must be >= 0")
		}
		o.deadRetention, o.deadMax = d, max
		return nil
	}
}

// WithJanitorInterval sets how often every process rescues expired leases
// (at a random point of each interval's second half, so that processes
// spread their calls) and how often the leader promotes due jobs and
// trims the dead set (default 1s). A job of a process that died runs
// again within the lease TTL (WithLeaseTTL) plus this interval, and the
// time a worker takes to claim it, whether or not the leader died too.
func WithJanitorInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return optErr("WithJanitorInterval", d, "must be > 0")
		}
		o.janitorInterval = d
		return nil
	}
}
