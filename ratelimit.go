package queue

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// Admission control: below a fill threshold every new request is
// admitted; at or above it a token bucket decides. The limiter engages
// only when the queue fills, so a quiet system never refuses anyone, and a
// filling one sheds new work before Enqueue has to refuse it.

// Admission defaults: engage at 80 % full, then admit 100 requests per
// second with bursts of 200, and ask refused clients to come back in 10s.
const (
	defaultRateLimitPct        = 80
	defaultRateLimitPerSec     = 100
	defaultRateLimitBurst      = 200
	defaultRateLimitRetryAfter = 10 * time.Second
)

// RateLimit configures the admission limiter Admit consults (see
// WithRateLimit). A zero field changes nothing, so RateLimit{} leaves the
// default limiter as it is and RateLimit{Reason: "server busy"} changes
// only the wording.
type RateLimit struct {
	// FillPct is the ready-queue fill, in percent (1..100), at or above
	// which the token bucket decides; below it every request is admitted.
	// Default 80.
	FillPct int
	// PerSecond is the token bucket's refill rate: the requests admitted
	// per second while the queue is filling. Default 100.
	PerSecond float64
	// Burst is the token bucket's size: how many requests may be admitted
	// at once before the rate applies. Default 200.
	Burst int
	// RetryAfter is how long a refused client is asked to wait before
	// trying again; RetryDelay returns it from Admit's error, and the
	// error's text shows it rounded up to a whole second. Default 10s.
	RetryAfter time.Duration
	// Reason is the host's text shown before the retry hint in the
	// refusal, because only the host knows how its clients word one.
	// Default "busy".
	Reason string
	// Disabled turns the limiter off: Admit always returns nil, and the
	// other fields are ignored. A later WithRateLimit without it turns the
	// limiter back on.
	Disabled bool
}

type admissionConfig struct {
	thresholdPct int // 0 disables
	perSec       float64
	burst        int
	retryAfter   time.Duration
	reason       string
}

func defaultAdmission() admissionConfig {
	return admissionConfig{
		thresholdPct: defaultRateLimitPct,
		perSec:       defaultRateLimitPerSec,
		burst:        defaultRateLimitBurst,
		retryAfter:   defaultRateLimitRetryAfter,
		reason:       defaultRefusalReason,
	}
}

func (a *admissionConfig) validate() error { return nil }

// WithRateLimit configures the admission limiter used by Admit (default
// RateLimit{}: engage at 80 % fill, then admit 100 requests per second
// with bursts of 200, and refuse the rest with "busy, retry in 10
// seconds"). A zero field of rl keeps the current value: the default,
// unless an earlier WithRateLimit changed it, so that a host may set its
// wording in one place and the limits in another. Negative numbers, a
// FillPct above 100 and a NaN or infinite PerSecond are refused. With
// Disabled set, Admit always returns nil.
//
// For example, WithRateLimit(RateLimit{RetryAfter: 5 * time.Second,
// Reason: "server busy"}) refuses with "server busy, retry in 5 seconds".
func WithRateLimit(rl RateLimit) Option {
	return func(c *config) error {
		if rl.Disabled {
			c.admission.thresholdPct = 0
			return nil
		}
		if rl.FillPct < 0 || rl.FillPct > 100 {
			return optErr("WithRateLimit", rl.FillPct, "FillPct must be in 1..100 (0 keeps the default)")
		}
		if rl.PerSecond < 0 || math.IsNaN(rl.PerSecond) || math.IsInf(rl.PerSecond, 0) {
			return optErr("WithRateLimit", rl.PerSecond, "PerSecond must be > 0 (0 keeps the default)")
		}
		if rl.Burst < 0 {
			return optErr("WithRateLimit", rl.Burst, "Burst must be >= 1 (0 keeps the default)")
		}
		if rl.RetryAfter < 0 {
			return optErr("WithRateLimit", rl.RetryAfter, "RetryAfter must be > 0 (0 keeps the default)")
		}
		a := c.admission
		switch {
		case rl.FillPct != 0:
			a.thresholdPct = rl.FillPct
		case a.thresholdPct == 0: // turned off by an earlier WithRateLimit
			a.thresholdPct = defaultRateLimitPct
		}
		if rl.PerSecond != 0 {
			a.perSec = rl.PerSecond
		}
		if rl.Burst != 0 {
			a.burst = rl.Burst
		}
		if rl.RetryAfter != 0 {
			a.retryAfter = rl.RetryAfter
		}
		if rl.Reason != "" {
			a.reason = rl.Reason
		}
		c.admission = a
		return nil
	}
}

type admission struct {
	cfg     admissionConfig
	limiter *rate.Limiter // nil when disabled
	fleet   *fleetBucket  // the store's shared bucket (Admitter); nil: limiter decides
	refusal error         // shared, immutable *rateLimitError
}

func newAdmission(cfg admissionConfig) *admission {
	a := &admission{cfg: cfg, refusal: newRateLimitError(cfg.retryAfter, cfg.reason)}
	if cfg.thresholdPct > 0 {
		a.limiter = rate.NewLimiter(rate.Limit(cfg.perSec), cfg.burst)
	}
	return a
}

// Admit decides whether the host should accept a new client request (an
// initial announce, an API call that will enqueue work). It returns nil
// while the ready queue's fill is below the rate-limit threshold; at or
// above it, a token bucket decides. A refusal matches ErrRateLimited
// (errors.Is); RetryDelay(err) returns how long the client should wait
// (RateLimit.RetryAfter); and err.Error() is the message ready to show the
// client, the Reason and the wait in whole seconds, rounded up: "busy,
// retry in 10 seconds" by default. Refusals are counted as rate_limited.
// With RateLimit.Disabled, Admit always returns nil.
//
// Below the threshold Admit does not allocate, lock or call the store. On
// the in-memory store it never blocks. On a store shared by several
// processes (one that implements Admitter: pgstore, redisstore) the bucket
// is one for the whole fleet, kept in the store: each process takes its
// tokens in leases of k = Burst/20 (1..50) and spends them locally, so an
// engaged Admit waits for one store round trip (at most 1 s) every k
// admissions and none otherwise; the fleet admits at most processes × k
// more than one bucket would, a leased token is spent at most 1 s after
// the store granted it, and while the store does not answer each process
// falls back to its own bucket.
func (q *Queue[T]) Admit() error {
	a := q.admit
	if a.limiter == nil || !atOrAbove(q.depth(), q.cfg.capacity, a.cfg.thresholdPct) {
		return nil
	}
	if f := a.fleet; f != nil {
		if f.allow() {
			return nil
		}
	} else if a.limiter.AllowN(q.clock.Now(), 1) {
		return nil
	}
	q.ctr.rateLimited.Add(1)
	return a.refusal
}

func (a *admissionConfig) String() string {
	return fmt.Sprintf("threshold %d%%, %g/s, burst %d", a.thresholdPct, a.perSec, a.burst)
}
