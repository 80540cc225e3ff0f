package sqlitestore

import (
	"time"

	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// Option configures a Store. New applies the options in order and returns
// a *queue.OptionError naming the first bad one.
type Option func(*options) error

// Defaults of the options, in the order of the options below. The ones
// every durable store shares (payload limit, lease and leader TTLs,
// janitor interval, dead retention) are equal in pgstore, redisstore and
// sqlitestore.
const (
	// DefaultMaxPayload is WithMaxPayload's default: 1 MiB.
	DefaultMaxPayload int = 1 << 20
	// DefaultPollInterval is WithPollInterval's default.
	DefaultPollInterval time.Duration = time.Second
	// DefaultClaimBatch is WithClaimBatch's default.
	DefaultClaimBatch int = 1000
	// DefaultLeaseTTL is WithLeaseTTL's default.
	DefaultLeaseTTL time.Duration = 30 * time.Second
	// DefaultJanitorInterval is WithJanitorInterval's default.
	DefaultJanitorInterval time.Duration = time.Second
	// DefaultCompletedRetention is WithCompletedRetention's default.
	DefaultCompletedRetention time.Duration = 24 * time.Hour
	// DefaultDeadRetention is WithDeadRetention's default: a week.
	DefaultDeadRetention time.Duration = 7 * 24 * time.Hour
	// DefaultLeaderTTL is WithLeaderTTL's default.
	DefaultLeaderTTL time.Duration = 10 * time.Second
)

type options struct {
	durable.Options
	keepCompleted time.Duration
	claimBatch    int
	checkCapacity bool
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		Options:       durable.Defaults("sqlitestore", DefaultPollInterval),
		keepCompleted: DefaultCompletedRetention,
		claimBatch:    DefaultClaimBatch,
		checkCapacity: true,
	}
	err := durable.Apply(&o, opts)
	return o, err
}

func shared[V any](set func(*durable.Options, V) error, v V) Option {
	return func(o *options) error { return set(&o.Options, v) }
}

// WithCodec sets how payloads are encoded (default: encoding/json). Every
// process of a queue must use the same codec.
func WithCodec(c storekit.Codec) Option { return shared((*durable.Options).SetCodec, c) }

// WithMaxPayload bounds the encoded size of one job's payload in bytes
// (default 1 MiB; at least 1). A job above it is refused with an error
// matching queue.ErrPayloadTooLarge and nothing is inserted.
func WithMaxPayload(n int) Option { return shared((*durable.Options).SetMaxPayload, n) }

// WithPollInterval sets how often the store looks for work when nothing
// woke it (default 1s; at least 1ms): the floor under the wake-ups (this
// process's own writes at once, other processes' within the DB's wake
// interval), and the refresh of Len.
func WithPollInterval(d time.Duration) Option { return shared((*durable.Options).SetPollInterval, d) }

// WithClaimBatch sets the most jobs one claim takes (default 1000). A
// claim takes only as many jobs as there are workers waiting.
func WithClaimBatch(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return o.Err("WithClaimBatch", n, "must be >= 1")
		}
		o.claimBatch = n
		return nil
	}
}

// WithLeaseTTL sets how long a claim lasts without a heartbeat (default
// 30s; at least 100ms). The queue heartbeats every third of it; a process
// that dies leaves its jobs to be rescued by any other process of the
// queue within TTL + the janitor interval.
func WithLeaseTTL(d time.Duration) Option { return shared((*durable.Options).SetLeaseTTL, d) }

// WithCapacityCheck decides whether Add refuses a ready job with
// queue.ErrQueueFull when the queue's available jobs reach the queue's
// capacity (default on). EnqueueMany and EnqueueTx never check.
func WithCapacityCheck(on bool) Option {
	return func(o *options) error { o.checkCapacity = on; return nil }
}

// WithJanitorInterval sets how often every process rescues jobs whose
// lease expired (default 1s; at least 1ms). The leader's retention
// pruning runs every 60 janitor intervals, and at every interval while it
// is behind.
func WithJanitorInterval(d time.Duration) Option {
	return shared((*durable.Options).SetJanitorInterval, d)
}

// WithCompletedRetention sets how long completed and cancelled jobs are
// kept before the leader prunes them (default 24h). Zero prunes them at
// the next pruning pass.
func WithCompletedRetention(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return o.Err("WithCompletedRetention", d, "must be >= 0s")
		}
		o.keepCompleted = d
		return nil
	}
}

// WithDeadRetention sets how long dead jobs are kept before the leader
// prunes them (default 7 days). Zero prunes them at the next pruning
// pass.
func WithDeadRetention(d time.Duration) Option { return shared((*durable.Options).SetDeadRetention, d) }

// WithLeaderTTL sets the leader's term (default 10s; at least 100ms).
func WithLeaderTTL(d time.Duration) Option { return shared((*durable.Options).SetLeaderTTL, d) }

// WithWorkerID names this process in lease and leader rows (default
// host-pid-random; 1 to 200 bytes). It must be unique among the processes
// sharing the file.
func WithWorkerID(id string) Option { return shared((*durable.Options).SetWorkerID, id) }
