package queue

import (
	"fmt"
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
	DefaultRateLimitPct        = 80
	DefaultRateLimitPerSec     = 100
	DefaultRateLimitBurst      = 200
	DefaultRateLimitRetryAfter = 10 * time.Second
)

type admissionConfig struct {
	thresholdPct int // 0 disables
	perSec       float64
	burst        int
	retryAfter   time.Duration
	reason       string // "" means defaultRefusalReason
}

func defaultAdmission() admissionConfig {
	return admissionConfig{
		thresholdPct: DefaultRateLimitPct,
		perSec:       DefaultRateLimitPerSec,
		burst:        DefaultRateLimitBurst,
		retryAfter:   DefaultRateLimitRetryAfter,
	}
}

func (a *admissionConfig) validate() error { return nil }

// WithRateLimit configures the admission limiter used by Admit (default
// 80 %, 100 tokens/s, burst 200). thresholdPct is the ready-queue fill at
// or above which the token bucket decides; 0 disables limiting entirely
// (Admit always returns nil). perSec must be > 0 and burst >= 1 unless the
// limiter is disabled.
func WithRateLimit(thresholdPct int, perSec float64, burst int) Option {
	return func(c *config) error {
		if thresholdPct < 0 || thresholdPct > 100 {
			return optErr("WithRateLimit", thresholdPct, "threshold must be in 0..100 (0 disables)")
		}
		if thresholdPct > 0 && !(perSec > 0) {
			return optErr("WithRateLimit", perSec, "tokens per second must be > 0")
		}
		if thresholdPct > 0 && burst < 1 {
			return optErr("WithRateLimit", burst, "burst must be >= 1")
		}
		c.admission.thresholdPct, c.admission.perSec, c.admission.burst = thresholdPct, perSec, burst
		return nil
	}
}

// WithRateLimitRefusal sets what Admit's refusal tells the client: how
// long to wait before trying again (default 10s), and the reason shown
// before the hint (default "busy"). The refusal's Message reads
// "<reason>, retry in <N> seconds", N being retryAfter rounded up to a
// whole second: "busy, retry in 10 seconds" by default, or, with
// WithRateLimitRefusal(5*time.Second, "server busy"), "server busy, retry
// in 5 seconds". The reason is the host's because only the host knows how
// its clients word a refusal. retryAfter must be > 0; a reason of "" keeps
// the default.
func WithRateLimitRefusal(retryAfter time.Duration, reason string) Option {
	return func(c *config) error {
		if retryAfter <= 0 {
			return optErr("WithRateLimitRefusal", retryAfter, "retry hint must be > 0")
		}
		c.admission.retryAfter, c.admission.reason = retryAfter, reason
		return nil
	}
}

type admission struct {
	cfg     admissionConfig
	limiter *rate.Limiter // nil when disabled
	refusal error         // shared, immutable *RateLimitError
}

func newAdmission(cfg admissionConfig) *admission {
	a := &admission{cfg: cfg, refusal: &RateLimitError{RetryAfter: cfg.retryAfter, Reason: cfg.reason}}
	if cfg.thresholdPct > 0 {
		a.limiter = rate.NewLimiter(rate.Limit(cfg.perSec), cfg.burst)
	}
	return a
}

// Admit decides whether the host should accept a new client request (an
// initial announce, an API call that will enqueue work). It returns nil
// while the ready queue's fill is below the rate-limit threshold; at or
// above it, a token bucket decides, and a refusal is a *RateLimitError
// (errors.Is(err, ErrRateLimited)) whose Message is ready to show the
// client (see WithRateLimitRefusal). Refusals are counted as rate_limited. With the threshold at 0,
// Admit always returns nil.
//
// Admit never blocks; below the threshold it does not allocate or lock.
func (q *Queue[T]) Admit() error {
	a := q.admit
	if a.limiter == nil || !atOrAbove(q.depth(), q.cfg.capacity, a.cfg.thresholdPct) {
		return nil
	}
	if a.limiter.AllowN(q.clock.Now(), 1) {
		return nil
	}
	q.ctr.rateLimited.Add(1)
	return a.refusal
}

func (a *admissionConfig) String() string {
	return fmt.Sprintf("threshold %d%%, %g/s, burst %d", a.thresholdPct, a.perSec, a.burst)
}
