package queue

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Fan-out throttling (seeds 000 and 001): a request that would go to many
// targets goes to the eligible ones only — not disabled, not suspended,
// due for this key — in random order so load spreads, capped at
// WithFanoutMax, and at the throttle's top-N while the queue is filling.

// Fan-out defaults (seed 001).
const (
	DefaultFanoutMax    = 100
	DefaultThrottlePct  = 60
	DefaultThrottleTopN = 20
)

// WithFanoutMax caps the targets Fanout returns (default 100: the seed's
// max_forwarders_per_announce).
func WithFanoutMax(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return optErr("WithFanoutMax", n, "must be >= 1")
		}
		c.targets.fanoutMax = n
		return nil
	}
}

// WithThrottle sets the ready-queue fill at or above which Fanout returns
// at most topN targets (default 60 %, 20). thresholdPct 0 turns throttling
// off; topN must be >= 1 while it is on.
func WithThrottle(thresholdPct, topN int) Option {
	return func(c *config) error {
		if thresholdPct < 0 || thresholdPct > 100 {
			return optErr("WithThrottle", thresholdPct, "threshold must be in 0..100 (0 disables)")
		}
		if thresholdPct > 0 && topN < 1 {
			return optErr("WithThrottle", topN, "top-N must be >= 1 while throttling is on")
		}
		c.targets.throttlePct, c.targets.throttleTopN = thresholdPct, topN
		return nil
	}
}

// WithShuffle replaces the shuffle Fanout uses (default: Fisher–Yates over
// math/rand/v2), for tests that need a fixed order: pass
// rand.New(rand.NewPCG(1, 2)).Shuffle.
func WithShuffle(shuffle func(n int, swap func(i, j int))) Option {
	return func(c *config) error {
		if shuffle == nil {
			return optErr("WithShuffle", nil, "must not be nil")
		}
		c.targets.shuffle = shuffle
		return nil
	}
}

// Fanout returns the targets a request with key should be sent to: of
// candidates, those not disabled, not suspended and due for key (see Due),
// shuffled, and at most WithFanoutMax of them — or WithThrottle's top-N
// while the ready queue's fill is at or above the throttle threshold.
// Targets left out by throttling are counted as throttled. No candidates
// give an empty result. The result is a new slice; candidates is not
// modified.
func (q *Queue[T]) Fanout(key string, candidates []string) []string {
	if len(candidates) == 0 {
		return nil
	}
	now := q.clock.Now()
	ts := q.targets
	out := make([]string, 0, len(candidates))
	for _, c := range candidates {
		if ts.eligible(c, now) && ts.due.due(c, key, now.UnixNano()) {
			out = append(out, c)
		}
	}
	if ts.cfg.shuffle != nil {
		ts.cfg.shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	} else {
		for i := len(out) - 1; i > 0; i-- { // Fisher–Yates
			j := rand.IntN(i + 1)
			out[i], out[j] = out[j], out[i]
		}
	}
	limit := ts.cfg.fanoutMax
	if p := ts.cfg.throttlePct; p > 0 && q.store.Len()*100 >= p*q.cfg.capacity {
		if ts.cfg.throttleTopN < limit {
			limit = ts.cfg.throttleTopN
			if len(out) > limit {
				q.ctr.throttled.Add(uint64(len(out) - limit))
			}
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// Due reports whether target should get a request for key now: it has
// never been given one, or the next-due time set by SetNextDue has come
// (the seed's ShouldAnnounceNow).
func (q *Queue[T]) Due(target, key string) bool {
	return q.targets.due.due(target, key, q.clock.Now().UnixNano())
}

// SetNextDue records when target is next due for key (the seed's
// MarkAnnounced, with the interval the target asked for). A zero time
// makes it due at once. Entries are dropped once they are past due, so the
// table holds only pairs that are waiting.
func (q *Queue[T]) SetNextDue(target, key string, at time.Time) {
	q.targets.due.set(target, key, at, q.clock.Now().UnixNano())
}

type dueKey struct{ target, key string }

// dueTable holds next-due instants (UnixNano) per target and key.
type dueTable struct {
	mu    sync.Mutex
	m     map[dueKey]int64
	sweep int64 // next time to drop past-due entries
}

func (d *dueTable) due(target, key string, now int64) bool {
	d.mu.Lock()
	at, ok := d.m[dueKey{target, key}]
	d.mu.Unlock()
	return !ok || at <= now
}

func (d *dueTable) set(target, key string, at time.Time, now int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if at.IsZero() || at.UnixNano() <= now {
		delete(d.m, dueKey{target, key})
	} else {
		d.m[dueKey{target, key}] = at.UnixNano()
	}
	if now >= d.sweep && len(d.m) > 1024 {
		for k, v := range d.m {
			if v <= now {
				delete(d.m, k)
			}
		}
		d.sweep = now + int64(time.Minute)
	}
}

func (d *dueTable) String() string { return fmt.Sprintf("dueTable(%d)", len(d.m)) }
