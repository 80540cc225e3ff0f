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

	"github.com/queuekit/queue/storekit"
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
//   - A job the store refuses is parked, and the process takes its place
//     in the target's line in the store (SlotRequest.Waited keeps it
//     there across asks). One worker per target, the waiter
//     (target.full), then asks again when the store says a slot of the
//     target was released (WatchSlots: NOTIFY, pub/sub) and every
//     slotRetry in any case; a slot it gets goes to the first parked job,
//     as a slot freed in process does. A waiter that leaves with no job
//     to give a slot to leaves the line.
//   - The store grants a freed slot to the first process of the line,
//     not to whoever asks first. A process that learns that another one
//     waits (the store announces each refusal to every process, and says
//     how many wait in its answers) yields (target.yield): a job that
//     ends gives its slot back to the store instead of to the next
//     parked job, no slot is taken over, and its own parked jobs queue
//     in the line behind the others. So, under contention, the slots go
//     round the waiting processes in the order they began to wait: one
//     in the line gets a slot once those ahead of it have (at most one
//     each per slot freed), instead of waiting for the holders'
//     backlogs. Without another process waiting, nothing changes: the
//     hand-off and the take-over cost no round trip.
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
	// slotLine is how long a process keeps its place in a target's line
	// without asking again (SlotRequest.Line); its waiter asks every
	// slotRetry, so only a dead or stuck process loses it.
	slotLine = 4 * slotRetry
)

// fleetSlots is a queue's side of its SlotStore.
type fleetSlots struct {
	store  storekit.SlotStore
	ttl    time.Duration
	proc   string // this process, in the store's lines
	prefix string // this process's holder prefix: proc + ":"
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
func (ts *targets[T]) bindSlots(store any, mem bool, leaser storekit.Leaser) {
	s, ok := store.(storekit.SlotStore)
	if !ok || mem || ts.cfg.concurrency <= 0 || ts.cfg.concurrency == math.MaxInt {
		return
	}
	ttl := slotTTLDefault
	if leaser != nil && leaser.HeartbeatInterval() > 0 {
		ttl = 3 * leaser.HeartbeatInterval()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	proc := hex.EncodeToString(b[:])
	fs := &fleetSlots{store: s, ttl: ttl, proc: proc, prefix: proc + ":",
		held: map[string]string{}, idle: map[string][]string{}, wake: map[string]chan struct{}{},
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	s.WatchSlots(func(target, waiter string) {
		switch waiter {
		case "":
			fs.released(target)
		case proc: // this process's own refusal
		default:
			ts.contend(target)
		}
	})
	ts.slots = fs
}

// contend notes that another process waits in name's line: this one
// yields its slots of the target as their jobs end.
func (ts *targets[T]) contend(name string) {
	if t, ok := ts.lookup(name); ok {
		t.mu.Lock()
		t.yield = true
		t.yieldGen++
		t.mu.Unlock()
	}
}

// noteLine records the store's answer that waiting other processes wait
// in t's line, to a call made when t.yieldGen was gen: none ends the
// yielding, unless another process's refusal was announced since the
// call began (the answer may then be stale); t.mu is held.
func (t *target[T]) noteLine(gen uint64, waiting int) {
	switch {
	case waiting > 0:
		t.yield = true
		t.yieldGen++
	case t.yieldGen == gen:
		t.yield = false
	}
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
// release was not sent yet, unless another process waits for one, or
// else asks the store for one; a refusal puts the process in the
// target's line, and a failure counts as a refusal (the job waits: it
// never runs without a slot).
func (q *Queue[T]) acquireSlot(target string) (holder string, ok bool) {
	fs := q.targets.slots
	t := q.targets.get(target)
	now := q.clock.Now()
	t.mu.Lock()
	yield, gen, since := t.yield, t.yieldGen, t.lineSince
	t.mu.Unlock()
	if !yield {
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
	}
	req := storekit.SlotRequest{Target: target, Holder: fs.prefix + strconv.FormatUint(fs.seq.Add(1), 36), Process: fs.proc,
		Limit: q.targets.cfg.concurrency, TTL: fs.ttl, Line: slotLine}
	if !since.IsZero() {
		req.Waited = max(now.Sub(since), 0)
	}
	ctx, cancel := context.WithTimeout(q.bgCtx, slotCallTimeout)
	ans, err := fs.store.AcquireSlot(ctx, req)
	cancel()
	if err != nil {
		q.slotWarn("queue: acquiring a concurrency slot failed; the job waits", "target", target, "err", err)
		return "", false
	}
	t.mu.Lock()
	t.noteLine(gen, ans.Waiting)
	switch {
	case ans.Granted:
		t.lineSince = time.Time{} // the store took the process out of the line
	case t.lineSince.IsZero():
		t.lineSince = now
	}
	t.mu.Unlock()
	if ans.Granted {
		fs.mu.Lock()
		fs.held[req.Holder] = target
		fs.mu.Unlock()
	}
	return req.Holder, ans.Granted
}

// leaveLine takes the process out of target's line, when it is in it:
// its waiter leaves with no job to give a slot to.
func (q *Queue[T]) leaveLine(t *target[T]) {
	fs := q.targets.slots
	t.mu.Lock()
	in := !t.lineSince.IsZero()
	t.lineSince = time.Time{}
	t.mu.Unlock()
	if !in {
		return
	}
	// The queue may be shutting down: the call is still made, within
	// slotCallTimeout, so that the line does not wait for its expiry.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(q.bgCtx), slotCallTimeout)
	err := fs.store.LeaveSlotLine(ctx, t.name, fs.proc)
	cancel()
	if err != nil {
		q.slotWarn("queue: leaving a concurrency slot's line failed; the place is given up when it expires",
			"target", t.name, "err", err, "after", slotLine)
	}
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
		t := q.targets.get(target)
		for _, holder := range holders {
			t.mu.Lock()
			gen := t.yieldGen
			t.mu.Unlock()
			rctx, cancel := context.WithTimeout(ctx, slotCallTimeout)
			waiting, err := fs.store.ReleaseSlot(rctx, target, holder, fs.proc)
			cancel()
			if err != nil {
				q.slotWarn("queue: releasing a concurrency slot failed; it is free when its lease expires", "target", target, "err", err, "lease", fs.ttl)
			} else {
				t.mu.Lock()
				t.noteLine(gen, waiting)
				t.mu.Unlock()
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
				q.leaveLine(t)
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
			q.leaveLine(t)
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
		h := ts.release(name, q.clock.Now(), false, job, false)
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
