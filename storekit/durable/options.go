package durable

import (
	"fmt"
	"time"

	"github.com/queuekit/queue/queuetype"
	"github.com/queuekit/queue/storekit"
)

// Defaults of the options every durable store has. The poll interval's
// default is each store's own: how often it looks for work it was not
// told about depends on how it is told.
const (
	DefaultMaxPayload      = 1 << 20
	DefaultLeaseTTL        = 30 * time.Second
	DefaultLeaderTTL       = 10 * time.Second
	DefaultJanitorInterval = time.Second
	DefaultDeadRetention   = 7 * 24 * time.Hour
)

// Lower bounds of the options. A lease or leader TTL below 100 ms leaves
// no time for the round trips that renew it; an interval below 1 ms makes
// a loop spin.
const (
	MinTTL      = 100 * time.Millisecond
	MinInterval = time.Millisecond
	MaxWorkerID = 200 // bytes
)

// Options are the settings every durable store has. A store embeds them in
// its own options and sets them with the Set methods, which check the
// value and name the store's option in the error.
type Options struct {
	Pkg             string         // the store's package, "pgstore" or "redisstore": names the options in errors
	Codec           storekit.Codec // encodes payloads (WithCodec); JSON by default
	MaxPayload      int            // the largest encoded payload accepted, in bytes (WithMaxPayload)
	LeaseTTL        time.Duration  // how long a claim holds a job without a heartbeat (WithLeaseTTL)
	LeaderTTL       time.Duration  // the leader's term (WithLeaderTTL)
	PollInterval    time.Duration  // the claim poll's floor when no wake-up comes (WithPollInterval)
	JanitorInterval time.Duration  // how often the leader's janitor and every process's rescue run (WithJanitorInterval)
	DeadRetention   time.Duration  // how long ended jobs are kept (WithDeadRetention)
	WorkerID        string         // this process's name in leases and leadership
}

// Defaults returns the options of package pkg with their defaults, the
// store's own poll interval and a new worker ID (NewWorkerID).
func Defaults(pkg string, pollInterval time.Duration) Options {
	return Options{
		Pkg:             pkg,
		Codec:           JSONCodec{},
		MaxPayload:      DefaultMaxPayload,
		LeaseTTL:        DefaultLeaseTTL,
		LeaderTTL:       DefaultLeaderTTL,
		PollInterval:    pollInterval,
		JanitorInterval: DefaultJanitorInterval,
		DeadRetention:   DefaultDeadRetention,
		WorkerID:        NewWorkerID(),
	}
}

// Apply applies opts to o in order, skipping nil ones, and returns the
// first error.
func Apply[O any, F ~func(*O) error](o *O, opts []F) error {
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(o); err != nil {
			return err
		}
	}
	return nil
}

// Err returns the *queue.OptionError of the store's option (named without
// the package: "WithLeaseTTL"), with the reason formatted from reason and
// args.
func (o *Options) Err(option string, value any, reason string, args ...any) error {
	return &queuetype.OptionError{Option: o.Pkg + "." + option, Value: value, Reason: fmt.Sprintf(reason, args...)}
}

// SetCodec sets the payload codec (WithCodec); it must not be nil.
func (o *Options) SetCodec(c storekit.Codec) error {
	if c == nil {
		return o.Err("WithCodec", nil, "must not be nil")
	}
	o.Codec = c
	return nil
}

// SetMaxPayload sets the largest encoded payload in bytes
// (WithMaxPayload); it must be at least 1.
func (o *Options) SetMaxPayload(n int) error {
	if n < 1 {
		return o.Err("WithMaxPayload", n, "must be >= 1")
	}
	o.MaxPayload = n
	return nil
}

// SetLeaseTTL sets a claim's lease (WithLeaseTTL); at least MinTTL.
func (o *Options) SetLeaseTTL(d time.Duration) error {
	return o.setDuration(&o.LeaseTTL, "WithLeaseTTL", d, MinTTL)
}

// SetLeaderTTL sets the leader's term (WithLeaderTTL); at least MinTTL.
func (o *Options) SetLeaderTTL(d time.Duration) error {
	return o.setDuration(&o.LeaderTTL, "WithLeaderTTL", d, MinTTL)
}

// SetPollInterval sets the poll interval (WithPollInterval); at least
// MinInterval.
func (o *Options) SetPollInterval(d time.Duration) error {
	return o.setDuration(&o.PollInterval, "WithPollInterval", d, MinInterval)
}

// SetJanitorInterval sets the janitor interval (WithJanitorInterval); at
// least MinInterval.
func (o *Options) SetJanitorInterval(d time.Duration) error {
	return o.setDuration(&o.JanitorInterval, "WithJanitorInterval", d, MinInterval)
}

// SetDeadRetention sets how long dead jobs are kept (WithDeadRetention); at
// least 0, which removes them at the janitor's next pass.
func (o *Options) SetDeadRetention(d time.Duration) error {
	return o.setDuration(&o.DeadRetention, "WithDeadRetention", d, 0)
}

// SetWorkerID names this process in the store's leases and leadership
// (WithWorkerID): 1 to MaxWorkerID bytes.
func (o *Options) SetWorkerID(id string) error {
	if id == "" || len(id) > MaxWorkerID {
		return o.Err("WithWorkerID", fmt.Sprintf("%q", id), "must be 1..%d bytes", MaxWorkerID)
	}
	o.WorkerID = id
	return nil
}

func (o *Options) setDuration(dst *time.Duration, option string, d, least time.Duration) error {
	if d < least {
		return o.Err(option, d, "must be >= %v", least)
	}
	*dst = d
	return nil
}

// HeartbeatInterval is how often the queue renews the leases of the jobs
// it runs: a third of the lease TTL, so that two renewals may fail before
// a lease expires.
func (o *Options) HeartbeatInterval() time.Duration { return o.LeaseTTL / 3 }

// Encode encodes a job's payload with the codec and refuses it, with an
// error matching queue.ErrPayloadTooLarge that gives the size and the
// limit, when it is larger than MaxPayload.
func (o *Options) Encode(payload any) ([]byte, error) {
	b, err := o.Codec.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("%s: encoding payload: %w", o.Pkg, err)
	}
	if len(b) > o.MaxPayload {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", queuetype.ErrPayloadTooLarge, len(b), o.MaxPayload)
	}
	return b, nil
}

// Decode decodes the payload of job id into v, a pointer to a payload; a
// payload the codec refuses is a *queue.DecodeError.
func (o *Options) Decode(id int64, data []byte, v any) error {
	if err := o.Codec.Unmarshal(data, v); err != nil {
		return &queuetype.DecodeError{JobID: id, Err: err}
	}
	return nil
}
