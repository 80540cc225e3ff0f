package queue

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Fan-out throttling: a request that would go to many
// targets goes to the eligible ones only — not disabled, not suspended,
// due for this key — in random order so load spreads, capped at
// WithFanout's max, and at its top-N while the queue is filling.

// Fan-out defaults: at most 100 targets per request, cut to the first 20
// while the ready queue is at least 60 % full.
const (
	defaultFanoutMax    = 100
	defaultThrottlePct  = 60
	defaultThrottleTopN = 20
)

// WithFanout bounds the targets Fanout returns. max caps them always
// (default 100), so that one request never becomes more jobs than that,
// however many targets it names. While the ready queue's fill is at or
// above throttlePct percent (default 60), Fanout returns at most topN
// (default 20) and counts the targets it leaves out as throttled. A zero
// argument keeps its default; throttlePct must be in 0..100 and the
// others >= 0. To turn throttling off, set topN to max or above:
// WithFanout(0, 0, math.MaxInt).
func WithFanout(max, throttlePct, topN int) Option {
	return func(c *config) error {
		if max < 0 {
			return optErr("WithFanout", max, "max must be >= 1 (0 keeps the default)")
		}
		if throttlePct < 0 || throttlePct > 100 {
			return optErr("WithFanout", throttlePct, "throttle threshold must be in 1..100 (0 keeps the default)")
		}
		if topN < 0 {
			return optErr("WithFanout", topN, "top-N must be >= 1 (0 keeps the default)")
		}
		if max != 0 {
			c.targets.fanoutMax = max
		}
		if throttlePct != 0 {
			c.targets.throttlePct = throttlePct
		}
		if topN != 0 {
			c.targets.throttleTopN = topN
		}
		return nil
	}
}

// WithShuffle replaces the shuffle Fanout uses (default: Fisher–Yates over
// math/rand/v2), for tests that need a fixed order: pass
// rand.New(rand.NewPCG(1, 2)).Shuffle. nil keeps the default.
func WithShuffle(shuffle func(n int, swap func(i, j int))) Option {
	return func(c *config) error {
		if shuffle != nil {
			c.targets.shuffle = shuffle
		}
		return nil
	}
}

// Fanout returns the targets a request with key should be sent to: of
// candidates, those not disabled, not suspended, not held by their
// breaker (open, or half-open with its probes running) and due for key (see Due),
// shuffled, and at most WithFanout's max of them — or its top-N while the
// ready queue's fill is at or above the throttle threshold.
// Targets left out by throttling are counted as throttled. No candidates
// give an empty result. The result is a new slice; candidates is not
// modified.
func (q *Queue[T]) Fanout(key string, candidates []string) []string {
	if len(candidates) == 0 {
		return nil
	}
	ts := q.targets
	now := ts.now()
	// Work on indices into candidates, in a stack buffer when they fit:
	// shuffling them moves no pointers, and only the targets kept are
	// copied out.
	var buf [128]int32
	picked := buf[:0]
	if len(candidates) > len(buf) {
		picked = make([]int32, 0, len(candidates))
	}
	blocked := ts.blocked.Load()
	ts.due.mu.RLock()
	waiting := ts.due.m[key] // targets not yet due for key
	for i, c := range candidates {
		if !blocked.eligible(c, now) {
			continue
		}
		if at, ok := waiting[c]; ok && at > now {
			continue
		}
		picked = append(picked, int32(i))
	}
	ts.due.mu.RUnlock()
	limit := ts.cfg.fanoutMax
	if p := ts.cfg.throttlePct; p > 0 && atOrAbove(q.depth(), q.cfg.capacity, p) {
		if ts.cfg.throttleTopN < limit {
			limit = ts.cfg.throttleTopN
			if len(picked) > limit {
				q.ctr.throttled.Add(uint64(len(picked) - limit))
			}
		}
	}
	if ts.cfg.shuffle != nil {
		out := make([]string, len(picked))
		for i, ci := range picked {
			out[i] = candidates[ci]
		}
		ts.cfg.shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out[:min(limit, len(out))]
	}
	// Fisher–Yates, stopped after the places that are kept: the first k
	// places hold a uniformly random k-subset in random order. A PCG seeded
	// once per call draws faster than the global source.
	var rng rand.PCG
	rng.Seed(rand.Uint64(), rand.Uint64())
	n := len(picked)
	for i := range min(limit, n-1) {
		// Lemire's multiply-shift: bias below n/2^32, none that matters here.
		j := i + int((rng.Uint64()>>32)*uint64(n-i)>>32)
		picked[i], picked[j] = picked[j], picked[i]
	}
	out := make([]string, min(limit, n))
	for i := range out {
		out[i] = candidates[picked[i]]
	}
	return out
}

// Due reports whether target should get a request for key now: it has
// never been given one, or the next-due time set by SetNextDue has come.
func (q *Queue[T]) Due(target, key string) bool {
	return q.targets.due.due(target, key, q.targets.now())
}

// SetNextDue records when target is next due for key, typically now plus
// the interval the target asked for in its last reply. A zero time
// makes it due at once. Entries are dropped once they are past due, so the
// table holds only pairs that are waiting. at is compared as time.Time's
// After compares: a time taken from the clock (time.Now().Add(interval))
// keeps to the monotonic clock, so a step of the wall clock does not move
// it; a time without a monotonic reading (built or parsed) keeps to the
// wall clock.
func (q *Queue[T]) SetNextDue(target, key string, at time.Time) {
	ts := q.targets
	inst, now := ts.instant(at), ts.now()
	ts.due.set(target, key, at, inst, now)
	ts.shareDue(target, key, at, at.IsZero() || inst <= now)
}

// dueTable holds next-due instants (see targets.instant) per key and
// target: keyed by key first, so that a fan-out looks its key up once and
// then each candidate by name alone.
type dueTable struct {
	mu    sync.RWMutex
	m     map[string]map[string]int64 // key -> target -> next due
	n     int                         // entries
	sweep int64                       // next time to drop past-due entries
}

func (d *dueTable) due(target, key string, now int64) bool {
	d.mu.RLock()
	at, ok := d.m[key][target]
	d.mu.RUnlock()
	return !ok || at <= now
}

func (d *dueTable) set(target, key string, at time.Time, inst, now int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	waiting := d.m[key]
	if at.IsZero() || inst <= now {
		if _, ok := waiting[target]; ok {
			delete(waiting, target)
			d.n--
			if len(waiting) == 0 {
				delete(d.m, key)
			}
		}
	} else {
		if waiting == nil {
			waiting = make(map[string]int64)
			d.m[key] = waiting
		}
		if _, ok := waiting[target]; !ok {
			d.n++
		}
		waiting[target] = inst
	}
	if now >= d.sweep && d.n > 1024 {
		for k, waiting := range d.m {
			for t, v := range waiting {
				if v <= now {
					delete(waiting, t)
					d.n--
				}
			}
			if len(waiting) == 0 {
				delete(d.m, k)
			}
		}
		d.sweep = now + int64(time.Minute)
	}
}

func (d *dueTable) String() string { return fmt.Sprintf("dueTable(%d)", d.n) }
