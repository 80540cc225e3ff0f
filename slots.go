package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Fleet concurrency slots. On a store that implements SlotStore, a fixed
// WithTargetConcurrency limit k holds across every process of the queue:
// a job runs only while its process holds one of its target's k slots,
// leased in the store. The process's own count (target.running, the
// parked FIFO and the hand-off in release) stays as it is; a slot of the
// store goes with each local one:
//
//   - A job admitted to a free local slot first acquires a slot in the
//     store (one round trip); admitJob answers slotJob, and reserves the
//     local slot meanwhile (target.acquiring).
//   - When its job ends, the local slot passes to the next parked job of
//     the target, with its store slot (no round trip); a slot with no job
//     to pass to is released in the store (one round trip) by one
//     goroutine, slotLoop, so that the worker does not wait for it. Until
//     slotLoop takes it, a job of the target admitted in this process
//     takes the slot over instead of acquiring one (no round trip).
//   - A job the store refuses is parked. One worker per target, the
//     waiter (target.full), then asks again when the store says a slot of
//     the target was released (WatchSlots: NOTIFY, pub/sub) and every
//     slotRetry in any case; a slot it gets goes to the first parked job,
//     as a slot freed in process does.
//   - Held slots are renewed every third of their TTL (slotTTL) from one
//     goroutine; a process that dies loses them when they expire.

const (
	// slotRetry is how often the waiter asks for a slot when no release
	// was announced.
	slotRetry = 500 * time.Millisecond
	// slotCallTimeout bounds one call to the SlotStore.
	slotCallTimeout = 5 * time.Second
	// slotTTLDefault is a slot's lease on a store that does not lease
	// jobs; on one that does, it is the job lease (3 × HeartbeatInterval).
	slotTTLDefault = 30 * time.Second
)

// fleetSlots is a queue's side of its SlotStore.
type fleetSlots struct {
	store  SlotStore
	ttl    time.Duration
	prefix string // this process's holder prefix
	seq    atomic.Uint64

	mu   sync.Mutex
	held map[string]string        // holder -> target, for the renewals
	idle map[string][]string      // target -> holders whose jobs ended, not yet released
	wake map[string]chan struct{} // target -> its waiter's wake-up
	warn time.Time                // when a failure was last logged

	started atomic.Bool   // slotLoop runs (set by Start)
	kick    chan struct{} // idle holders to release
	done    chan struct{} // closed when slotLoop has released the last ones
}

// bindSlots gives ts the store's slots, when the store has them and a
// fixed limit applies; the in-memory store the queue drives directly
// (mem) needs none: its process is the fleet.
func (ts *targets[T]) bindSlots(store any, mem bool, leaser Leaser) {
	s, ok := store.(SlotStore)
	if !ok || mem || ts.cfg.concurrency <= 0 || ts.cfg.concurrency == math.MaxInt {
		return
	}
	ttl := slotTTLDefault
	if leaser != nil && leaser.HeartbeatInterval() > 0 {
		ttl = 3 * leaser.HeartbeatInterval()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	fs := &fleetSlots{store: s, ttl: ttl, prefix: hex.EncodeToString(b[:]) + ":",
		held: map[string]string{}, idle: map[string][]string{}, wake: map[string]chan struct{}{},
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.WatchSlots(fs.released)
	ts.slots = fs
}

// released wakes the target's waiter, if this process has one.
func (fs *fleetSlots) released(target string) {
	fs.mu.Lock()
	ch := fs.wake[target]
	fs.mu.Unlock()
	if ch != nil {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// acquireSlot takes over a slot of target whose job ended and whose
// release was not sent yet, or else asks the store for one; a failure
// counts as a refusal (the job waits: it never runs without a slot).
func (q *Queue[T]) acquireSlot(target string) (holder string, ok bool) {
	fs := q.targets.slots
	fs.mu.Lock()
	if idle := fs.idle[target]; len(idle) > 0 {
		holder = idle[len(idle)-1]
		if len(idle) == 1 {
			delete(fs.idle, target)
		} else {
			fs.idle[target] = idle[:len(idle)-1]
		}
		fs.mu.Unlock()
		return holder, true // still leased: its release was not sent
	}
	fs.mu.Unlock()
	holder = fs.prefix + strconv.FormatUint(fs.seq.Add(1), 36)
	ctx, cancel := context.WithTimeout(q.bgCtx, slotCallTimeout)
	ok, err := fs.store.AcquireSlot(ctx, target, holder, q.targets.cfg.concurrency, fs.ttl)
	cancel()
	if err != nil {
		q.slotWarn("queue: acquiring a concurrency slot failed; the job waits", "target", target, "err", err)
		return "", false
	}
	if ok {
		fs.mu.Lock()
		fs.held[holder] = target
		fs.mu.Unlock()
	}
	return holder, ok
}

// releaseSlot hands the store slot w holds, if any, to slotLoop to be
// released.
func (q *Queue[T]) releaseSlot(w *worker[T], target string) {
	if w.slot == "" {
		return
	}
	fs := q.targets.slots
	fs.mu.Lock()
	fs.idle[target] = append(fs.idle[target], w.slot)
	fs.mu.Unlock()
	w.slot = ""
	select {
	case fs.kick <- struct{}{}:
	default:
	}
}

// sendReleases releases the idle holders in the store, and wakes this
// process's waiters of their targets.
func (q *Queue[T]) sendReleases(ctx context.Context) {
	fs := q.targets.slots
	fs.mu.Lock()
	idle := fs.idle
	fs.idle = map[string][]string{}
	fs.mu.Unlock()
	for target, holders := range idle {
		for _, holder := range holders {
			rctx, cancel := context.WithTimeout(ctx, slotCallTimeout)
			err := fs.store.ReleaseSlot(rctx, target, holder)
			cancel()
			if err != nil {
				q.slotWarn("queue: releasing a concurrency slot failed; it is free when its lease expires", "target", target, "err", err, "lease", fs.ttl)
			}
			fs.mu.Lock()
			delete(fs.held, holder)
			fs.mu.Unlock()
		}
		fs.released(target) // this process's waiter need not wait for the announcement
	}
}

// slotWarn logs a store failure, at most once a second.
func (q *Queue[T]) slotWarn(msg string, args ...any) {
	fs := q.targets.slots
	now := q.clock.Now()
	fs.mu.Lock()
	quiet := now.Sub(fs.warn) < time.Second
	if !quiet {
		fs.warn = now
	}
	fs.mu.Unlock()
	if !quiet {
		q.log.Warn(msg, args...)
	}
}

// takeSlot gets a store slot for job, which admitJob answered slotJob,
// and reports whether *job then holds it, to be run next (with held set,
// as a handed-off job is). Otherwise job was parked, cancelled or put
// back, and w may have waited for a slot, as the target's waiter, and
// given it to a parked job: that job is in *job then, and takeSlot
// reports true.
func (q *Queue[T]) takeSlot(w *worker[T], job *Job[T]) bool {
	ts := q.targets
	name := job.Target
	holder, ok := q.acquireSlot(name)
	if !ok {
		if !ts.refused(name, job) {
			return false // parked behind the target's waiter
		}
		return q.awaitSlot(w, name, job)
	}
	d, at, probe := ts.admitJob(name, q.clock.Now(), job, true)
	w.slot = holder
	switch d {
	case runJob:
		w.probe = probe
		return true
	case cancelJob:
		q.releaseSlot(w, name)
		q.cancelJob(w, job)
	case waitJob:
		q.releaseSlot(w, name)
		if !at.IsZero() {
			q.deferJob(w, job, at)
		}
	}
	return false
}

// refused parks job, which the store gave no slot, first in its target's
// FIFO, and reports whether the caller is to be the target's waiter.
func (ts *targets[T]) refused(name string, job *Job[T]) (waiter bool) {
	t := ts.get(name)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.acquiring--
	t.waiting.pushFront(job)
	ts.parked.Add(1)
	if t.full {
		return false
	}
	t.full = true
	return true
}

// awaitSlot is the target's waiter: it asks the store for a slot when one
// is released and every slotRetry, until it gets one, which goes to the
// first parked job (stored in *job; awaitSlot reports true), or until no
// job is parked, or until w retires or the queue shuts down. A waiter that
// leaves with parked jobs and none of the target's running puts them
// back in the store, where any process may claim them.
func (q *Queue[T]) awaitSlot(w *worker[T], name string, job *Job[T]) bool {
	ts, fs := q.targets, q.targets.slots
	wake := make(chan struct{}, 1)
	fs.mu.Lock()
	fs.wake[name] = wake
	fs.mu.Unlock()
	defer func() {
		fs.mu.Lock()
		delete(fs.wake, name)
		fs.mu.Unlock()
	}()
	t := ts.get(name)
	timer := q.clock.NewTimer(slotRetry)
	defer timer.Stop()
	// The first time, ask at once: a slot released between the refusal
	// and the wake-up's registration above was announced to no one.
	for first := true; ; first = false {
		if !first {
			select {
			case <-wake:
				timer.Stop()
			case <-timer.C():
			case <-w.ctx.Done():
				t.mu.Lock()
				t.full = false
				var back []Job[T]
				if t.running == 0 && t.acquiring == 0 {
					back = ts.unpark(t, t.waiting.len())
				}
				t.mu.Unlock()
				q.flushParked(w, back, waitJob, q.clock.Now())
				return false
			}
			timer.Reset(slotRetry)
		}
		t.mu.Lock()
		idle := t.waiting.len() == 0
		if idle {
			t.full = false
		}
		t.mu.Unlock()
		if idle {
			return false // the parked jobs were handed slots freed here, or cancelled
		}
		holder, ok := q.acquireSlot(name)
		if !ok {
			continue
		}
		w.slot = holder
		// The slot is a local one freed: release hands it to the first
		// parked job, as when a job of the target ends.
		t.mu.Lock()
		t.full = false
		t.running++
		t.mu.Unlock()
		h := ts.release(name, q.clock.Now(), false, job)
		q.flushParked(w, h.flush, h.d, h.at)
		if h.ok {
			w.probe = h.probe
			return true
		}
		q.releaseSlot(w, name)
		return false
	}
}

// slotLoop releases the slots whose jobs ended, and renews the store
// slots this process holds every third of their TTL, until ctx ends; it
// then releases the last ones.
func (q *Queue[T]) slotLoop(ctx context.Context) {
	fs := q.targets.slots
	defer close(fs.done)
	timer := q.clock.NewTimer(fs.ttl / 3)
	defer timer.Stop()
	for {
		select {
		case <-fs.kick:
			q.sendReleases(ctx)
			continue
		case <-ctx.Done():
			// The workers are gone: release what they left, within
			// slotCallTimeout in all.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), slotCallTimeout)
			q.sendReleases(fctx)
			cancel()
			return
		case <-timer.C():
			timer.Reset(fs.ttl / 3)
		}
		fs.mu.Lock()
		by := map[string][]string{}
		for holder, target := range fs.held {
			by[target] = append(by[target], holder)
		}
		fs.mu.Unlock()
		for target, holders := range by {
			rctx, cancel := context.WithTimeout(ctx, slotCallTimeout)
			lost, err := fs.store.RenewSlots(rctx, target, holders, fs.ttl)
			cancel()
			if err != nil {
				q.slotWarn("queue: renewing concurrency slots failed", "target", target, "slots", len(holders), "err", err)
				continue
			}
			if len(lost) > 0 {
				fs.mu.Lock()
				for _, h := range lost {
					delete(fs.held, h)
				}
				// An idle one lost is not to be taken over.
				fs.idle[target] = slices.DeleteFunc(fs.idle[target], func(h string) bool { return slices.Contains(lost, h) })
				if len(fs.idle[target]) == 0 {
					delete(fs.idle, target)
				}
				fs.mu.Unlock()
				// The job runs on: stopping it half-way would be worse
				// than a target over its limit for the rest of one run.
				q.log.Warn("queue: concurrency slot leases lost (expired and taken); their jobs run on",
					"target", target, "lost", len(lost), "lease", fs.ttl)
			}
		}
	}
}

// stopSlots waits for slotLoop, which the queue's background context
// ended, to release the last slots, before the store closes.
func (ts *targets[T]) stopSlots() {
	if fs := ts.slots; fs != nil && fs.started.Load() {
		<-fs.done
	}
}
