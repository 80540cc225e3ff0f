package main

import (
	"context"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// The forwarding budget: forwards get only the CPU the announces leave.
//
// A forward over HTTP to a tracker that closes every connection costs the
// forwarder a dial and the Transport's goroutines: two to three answered
// announces' worth of CPU. Workers that forward as fast as the queue feeds
// them take that CPU from the announces, whose latency is what clients
// see. The budget watches the Go scheduler's latency — how long runnable
// goroutines, the connections' among them, wait for a CPU — and meters the
// forwards that may start in each window (budgetWindow): the limit is
// halved after a window whose 99th percentile was above the budget's
// latency and in which a client's announce or scrape was answered (with
// none, a forward takes CPU from no one: a forwarder draining its queue
// after the load has gone is judged by its own forwards' wake-ups, and
// closed on itself), never below budgetFloor, and raised after
// budgetRaiseAfter windows in a row that were not and in which a forward
// waited: by one while the scheduler was busy within the last
// budgetCalmAfter windows (under load, where each forward more is felt),
// doubled once it has been quiet for longer (the load has gone, and a
// backlog drained a few forwards at a time costs each of them two to three
// times the CPU: wake-ups and idle threads with nothing to share them).
// The floor keeps forwards moving on a process that stays busy for reasons
// of its own (a long GC, a neighbour): a shed forward waits for the peer's
// next announce, but one already queued would otherwise wait for as long
// as the load lasts. Each window's forwards are let through evenly over
// it, not in a burst. The budget is the queue's claim gate
// (queue.WithClaimGate): a worker waits for it before it claims a forward,
// so a worker that waits holds no job. The forwards stay queued, where a
// peer's next announce finds its forward pending (and adds none), and
// where their depth feeds admission: one the queue cannot take while the
// workers wait is shed at admission and sent at the peer's next announce,
// as any shed forward is.
//
// An idle forwarder does not pay for the budget: at the end of a window
// in which no forward waited or started and no client request was
// answered, the budget parks — no ticks, no reads of the scheduler's
// latency — until a forward waits for it or a client request is
// answered, and then starts a window at once. The parked time counts as
// that many quiet windows toward the calm (a forwarder idle since its
// last load doubles at the first raise of its next backlog, as it would
// had it ticked through) and is not judged: the wake-ups recorded while
// parked are dropped, not taken as the first window's. The limit is kept.

// budgetWindow is how often the budget reads the scheduler's latency and
// moves its limit: short enough to close within a few milliseconds of a
// burst, long enough to hold a few hundred wake-ups at the loads that
// matter.
const budgetWindow = 10 * time.Millisecond

// budgetTicks is how many times a window the budget lets forwards
// through: the window's allowance is spread over them, so that forwards
// start evenly rather than in a burst at each window's start.
const budgetTicks = 10

// budgetMinSamples is the fewest goroutine wake-ups the budget judges a
// p99 from (a quantile of a handful of samples says nothing): a window
// with fewer is judged together with the next ones, up to
// budgetMaxSpan windows, and one with none is idle. An announce served
// outside net/http (httpserve.go) is one wake-up, not four: at a few
// thousand announces a second a window holds only dozens, and taking
// each such window as idle would open the budget under load.
const budgetMinSamples = 100

// budgetMaxSpan is how many windows the budget judges together, at most,
// while they hold fewer than budgetMinSamples wake-ups: past it, the
// span is taken as idle.
const budgetMaxSpan = 10

// budgetFloor is the fewest forwards a window lets start, however busy
// the scheduler: 100 a second, a few percent of one CPU at the cost of a
// forward over HTTP.
const budgetFloor = 1

// budgetRaiseAfter is how many quiet windows in a row raise the limit:
// by one (100 forwards a second) within budgetCalmAfter windows of a busy
// one, where one busy window halves it.
const budgetRaiseAfter = 10

// budgetCeiling bounds the limit: far above what any worker pool starts
// in a window, so it never meters a forward, and it keeps doubling from
// overflowing should forwards wait at every raise for a long time.
const budgetCeiling = 1 << 20

// budgetCalmAfter is how many windows in a row without a busy one double
// the limit at each raise instead of adding one: under load the
// scheduler is busy every few windows, and the budget stays near its
// floor as with additive raises alone; once the load has gone for this
// long (0.3 s), a backlog of forwards opens it from 1 to 64 a window in
// 0.6 s, not 6 s. A busy window still halves it, and returns it to
// raising by one.
const budgetCalmAfter = 30

// schedSample reads the scheduler latencies recorded since the last call:
// how many goroutine wake-ups, and how many of them waited at least d.
type schedSample func(d time.Duration) (total, over uint64)

// forwardBudget gates the queue's claims. Its methods are safe for
// concurrent use.
type forwardBudget struct {
	latency time.Duration // the scheduler p99 above which forwarding narrows
	sample  schedSample
	// requests counts the client requests answered (served): a span
	// with none is never busy.
	requests atomic.Uint64
	// parked is set while run waits on wake instead of ticking (written
	// with mu held): served and acquire then kick wake, which holds one
	// kick at most.
	parked atomic.Bool
	wake   chan struct{}

	mu      sync.Mutex
	limit   int             // forwards allowed to start per window
	started int             // forwards started in this window
	allowed int             // forwards allowed to start so far in this window
	waiters []chan struct{} // forwards waiting, FIFO; closed when let through
	narrows uint64          // windows that lowered limit
	quiet   int             // quiet windows in a row since the limit last moved
	calm    int             // windows in a row since the last busy one
	raise   int             // budgetRaiseAfter (tests may change it)
	calmFor int             // budgetCalmAfter (tests may change it)
	// The wake-ups of the windows not judged yet (fewer than
	// budgetMinSamples), how many windows they span, and requests'
	// count when the span began.
	spanTotal, spanOver uint64
	span                int
	spanFrom            uint64
	winFrom             uint64 // requests' count when the window began
}

// newForwardBudget returns a budget that keeps the scheduler's p99 latency
// below latency, reading it with sample (nil: the Go runtime's). It starts
// at its floor, budgetFloor forwards per window.
func newForwardBudget(latency time.Duration, sample schedSample) *forwardBudget {
	if sample == nil {
		sample = newRuntimeSchedSample()
	}
	return &forwardBudget{latency: latency, sample: sample, limit: budgetFloor,
		raise: budgetRaiseAfter, calmFor: budgetCalmAfter, wake: make(chan struct{}, 1)}
}

// served records a client request (an announce or a scrape) answered:
// the latency the budget protects, and wakes a parked budget. Safe on a
// nil budget (none). On the announce path: an atomic add and load, and a
// send only while parked.
func (b *forwardBudget) served() {
	if b != nil {
		b.requests.Add(1)
		if b.parked.Load() {
			b.kick()
		}
	}
}

// kick wakes a parked run; a kick already pending is enough.
func (b *forwardBudget) kick() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// gate is the queue's claim gate: it returns nil once the budget lets a
// forward start, and ctx's error if ctx ends first (the worker retires,
// or the queue stops, which then claims without the gate to drain).
func (b *forwardBudget) gate(ctx context.Context) error {
	if b.acquire(ctx) {
		return nil
	}
	return ctx.Err()
}

// acquire waits until a forward may run; false if ctx ended first.
func (b *forwardBudget) acquire(ctx context.Context) bool {
	b.mu.Lock()
	if b.started < b.allowed && len(b.waiters) == 0 {
		b.started++
		b.mu.Unlock()
		return true
	}
	// While parked, allowed is 0 (the window that parked reset it), so
	// no forward got past the check above: it waits for the window the
	// kick starts.
	ch := make(chan struct{})
	b.waiters = append(b.waiters, ch)
	if b.parked.Load() {
		b.kick()
	}
	b.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, w := range b.waiters {
		if w == ch {
			b.waiters = append(b.waiters[:i], b.waiters[i+1:]...)
			return false
		}
	}
	// Let through as ctx ended: hand the place on (unless a new window
	// has begun since).
	if b.started > 0 {
		b.started--
	}
	b.grantLocked()
	return false
}

// grantLocked lets waiting forwards through up to the window's allowance
// so far; b.mu is held.
func (b *forwardBudget) grantLocked() {
	for b.started < b.allowed && len(b.waiters) > 0 {
		close(b.waiters[0])
		b.waiters = b.waiters[1:]
		b.started++
	}
}

// adjust ends one window and moves the limit for the next: halved (not
// below budgetFloor) when the window's p99 was above the latency and a
// client request was served in it, raised after budgetRaiseAfter windows
// in a row that were not and in which a forward waited: by one, or
// doubled once budgetCalmAfter windows have passed without a busy one. A
// window of too few wake-ups to judge leaves the limit as it is, and is
// judged with the next (budgetMaxSpan). It reports whether the window was
// idle: no forward waits, none started in it, and no client request was
// served since it began.
func (b *forwardBudget) adjust() (idle bool) {
	total, over := b.sample(b.latency)
	requests := b.requests.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	idle = b.started == 0 && len(b.waiters) == 0 && requests == b.winFrom
	b.winFrom = requests
	b.started, b.allowed = 0, 0
	b.spanTotal, b.spanOver, b.span = b.spanTotal+total, b.spanOver+over, b.span+1
	if b.spanTotal > 0 && b.spanTotal < budgetMinSamples && b.span < budgetMaxSpan {
		return idle
	}
	total, over, span := b.spanTotal, b.spanOver, b.span
	clients := requests != b.spanFrom
	b.spanTotal, b.spanOver, b.span, b.spanFrom = 0, 0, 0, requests
	if clients && total >= budgetMinSamples && over*100 > total { // busy
		if b.limit > budgetFloor {
			b.narrows++
		}
		b.limit = max(b.limit/2, budgetFloor)
		b.quiet, b.calm = 0, 0
		return idle
	}
	// Quiet windows, not spans: a span of few wake-ups (an idle forwarder
	// draining its queue) raises as fast as before.
	b.calm = min(b.calm+span, b.calmFor)
	if len(b.waiters) == 0 {
		// The allowance was not all used: a higher limit would let
		// nothing more through.
		return idle
	}
	if b.quiet += span; b.quiet >= b.raise {
		b.quiet = 0
		if b.calm >= b.calmFor {
			b.limit = min(b.limit*2, budgetCeiling)
		} else {
			b.limit++
		}
	}
	return idle
}

// tick lets the i-th tenth (0..budgetTicks-1) of the window's limit
// through.
func (b *forwardBudget) tick(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.allowed = b.limit * (i + 1) / budgetTicks
	b.grantLocked()
}

// run lets forwards through budgetTicks times a window and adjusts the
// limit at each window's end, until ctx ends or done closes. After an
// idle window it parks, and starts the next window when woken.
func (b *forwardBudget) run(ctx context.Context, done <-chan struct{}) {
	const period = budgetWindow / budgetTicks
	t := time.NewTicker(period)
	defer t.Stop()
	for i := 0; ; i = (i + 1) % budgetTicks {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
		}
		if i == 0 && b.adjust() && b.park() {
			t.Stop()
			from := time.Now()
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-b.wake:
			}
			b.resume(time.Since(from))
			t.Reset(period) // the window starts now
		}
		b.tick(i)
	}
}

// park marks the budget parked after an idle window, unless a forward or
// a client request has come since adjust: false then, and the budget
// ticks on.
func (b *forwardBudget) park() bool {
	select {
	case <-b.wake: // a late kick from the last park
	default:
	}
	b.mu.Lock()
	if len(b.waiters) > 0 {
		b.mu.Unlock()
		return false
	}
	b.parked.Store(true)
	from := b.winFrom
	b.mu.Unlock()
	// A request served before parked was set did not kick: count it
	// here. One served after it did, or will.
	if b.requests.Load() != from {
		b.mu.Lock()
		b.parked.Store(false)
		b.mu.Unlock()
		return false
	}
	return true
}

// resume ends a park of d: the wake-ups recorded meanwhile are dropped,
// and its whole windows are idle ones, none recorded and no forward
// waiting. An open span of few wake-ups goes on through them, up to
// budgetMaxSpan windows, and counts toward the calm once closed, as
// every other parked window does. The limit stays as it is; the request
// that woke the budget, if one did, counts in the window starting now.
func (b *forwardBudget) resume(d time.Duration) {
	b.sample(b.latency)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.parked.Store(false)
	// More windows than fill the span and the calm change nothing.
	n := int(min(d/budgetWindow, time.Duration(b.calmFor+budgetMaxSpan)))
	if b.span > 0 {
		k := min(n, budgetMaxSpan-b.span)
		b.span += k
		if b.span < budgetMaxSpan {
			return
		}
		n += b.span - k // closed as idle: all its windows are calm ones
		b.spanTotal, b.spanOver, b.span, b.spanFrom = 0, 0, 0, b.winFrom
	}
	b.calm = min(b.calm+n, b.calmFor)
}

// budgetState is what the budget's metrics read.
type budgetState struct {
	limit, started, waiting int
	narrows                 uint64
}

func (b *forwardBudget) state() budgetState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return budgetState{b.limit, b.started, len(b.waiters), b.narrows}
}

// schedLatencies is the runtime metric the budget reads.
const schedLatencies = "/sched/latencies:seconds"

// newRuntimeSchedSample returns a schedSample reading the Go runtime's
// scheduler latencies (runtime/metrics), one window at a time. Not safe
// for concurrent use: the budget's loop is its one caller.
func newRuntimeSchedSample() schedSample {
	s := []metrics.Sample{{Name: schedLatencies}}
	var prev []uint64
	return func(d time.Duration) (total, over uint64) {
		metrics.Read(s) // reuses the histogram's slices after the first read
		if s[0].Value.Kind() != metrics.KindFloat64Histogram {
			return 0, 0 // not on this runtime: every window is idle, and the limit rises
		}
		h := s[0].Value.Float64Histogram()
		if len(prev) != len(h.Counts) {
			prev = make([]uint64, len(h.Counts))
		}
		limit := d.Seconds()
		for i, c := range h.Counts {
			n := c - prev[i]
			prev[i] = c
			total += n
			if h.Buckets[i] >= limit {
				over += n
			}
		}
		return total, over
	}
}
