package pgstore

import (
	"fmt"
	"regexp"
	"time"

	"github.com/queuekit/queue"
)

// Option configures a Store (and, for WithSchema, Migrate). New applies the
// options in order and returns a *queue.OptionError naming the first bad one.
type Option func(*options) error

// Defaults.
const (
	DefaultMaxPayload         = 1 << 20
	DefaultLeaseTTL           = 30 * time.Second
	DefaultLeaderTTL          = 10 * time.Second
	DefaultPollInterval       = time.Second
	DefaultJanitorInterval    = time.Second
	DefaultCompletedRetention = 24 * time.Hour
	DefaultDeadRetention      = 7 * 24 * time.Hour
	DefaultClaimBatch         = 1000
	DefaultWriteBatch         = 1000
)

type options struct {
	schema          string
	codec           queue.Codec
	maxPayload      int
	leaseTTL        time.Duration
	leaderTTL       time.Duration
	pollInterval    time.Duration
	janitorInterval time.Duration
	keepCompleted   time.Duration
	keepDead        time.Duration
	claimBatch      int
	writeBatch      int
	listen          bool
	checkCapacity   bool
	workerID        string
}

func defaultOptions() options {
	return options{
		codec:           queue.JSONCodec{},
		maxPayload:      DefaultMaxPayload,
		leaseTTL:        DefaultLeaseTTL,
		leaderTTL:       DefaultLeaderTTL,
		pollInterval:    DefaultPollInterval,
		janitorInterval: DefaultJanitorInterval,
		keepCompleted:   DefaultCompletedRetention,
		keepDead:        DefaultDeadRetention,
		claimBatch:      DefaultClaimBatch,
		writeBatch:      DefaultWriteBatch,
		listen:          true,
		checkCapacity:   true,
	}
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

func optErr(option string, value any, reason string) error {
	return &queue.OptionError{Option: "pgstore." + option, Value: value, Reason: reason}
}

// identRE is what pgstore accepts as a schema name: an unquoted
// PostgreSQL identifier of at most 63 bytes. Names are also quoted when
// they are put into SQL; the check keeps them readable and safe.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// queueNameRE is what pgstore accepts as a queue name (queue.WithName): a
// letter, digit or underscore, then up to 62 of those or . : -. Queue names
// are only ever passed to PostgreSQL as query parameters.
var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$`)

// queueNameRule says queueNameRE in words, for the error; redisstore
// applies the same rule with the same words.
const queueNameRule = "use 1 to 63 letters, digits, '_', '.', ':' or '-', starting with a letter, digit or '_'"

// WithSchema puts the store's tables in schema (default "": the first
// schema of the connection's search_path, usually public). Migrate creates
// the schema if it does not exist. name must be an unquoted identifier:
// a letter or underscore, then letters, digits or underscores, at most 63
// in all.
func WithSchema(name string) Option {
	return func(o *options) error {
		if !identRE.MatchString(name) {
			return optErr("WithSchema", fmt.Sprintf("%q", name), "not a valid identifier ([A-Za-z_][A-Za-z0-9_]{0,62})")
		}
		o.schema = name
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
// nothing is inserted.
func WithMaxPayload(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return optErr("WithMaxPayload", n, "must be >= 1")
		}
		o.maxPayload = n
		return nil
	}
}

// WithLeaseTTL sets how long a claim lasts without a heartbeat (default
// 30s). The queue heartbeats every third of it; a process that dies leaves
// its jobs to be rescued by any other process of the queue, leader or
// not, within TTL + the janitor interval, and run at once.
func WithLeaseTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond {
			return optErr("WithLeaseTTL", d, "must be >= 100ms")
		}
		o.leaseTTL = d
		return nil
	}
}

// WithLeaderTTL sets the leader's lease (default 10s). The leader renews it
// every third of the TTL; others try to take it every tenth, so a dead
// leader is replaced within TTL + TTL/10.
func WithLeaderTTL(d time.Duration) Option {
	return func(o *options) error {
		if d < 100*time.Millisecond {
			return optErr("WithLeaderTTL", d, "must be >= 100ms")
		}
		o.leaderTTL = d
		return nil
	}
}

// WithPollInterval sets how often the store looks for new work when no
// notification arrives (default 1s). With WithListen(false) it is the only
// way the store learns of other processes' jobs.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond {
			return optErr("WithPollInterval", d, "must be >= 1ms")
		}
		o.pollInterval = d
		return nil
	}
}

// WithJanitorInterval sets how often every process rescues jobs whose
// lease expired (default 1s; each wait is shortened by up to a random
// quarter, to spread the processes' statements). The leader's retention
// pruning runs every 60 janitor intervals, and at every interval while it
// is behind.
func WithJanitorInterval(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Millisecond {
			return optErr("WithJanitorInterval", d, "must be >= 1ms")
		}
		o.janitorInterval = d
		return nil
	}
}

// WithRetention sets how long completed and cancelled jobs (completed) and
// dead jobs (dead) are kept before the leader prunes them (default 24h and
// 7 days). Zero prunes them at the next pruning pass.
func WithRetention(completed, dead time.Duration) Option {
	return func(o *options) error {
		if completed < 0 {
			return optErr("WithRetention", completed, "completed retention must be >= 0")
		}
		if dead < 0 {
			return optErr("WithRetention", dead, "dead retention must be >= 0")
		}
		o.keepCompleted, o.keepDead = completed, dead
		return nil
	}
}

// WithBatchSizes sets the most jobs one claim statement takes (default
// 1000) and the most outcomes (completions, retries, dead-letters) one
// write transaction carries (default 1000). A claim takes only as many
// jobs as there are workers waiting or about to come back for one; the
// claim batch bounds it, so that with more workers than the batch their
// claims take several round trips.
func WithBatchSizes(claim, write int) Option {
	return func(o *options) error {
		if claim < 1 {
			return optErr("WithBatchSizes", claim, "claim batch must be >= 1")
		}
		if write < 1 {
			return optErr("WithBatchSizes", write, "write batch must be >= 1")
		}
		o.claimBatch, o.writeBatch = claim, write
		return nil
	}
}

// WithListen turns LISTEN/NOTIFY wake-ups on or off (default on). Turn it
// off behind a pooler that cannot hold a session (PgBouncer in transaction
// mode); polling (WithPollInterval) then does all the work.
func WithListen(on bool) Option {
	return func(o *options) error { o.listen = on; return nil }
}

// WithCapacityCheck decides whether Add refuses a ready job with
// queue.ErrQueueFull when the queue's available jobs reach the queue's
// capacity (default on). The check is a bounded count in the insert
// statement; concurrent Adds may overshoot by the number of callers. Turn
// it off for bulk producers; EnqueueMany and EnqueueTx never check.
func WithCapacityCheck(on bool) Option {
	return func(o *options) error { o.checkCapacity = on; return nil }
}

// WithWorkerID names this process in lease and leader rows (default
// host-pid-random). It must be unique among the processes sharing the
// database.
func WithWorkerID(id string) Option {
	return func(o *options) error {
		if id == "" || len(id) > 200 {
			return optErr("WithWorkerID", fmt.Sprintf("%q", id), "must be 1..200 bytes")
		}
		o.workerID = id
		return nil
	}
}
