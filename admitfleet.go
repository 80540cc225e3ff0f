package queue

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/queuekit/queue/storekit"
)

// One admission bucket for a fleet. On a store that implements Admitter,
// the bucket lives in the store (a GCRA done atomically there, by the
// store's clock) and every process of the queue draws on it. Admit does
// not ask the store on every call: a process takes a lease of k tokens
// (fleetLeaseSize: a twentieth of the burst, 1..50) and spends them
// locally, and takes the next lease when it has spent the last token.
// Hence:
//
//   - Over-admission. Tokens leave the store's bucket when leased, so over
//     any window the fleet admits at most what the one bucket grants plus
//     the tokens already held in leases when the window opens: at most
//     processes × k more than a single bucket would.
//   - Staleness. A leased token is spent at most fleetLeaseTTL (1 s) after
//     the store granted it; one unspent by then is dropped (admission errs
//     toward refusing).
//   - Round trips. One per k admissions while the bucket is engaged; none
//     while the queue's fill is below the threshold. When the store says
//     the bucket is empty, the process refuses without asking again until
//     k tokens could have been refilled (or the wait the store gave, if
//     longer).
//   - Blocking. An engaged Admit with no token left waits for the lease it
//     asked for: one store round trip, at most fleetTakeWait (1 s).
//   - Outage. While the store does not answer, each process falls back to
//     its own token bucket (rate.Limiter, as on the in-memory store) and
//     asks the store again after fleetRetry (1 s).

const (
	fleetLeaseTTL = time.Second
	fleetTakeWait = time.Second
	fleetRetry    = time.Second
)

// joinFleet gives the queue its store's fleet state, if the store keeps
// any: the live-process count (FleetSizer) for ScaleByDepth, and the
// shared admission bucket (Admitter) unless admission is off.
func (q *Queue[T]) joinFleet() {
	q.fleet, _ = q.store.(storekit.FleetSizer)
	if ad, ok := q.store.(storekit.Admitter); ok && q.admit.limiter != nil {
		q.admit.fleet = newFleetBucket(ad, q.cfg.admission, q.clock, q.log)
	}
}

// fleetLeaseSize is k, the tokens one lease takes from a bucket of burst.
func fleetLeaseSize(burst int) int { return min(max(burst/20, 1), 50) }

// fleetBucket is this process's side of a store's shared bucket. Its
// fields are guarded by mu; it is only locked while the bucket is engaged.
type fleetBucket struct {
	store  storekit.Admitter
	perSec float64
	burst  int
	k      int
	clock  Clock
	log    *slog.Logger
	local  *rate.Limiter // while the store does not answer

	mu         sync.Mutex
	tokens     int           // leased and not yet spent
	expires    time.Time     // the lease's tokens are dropped then
	emptyUntil time.Time     // the store said the bucket is empty until then
	failedAt   time.Time     // the store's last failure; the local limiter decides until fleetRetry after
	taking     chan struct{} // closed when the lease in flight is back; nil when none is
}

func newFleetBucket(st storekit.Admitter, cfg admissionConfig, clk Clock, log *slog.Logger) *fleetBucket {
	if clk == nil {
		clk = systemClock{}
	}
	return &fleetBucket{store: st, perSec: cfg.perSec, burst: cfg.burst, k: fleetLeaseSize(cfg.burst),
		clock: clk, log: log, local: rate.NewLimiter(rate.Limit(cfg.perSec), cfg.burst)}
}

// allow spends a token of the fleet's bucket, taking a lease from the
// store when this process has none.
func (f *fleetBucket) allow() bool {
	now := f.clock.Now()
	f.mu.Lock()
	for waited := false; ; waited = true {
		if f.tokens > 0 && now.Before(f.expires) {
			f.tokens--
			f.mu.Unlock()
			return true
		}
		switch {
		case !f.failedAt.IsZero() && now.Before(f.failedAt.Add(fleetRetry)):
			ok := f.local.AllowN(now, 1)
			f.mu.Unlock()
			return ok
		case now.Before(f.emptyUntil) || waited:
			f.mu.Unlock()
			return false
		}
		ch := f.takeLocked()
		f.mu.Unlock()
		t := f.clock.NewTimer(fleetTakeWait)
		select {
		case <-ch:
		case <-t.C():
		}
		t.Stop()
		now = f.clock.Now()
		f.mu.Lock()
	}
}

// takeLocked asks the store for a lease unless one is on its way, and
// returns the channel closed when it is back. f.mu is held.
func (f *fleetBucket) takeLocked() <-chan struct{} {
	if f.taking == nil {
		f.taking = make(chan struct{})
		go f.take(f.taking)
	}
	return f.taking
}

func (f *fleetBucket) take(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), fleetTakeWait)
	got, wait, err := f.store.TakeTokens(ctx, f.perSec, f.burst, f.k)
	cancel()
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	defer close(done)
	f.taking = nil
	switch {
	case err != nil:
		if f.failedAt.IsZero() || !now.Before(f.failedAt.Add(fleetRetry)) {
			f.log.Warn("queue: the store's admission bucket did not answer; admitting by this process's own bucket", "err", err)
		}
		f.failedAt = now
	case got > 0:
		f.failedAt = time.Time{}
		if !now.Before(f.expires) {
			f.tokens = 0
		}
		f.tokens += got
		f.expires = now.Add(fleetLeaseTTL)
	default:
		f.failedAt = time.Time{}
		refill := time.Duration(float64(f.k) / f.perSec * float64(time.Second))
		f.emptyUntil = now.Add(max(wait, min(refill, fleetLeaseTTL)))
	}
}
