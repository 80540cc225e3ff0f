package queue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The claim gate and the concurrency limit: what a worker passes before
// it claims a job, so that a worker held back holds no job.
//
// A worker takes a seat (one of the limit's) before it claims, and keeps
// it from job to job while the limit allows: a worker gives its seat up
// only when the limit falls below the seats taken, or when it exits. So
// the limit costs a worker a lock only when it is lowered or when the
// worker has no seat, and nothing at all while the limit is the pool's
// maximum and there is no gate: the worker's one check is gate.on.

// Gate backoff: after a claim gate's error a worker waits from
// gateBackoffBase, doubling with each error in a row up to gateBackoffMax,
// with jitter, before it calls the gate again.
const (
	gateBackoffBase = 50 * time.Millisecond
	gateBackoffMax  = 5 * time.Second
)

// gateState is the queue's concurrency limit and claim gate.
type gateState struct {
	fn func(context.Context) error // WithClaimGate; nil for none
	// on is set while workers must pass enterGate before claiming: a
	// gate is set, or the limit is below the pool's maximum. Read by
	// every worker before every claim; written under mu.
	on      atomic.Bool
	waiting atomic.Int64  // workers at the limit or in the gate (Stats.AtGate)
	errs    atomic.Uint64 // errors the gate returned (Counts.GateErrors)

	mu    sync.Mutex
	limit int           // SetConcurrency; the pool's maximum by default
	max   int           // the pool's maximum (WithWorkers)
	held  int           // seats taken by workers
	wake  chan struct{} // closed when a seat frees or the limit rises
}

// seat is one worker's part in the gate. Only its worker reads or writes
// held, under gateState.mu.
type seat struct {
	held bool
	ctx  context.Context    // the gate's ctx: ends when the worker retires or the queue stops
	stop context.CancelFunc // ends ctx
}

func (g *gateState) init(fn func(context.Context) error, maxWorkers int) {
	g.fn = fn
	g.limit, g.max = maxWorkers, maxWorkers
	g.wake = make(chan struct{})
	g.on.Store(fn != nil)
}

// wakeLocked wakes the workers waiting for a seat; g.mu is held.
func (g *gateState) wakeLocked() {
	close(g.wake)
	g.wake = make(chan struct{})
}

// SetConcurrency sets how many jobs this queue's workers run at once, from
// 0 to the pool's maximum (WithWorkers' max, the default limit). Workers
// beyond the limit wait before they claim a job, holding none; 0 pauses
// claiming without stopping the queue (Enqueue continues, and jobs already
// running finish). Lowering the limit interrupts no running job: the
// workers above it wait once their job ends. Raising it lets waiting
// workers claim at once, and the autoscaler adds no worker above
// max(limit, base): a worker beyond the limit would only wait. Stats
// reports the limit as Concurrency and the waiting workers as AtGate.
//
// The limit is this process's (on a durable store shared by several
// processes, each has its own) and is not kept across restarts. A store
// that claims ahead (pgstore's outcome write claims the worker's next
// job in the same transaction) may hold one job per worker so claimed
// while the worker waits, until a worker takes it; its lease is renewed
// like a running job's. Stop and
// Shutdown lift it, so that the drain runs on the whole pool. It may be
// called before Start and at any time after; it is safe for concurrent
// use. A value out of range returns an error wrapping
// ErrInvalidConcurrency and changes nothing.
func (q *Queue[T]) SetConcurrency(n int) error {
	g := &q.gate
	if n < 0 || n > g.max {
		return fmt.Errorf("%w: %d is outside 0..%d (0 pauses claiming; %d is WithWorkers' max)", ErrInvalidConcurrency, n, g.max, g.max)
	}
	g.mu.Lock()
	prev := g.limit
	g.limit = n
	g.on.Store(g.fn != nil || n < g.max)
	if n > prev {
		g.wakeLocked()
	}
	g.mu.Unlock()
	if n != prev {
		q.log.Info("concurrency limit set", "limit", n, "was", prev)
	}
	return nil
}

// concurrency returns the limit.
func (g *gateState) concurrency() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit
}

// lifted reports whether Stop or Shutdown has begun: the limit, the gate
// and the admin API's pause no longer hold workers back.
func (q *Queue[T]) lifted() bool {
	select {
	case <-q.stopping:
		return true
	default:
		return false
	}
}

// enterGate takes a seat under the limit and passes the gate; false when
// the worker's ctx ends first (retired, or Shutdown).
func (q *Queue[T]) enterGate(w *worker[T]) bool {
	for {
		if !q.takeSeat(w) {
			return false
		}
		if q.gate.fn != nil && !q.passGate(w) {
			return false
		}
		// The limit may have fallen while the worker was in the gate:
		// keep the seat only if it is still within it.
		if q.keepSeat(w) {
			return true
		}
	}
}

// takeSeat waits for a seat under the limit; false when the worker's ctx
// ends first. A worker that has one keeps it while the seats taken are
// within the limit. No seat is taken while the limit is the pool's
// maximum, or once the stop has begun.
func (q *Queue[T]) takeSeat(w *worker[T]) bool {
	g := &q.gate
	g.mu.Lock()
	for {
		if q.lifted() || (!w.seat.held && g.limit >= g.max) {
			g.mu.Unlock()
			return true
		}
		if w.seat.held {
			if g.held <= g.limit {
				g.mu.Unlock()
				return true
			}
			q.leaveSeatLocked(w)
		}
		if g.held < g.limit {
			g.held++
			w.seat.held = true
			g.mu.Unlock()
			return true
		}
		wake := g.wake
		g.mu.Unlock()
		g.waiting.Add(1)
		select {
		case <-wake:
		case <-q.stopping:
		case <-w.ctx.Done():
		}
		g.waiting.Add(-1)
		if w.ctx.Err() != nil {
			return false
		}
		g.mu.Lock()
	}
}

// keepSeat reports whether the worker's seat is still within the limit,
// giving it up if not.
func (q *Queue[T]) keepSeat(w *worker[T]) bool {
	g := &q.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	if !w.seat.held || g.held <= g.limit || q.lifted() {
		return true
	}
	q.leaveSeatLocked(w)
	return false
}

// mayRun reports whether w may run the job it claimed: the limit may
// have fallen while it waited in Claim for a job. It takes a seat if it
// has none and one is free.
func (q *Queue[T]) mayRun(w *worker[T]) bool {
	g := &q.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case q.lifted() || (!w.seat.held && g.limit >= g.max):
		return true
	case w.seat.held && g.held <= g.limit:
		return true
	case !w.seat.held && g.held < g.limit:
		g.held++
		w.seat.held = true
		return true
	}
	q.leaveSeatLocked(w)
	return false
}

// leaveSeatLocked gives up w's seat, if it has one; g.mu is held.
func (q *Queue[T]) leaveSeatLocked(w *worker[T]) {
	g := &q.gate
	if !w.seat.held {
		return
	}
	w.seat.held = false
	g.held--
	if g.held < g.limit {
		g.wakeLocked()
	}
}

// leaveSeat gives up w's seat as it exits.
func (q *Queue[T]) leaveSeat(w *worker[T]) {
	if w.seat.stop != nil {
		w.seat.stop()
	}
	g := &q.gate
	g.mu.Lock()
	q.leaveSeatLocked(w)
	g.mu.Unlock()
}

// passGate calls the claim gate until it lets the worker through; false
// when the worker's ctx ends first. Once the stop has begun the worker
// passes without calling it: the gate's ctx ends then, and an error it
// returns for that lets the worker through.
func (q *Queue[T]) passGate(w *worker[T]) bool {
	g := &q.gate
	for errs := 0; ; {
		if q.lifted() {
			return true
		}
		g.waiting.Add(1)
		err := g.fn(w.seat.ctx)
		g.waiting.Add(-1)
		switch {
		case w.ctx.Err() != nil:
			return false
		case err == nil || q.lifted():
			return true
		}
		errs++
		g.errs.Add(1)
		q.log.Warn("claim gate failed", "err", err, "failures", errs)
		g.waiting.Add(1)
		ok := q.sleep(w.seat.ctx, gateBackoff(errs))
		g.waiting.Add(-1)
		if !ok && w.ctx.Err() != nil {
			return false
		}
	}
}

// gateBackoff is the wait after the n-th gate error in a row (n >= 1):
// gateBackoffBase doubled n-1 times, at most gateBackoffMax, less up to a
// half of jitter.
func gateBackoff(n int) time.Duration {
	d := gateBackoffBase
	for i := 1; i < n && d < gateBackoffMax; i++ {
		d *= 2
	}
	d = min(d, gateBackoffMax)
	return d/2 + rand.N(d/2+1)
}

// liftGate ends the gate's ctx of every worker, as the stop begins;
// Queue.mu is held.
func (q *Queue[T]) liftGateLocked() {
	for _, w := range q.pool.all() {
		if w.seat.stop != nil {
			w.seat.stop()
		}
	}
}
