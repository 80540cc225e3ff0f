package pgstore

import (
	"fmt"
	"regexp"
	"time"

	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// Option configures a Store (and, for WithSchema, Migrate). New applies the
// options in order and returns a *queue.OptionError naming the first bad one.
type Option func(*options) error

// Defaults of the options, in the order of the options below. Each is
// the value its option takes when the option is not given; the ones
// every durable store shares (payload limit, lease and
// leader TTLs, janitor interval, dead retention) are equal in pgstore and
// redisstore.
const (
	// DefaultMaxPayload is WithMaxPayload's default: 1 MiB.
	DefaultMaxPayload int = 1 << 20
	// DefaultPollInterval is WithPollInterval's default.
	DefaultPollInterval time.Duration = time.Second
	// DefaultClaimBatch is WithBatchSizes' default claim batch.
	DefaultClaimBatch int = 1000
	// DefaultWriteBatch is WithBatchSizes' default write batch.
	DefaultWriteBatch int = 1000
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

// options are the shared durable options (codec, payload limit, lease and
// leader TTLs, intervals, dead retention, worker ID) and pgstore's own.
type options struct {
	durable.Options
	schema        string
	keepCompleted time.Duration
	claimBatch    int
	writeBatch    int
	listen        bool
	checkCapacity bool
}

func buildOptions(opts []Option) (options, error) {
	o := options{
		Options:       durable.Defaults("pgstore", DefaultPollInterval),
		keepCompleted: DefaultCompletedRetention,
		claimBatch:    DefaultClaimBatch,
		writeBatch:    DefaultWriteBatch,
		listen:        true,
		checkCapacity: true,
	}
	err := durable.Apply(&o, opts)
	return o, err
}

// shared adapts a setter of the options every durable store has.
func shared[V any](set func(*durable.Options, V) error, v V) Option {
	return func(o *options) error { return set(&o.Options, v) }
}

// identRE is what pgstore accepts as a schema name: an unquoted
// PostgreSQL identifier of at most 63 bytes. Names are also quoted when
// they are put into SQL; the check keeps them readable and safe.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// WithSchema puts the store's tables in schema (default "": the first
// schema of the connection's search_path, usually public). Migrate creates
// the schema if it does not exist. name must be an unquoted identifier:
// a letter or underscore, then letters, digits or underscores, at most 63
// in all.
func WithSchema(name string) Option {
	return func(o *options) error {
		if !identRE.MatchString(name) {
			return o.Err("WithSchema", fmt.Sprintf("%q", name), "not a valid identifier ([A-Za-z_][A-Za-z0-9_]{0,62})")
		}
		o.schema = name
		return nil
	}
}

// WithCodec sets how payloads are encoded (default: encoding/json). Every
// process of a queue must use the same codec.
func WithCodec(c storekit.Codec) Option { return shared((*durable.Options).SetCodec, c) }

// WithMaxPayload bounds the encoded size of one job's payload in bytes
// (default 1 MiB; at least 1). A job above it is refused with a
// an error matching queue.ErrPayloadTooLarge and
// nothing is inserted.
func WithMaxPayload(n int) Option { return shared((*durable.Options).SetMaxPayload, n) }

// WithListen turns LISTEN/NOTIFY wake-ups on or off (default on). Turn it
// off behind a pooler that cannot hold a session (PgBouncer in transaction
// mode); polling (WithPollInterval) then does all the work.
func WithListen(on bool) Option {
	return func(o *options) error { o.listen = on; return nil }
}

// WithPollInterval sets how often the store looks for new work when no
// notification arrives (default 1s; at least 1ms). With WithListen(false)
// it is the only way the store learns of other processes' jobs.
func WithPollInterval(d time.Duration) Option { return shared((*durable.Options).SetPollInterval, d) }

// WithBatchSizes sets the most jobs one claim statement takes (default
// 1000) and the most outcomes (completions, retries, dead-letters) one
// write transaction carries (default 1000). A claim takes only as many
// jobs as there are workers waiting or about to come back for one; the
// claim batch bounds it, so that with more workers than the batch their
// claims take several round trips.
func WithBatchSizes(claim, write int) Option {
	return func(o *options) error {
		if claim < 1 {
			return o.Err("WithBatchSizes", claim, "claim batch must be >= 1")
		}
		if write < 1 {
			return o.Err("WithBatchSizes", write, "write batch must be >= 1")
		}
		o.claimBatch, o.writeBatch = claim, write
		return nil
	}
}

// WithLeaseTTL sets how long a claim lasts without a heartbeat (default
// 30s; at least 100ms), in the database server's time, whatever the
// processes' clocks read (see Clocks in the package documentation). The
// queue heartbeats every third of it; a process
// that dies leaves its jobs to be rescued by any other process of the
// queue, leader or not, within TTL + the janitor interval, and run at
// once.
func WithLeaseTTL(d time.Duration) Option { return shared((*durable.Options).SetLeaseTTL, d) }

// WithCapacityCheck decides whether Add refuses a ready job with
// queue.ErrQueueFull when the queue's available jobs reach the queue's
// capacity (default on). The check is a bounded count in the insert
// statement; concurrent Adds may overshoot by the number of callers. Turn
// it off for bulk producers; EnqueueMany and EnqueueTx never check.
func WithCapacityCheck(on bool) Option {
	return func(o *options) error { o.checkCapacity = on; return nil }
}

// WithJanitorInterval sets how often every process rescues jobs whose
// lease expired (default 1s; at least 1ms; each wait is drawn from the
// interval's second half, to spread the processes' statements). The
// leader's retention pruning runs every 60 janitor intervals, and at
// every interval while it is behind.
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

// WithLeaderTTL sets the leader's term (default 10s; at least 100ms). The
// leader renews it every third of the TTL; the others try to take it
// every tenth, at most every 500ms, so a dead leader is replaced within
// TTL + min(TTL/10, 500ms), and at once when it resigns in Close.
func WithLeaderTTL(d time.Duration) Option { return shared((*durable.Options).SetLeaderTTL, d) }

// WithWorkerID names this process in lease and leader rows (default
// host-pid-random; 1 to 200 bytes). It must be unique among the processes
// sharing the database.
func WithWorkerID(id string) Option { return shared((*durable.Options).SetWorkerID, id) }
