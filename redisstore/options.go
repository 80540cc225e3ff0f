package redisstore

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// Option configures a Store. New applies the options in order and returns
// a *queue.OptionError naming the first bad one.
type Option func(*options) error

// Defaults of the options, in the order of the options below. Each is
// the value its option takes when the option is not given; the ones
// every durable store shares (payload limit, lease and
// leader TTLs, janitor interval, dead retention) are equal in redisstore
// and pgstore.
const (
	// DefaultPrefix is WithPrefix's default.
	DefaultPrefix string = "queue"
	// DefaultLeaseTTL is WithLeaseTTL's default.
	DefaultLeaseTTL time.Duration = 30 * time.Second
	// DefaultFallbackSize is WithFallback's default.
	DefaultFallbackSize int = 10000
	// DefaultMaxPayload is WithMaxPayload's default: 1 MiB.
	DefaultMaxPayload int = 1 << 20
	// DefaultHealthInterval is WithHealthCheck's default interval.
	DefaultHealthInterval time.Duration = time.Second
	// DefaultHealthTimeout is WithHealthCheck's default timeout.
	DefaultHealthTimeout time.Duration = time.Second
	// DefaultLeaderTTL is WithLeaderTTL's default.
	DefaultLeaderTTL time.Duration = 10 * time.Second
	// DefaultConnectTimeout is WithConnect's default timeout.
	DefaultConnectTimeout time.Duration = 5 * time.Second
	// DefaultPollInterval is WithPollInterval's default.
	DefaultPollInterval time.Duration = 2 * time.Second
	// DefaultDeadRetention is WithDeadRetention's default: a week.
	DefaultDeadRetention time.Duration = 7 * 24 * time.Hour
	// DefaultDeadMax is WithDeadMax's default.
	DefaultDeadMax int = 10000
	// DefaultJanitorInterval is WithJanitorInterval's default.
	DefaultJanitorInterval time.Duration = time.Second
)

// options are the shared durable options (codec, payload limit, lease and
// leader TTLs, intervals, dead retention, worker ID) and redisstore's own.
type options struct {
	prefix         string
	fallbackSize   int
	healthInterval time.Duration
	healthTimeout  time.Duration
	connectTimeout time.Duration
	startDegraded  bool
	deadMax        int
	shardClients   map[string]redis.UniversalClient
	durable.Options
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		prefix:         DefaultPrefix,
		fallbackSize:   DefaultFallbackSize,
		healthInterval: DefaultHealthInterval,
		healthTimeout:  DefaultHealthTimeout,
		connectTimeout: DefaultConnectTimeout,
		deadMax:        DefaultDeadMax,
		Options:        durable.Defaults("redisstore", DefaultPollInterval),
	}
	if err := durable.Apply(&o, opts); err != nil {
		return o, err
	}
	if o.startDegraded && o.fallbackSize == 0 {
		return o, o.Err("WithConnect", true, "starting degraded needs the fallback (WithFallback > 0)")
	}
	return o, nil
}

// shared adapts a setter of the options every durable store has.
func shared[V any](set func(*durable.Options, V) error, v V) Option {
	return func(o *options) error { return set(&o.Options, v) }
}

// WithPrefix sets the first part of the hash tag "{prefix:queue-name}" that
// starts every key of the queue (default "queue"). It must not be empty and
// must not contain '{', '}', spaces or control characters.
func WithPrefix(prefix string) Option {
	return func(o *options) error {
		if why := validTagPart(prefix); why != "" {
			return o.Err("WithPrefix", fmt.Sprintf("%q", prefix), "%s", why)
		}
		o.prefix = prefix
		return nil
	}
}

// WithLeaseTTL sets how long a claimed job stays leased without a heartbeat
// (default 30s; at least 100ms). The queue heartbeats every third of it; a
// job whose process stops heartbeating runs again after it expires.
func WithLeaseTTL(d time.Duration) Option { return shared((*durable.Options).SetLeaseTTL, d) }

// WithShard serves the jobs of the priority label from a separate Redis
// client (default: every priority on the client given to New), so that a
// backlog on one Redis never delays the priorities served by another.
// Labels given the same client share a shard. Dedupe by Key and Group and
// the Capacity bound hold per shard: jobs sharing a Key must use priorities
// of one shard. The label is checked against the queue's priorities in
// Init. Two shards must not be one Redis database (the queue's keys carry
// no shard part): Start refuses two plain clients that reach the same
// server (by its run_id) and DB number.
func WithShard(label string, client redis.UniversalClient) Option {
	return func(o *options) error {
		if client == nil {
			return o.Err("WithShard", label, "client must not be nil")
		}
		if label == "" {
			return o.Err("WithShard", `""`, "label must not be empty")
		}
		if o.shardClients == nil {
			o.shardClients = map[string]redis.UniversalClient{}
		}
		o.shardClients[label] = client
		return nil
	}
}

// WithCodec sets how payloads are encoded (default: encoding/json). Every
// process of a queue must use the same codec.
func WithCodec(c storekit.Codec) Option { return shared((*durable.Options).SetCodec, c) }

// WithFallback bounds the in-memory fallback queue that takes jobs while
// Redis is unreachable (default 10000 jobs). 0 turns the fallback off: Add
// then returns the connection error during an outage.
func WithFallback(size int) Option {
	return func(o *options) error {
		if size < 0 {
			return o.Err("WithFallback", size, "must be >= 0")
		}
		o.fallbackSize = size
		return nil
	}
}

// WithMaxPayload bounds the encoded size of one job's payload in bytes
// (default 1 MiB; at least 1). A job above it is refused with a
// an error matching queue.ErrPayloadTooLarge and
// nothing is stored.
func WithMaxPayload(n int) Option { return shared((*durable.Options).SetMaxPayload, n) }

// WithHealthCheck sets how often each Redis is pinged and how long a ping
// may take (default 1s and 1s). A failed ping or command switches the store
// to its fallback; the first successful ping after that writes the fallback
// back and switches to Redis again.
func WithHealthCheck(interval, timeout time.Duration) Option {
	return func(o *options) error {
		if interval <= 0 {
			return o.Err("WithHealthCheck", interval, "interval must be > 0")
		}
		if timeout <= 0 {
			return o.Err("WithHealthCheck", timeout, "timeout must be > 0")
		}
		o.healthInterval, o.healthTimeout = interval, timeout
		return nil
	}
}

// WithLeaderTTL sets the TTL of the leader key (default 10s; at least
// 100ms). The leader renews it every third of the TTL; the others try to
// take it every tenth, at most every 500ms, so when the leader dies
// another process leads within TTL + min(TTL/10, 500ms), and at once when
// it gives the key up in Close.
func WithLeaderTTL(d time.Duration) Option { return shared((*durable.Options).SetLeaderTTL, d) }

// WithConnect sets how long New waits for Redis to answer (default 5s) and
// what it does when Redis does not, an outage: return the error (degraded
// false, the default) or start on the in-memory fallback and switch to
// Redis once it answers (degraded true; needs the fallback on). A refused
// password, user or DB number and an address that cannot work are New's
// error either way.
func WithConnect(timeout time.Duration, degraded bool) Option {
	return func(o *options) error {
		if timeout <= 0 {
			return o.Err("WithConnect", timeout, "timeout must be > 0")
		}
		o.connectTimeout, o.startDegraded = timeout, degraded
		return nil
	}
}

// WithPollInterval sets the longest a waiting Claim sleeps without a wake-up
// before it looks again (default 2s; at least 1ms). Wake-ups normally come
// at once from the wake list and at the next due time; the poll only
// bounds the delay after a lost wake-up.
func WithPollInterval(d time.Duration) Option { return shared((*durable.Options).SetPollInterval, d) }

// WithDeadRetention sets how long dead-lettered jobs are kept (default 7
// days). The leader deletes older ones; zero deletes them at its next
// janitor pass. WithDeadMax bounds their number too.
func WithDeadRetention(d time.Duration) Option { return shared((*durable.Options).SetDeadRetention, d) }

// WithDeadMax bounds how many dead-lettered jobs are kept (default 10000;
// 0 keeps none). The leader deletes the oldest beyond it, so that the dead
// set's memory is bounded in Redis.
func WithDeadMax(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return o.Err("WithDeadMax", n, "must be >= 0")
		}
		o.deadMax = n
		return nil
	}
}

// WithJanitorInterval sets how often every process rescues expired leases
// (each wait drawn from the interval's second half, so that processes
// spread their calls) and how often the leader promotes due jobs and
// trims the dead set (default 1s; at least 1ms). A job of a process that
// died runs again within the lease TTL (WithLeaseTTL) plus this interval,
// and the time a worker takes to claim it, whether or not the leader died
// too.
func WithJanitorInterval(d time.Duration) Option {
	return shared((*durable.Options).SetJanitorInterval, d)
}

// WithWorkerID names this process in its leases and the leader key
// (default host-pid-random; 1 to 200 bytes). It must be unique among the
// processes sharing the queue.
func WithWorkerID(id string) Option { return shared((*durable.Options).SetWorkerID, id) }
