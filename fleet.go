package queue

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/queuekit/queue/storekit"
)

// Fleet state: with a store that implements TargetStore, target health
// and fan-out cadence live in the store, shared by every process of the
// queue. Each process keeps its own view (the targets and the due table
// that Fanout, Due and dispatch read, without a round trip) and:
//
//   - writes a change it makes through to the store at once, from one
//     goroutine, coalescing the changes made while a write is in flight
//     into the next batch;
//   - applies the changes every process writes as the store announces
//     them (WatchTargets), its own included, in the store's order;
//   - reloads the whole state every targetRefresh, which bounds its
//     staleness when announcements are lost.
//
// An entry with a local change not yet written keeps the local value: the
// write, and its announcement, follow.

// targetRefresh is how often a queue on a TargetStore reloads the state.
const targetRefresh = time.Second

// targetSyncTimeout bounds one SaveTargets or LoadTargets call.
const targetSyncTimeout = 5 * time.Second

// fleetSync is a queue's link to its TargetStore.
type fleetSync struct {
	store storekit.TargetStore
	log   *slog.Logger

	mu      sync.Mutex
	pending map[string]storekit.TargetState // entry -> latest local state not yet written
	failing bool                            // the last load or save failed (logged once)
	// heard counts the announcements applied; heardAt maps an entry to
	// the count at its last one. A reload keeps the entries heard of
	// while it loaded: its result may predate their writes.
	heard   uint64
	heardAt map[string]uint64

	kick chan struct{}
	stop context.CancelFunc
	done chan struct{}
}

// entryKey names a TargetStore entry.
func entryKey(target, key string) string { return target + "\x00" + key }

// bindFleet links ts to store when it is a TargetStore.
func (ts *targets[T]) bindFleet(store any, log *slog.Logger) {
	s, ok := store.(storekit.TargetStore)
	if !ok {
		return
	}
	ts.fleet = &fleetSync{store: s, log: log, pending: map[string]storekit.TargetState{}, heardAt: map[string]uint64{},
		kick: make(chan struct{}, 1)}
	s.WatchTargets(ts.applyState)
}

// loadFleet loads the stored state, waiting at most targetSyncTimeout:
// a failure is logged, and the view starts empty until a reload works.
func (ts *targets[T]) loadFleet(ctx context.Context) {
	if ts.fleet != nil {
		ts.reload(ctx)
	}
}

// startFleet starts the goroutine that writes changes and reloads; ctx
// ends it.
func (ts *targets[T]) startFleet(ctx context.Context) {
	f := ts.fleet
	if f == nil {
		return
	}
	ctx, f.stop = context.WithCancel(ctx)
	f.done = make(chan struct{})
	go ts.syncLoop(ctx)
}

// stopFleet stops the goroutine, which first writes what is pending.
func (ts *targets[T]) stopFleet() {
	if f := ts.fleet; f != nil && f.stop != nil {
		f.stop()
		<-f.done
	}
}

func (ts *targets[T]) syncLoop(ctx context.Context) {
	f := ts.fleet
	defer close(f.done)
	timer := ts.clock.NewTimer(targetRefresh)
	defer timer.Stop()
	for {
		select {
		case <-f.kick:
			ts.flush(ctx)
		case <-timer.C():
			ts.flush(ctx)
			ts.reload(ctx)
			timer.Reset(targetRefresh)
		case <-ctx.Done():
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), targetSyncTimeout)
			ts.flush(ctx)
			cancel()
			return
		}
	}
}

// share queues t's health to be written; t.mu is held.
func (ts *targets[T]) share(t *target[T]) {
	if ts.fleet == nil {
		return
	}
	st := storekit.TargetState{Target: t.name, SuspendedUntil: t.suspended, Disabled: t.disabled, Reason: t.reason, DisabledAt: t.disableAt}
	if t.brk != breakerClosed {
		st.BreakerUntil = t.brkUntil
	}
	ts.fleet.put(st)
}

// shareDue queues a next-due time to be written. Key "" names a
// target's health entry in a TargetStore, so its cadence stays in process.
func (ts *targets[T]) shareDue(target, key string, at time.Time, past bool) {
	if ts.fleet == nil || key == "" {
		return
	}
	if past {
		at = time.Time{}
	}
	ts.fleet.put(storekit.TargetState{Target: target, Key: key, NextDue: at})
}

func (f *fleetSync) put(st storekit.TargetState) {
	f.mu.Lock()
	f.pending[entryKey(st.Target, st.Key)] = st
	f.mu.Unlock()
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// flush writes the pending entries. Entries whose write failed are
// pending again, unless a newer change replaced them, and are retried at
// the next reload.
func (ts *targets[T]) flush(ctx context.Context) {
	f := ts.fleet
	f.mu.Lock()
	if len(f.pending) == 0 {
		f.mu.Unlock()
		return
	}
	batch := make([]storekit.TargetState, 0, len(f.pending))
	for _, st := range f.pending {
		batch = append(batch, st)
	}
	clear(f.pending)
	f.mu.Unlock()
	sctx, cancel := context.WithTimeout(ctx, targetSyncTimeout)
	err := f.store.SaveTargets(sctx, batch)
	cancel()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		for _, st := range batch {
			k := entryKey(st.Target, st.Key)
			if _, newer := f.pending[k]; !newer {
				f.pending[k] = st
			}
		}
	}
	f.noteLocked("writing target state", err, len(batch))
}

// noteLocked logs the first failure of a run of them, and the recovery;
// f.mu is held.
func (f *fleetSync) noteLocked(what string, err error, n int) {
	switch {
	case err != nil && !f.failing:
		f.log.Warn("queue: "+what+" failed; this process keeps its own view and retries every second", "err", err, "entries", n)
	case err == nil && f.failing:
		f.log.Info("queue: " + what + " works again")
	}
	f.failing = err != nil
}

// reload loads the stored state and makes it the view, except for
// entries with a local change not yet written and entries announced
// while it loaded (the load may have read them before the announced
// write: the announcement is the newer).
func (ts *targets[T]) reload(ctx context.Context) {
	f := ts.fleet
	f.mu.Lock()
	since := f.heard
	f.mu.Unlock()
	lctx, cancel := context.WithTimeout(ctx, targetSyncTimeout)
	states, err := f.store.LoadTargets(lctx)
	cancel()
	f.mu.Lock()
	f.noteLocked("loading target state", err, 0)
	var pend map[string]bool // the entries the load does not replace
	if len(f.pending) > 0 || len(f.heardAt) > 0 {
		pend = make(map[string]bool, len(f.pending))
		for k := range f.pending {
			pend[k] = true
		}
		for k, at := range f.heardAt {
			if at > since {
				pend[k] = true
			} else if err == nil {
				delete(f.heardAt, k) // the load read it after its write
			}
		}
	}
	f.mu.Unlock()
	if err != nil {
		return
	}
	now := ts.now()
	health := make(map[string]bool)
	due := map[string]map[string]int64{}
	n := 0
	for i := range states {
		st := &states[i]
		switch k := entryKey(st.Target, st.Key); {
		case pend[k]:
			if st.Key == "" {
				health[st.Target] = true
			}
		case st.Key == "":
			health[st.Target] = true
			ts.applyHealth(st)
		case !st.NextDue.IsZero():
			if inst := ts.instant(st.NextDue); inst > now {
				addDue(due, st.Target, st.Key, inst)
				n++
			}
		}
	}
	// A target the store no longer holds is healthy: a Resume this
	// process did not hear of.
	ts.m.Range(func(name, _ any) bool {
		if !health[name.(string)] && !pend[entryKey(name.(string), "")] {
			ts.applyHealth(&storekit.TargetState{Target: name.(string)})
		}
		return true
	})
	ts.due.mu.Lock()
	defer ts.due.mu.Unlock()
	for key, waiting := range ts.due.m {
		for target, inst := range waiting {
			if pend[entryKey(target, key)] {
				addDue(due, target, key, inst)
				n++
			}
		}
	}
	ts.due.m, ts.due.n = due, n
}

func addDue(due map[string]map[string]int64, target, key string, inst int64) {
	m := due[key]
	if m == nil {
		m = map[string]int64{}
		due[key] = m
	}
	m[target] = inst
}

// applyState applies an entry a process wrote, as the store announced it.
func (ts *targets[T]) applyState(st storekit.TargetState) {
	f := ts.fleet
	k := entryKey(st.Target, st.Key)
	f.mu.Lock()
	_, local := f.pending[k]
	if !local {
		f.heard++
		f.heardAt[k] = f.heard
	}
	f.mu.Unlock()
	if local {
		return // this process's newer change is on its way
	}
	if st.Key == "" {
		ts.applyHealth(&st)
		return
	}
	ts.due.set(st.Target, st.Key, st.NextDue, ts.instant(st.NextDue), ts.now())
}

// applyHealth makes st the target's health in this process's view. The
// failure counts stay this process's own. A breaker whose cool-down has
// passed stays as this process has it (half-open, with its probes), so
// that the announcement of its own opening does not close the half-open
// state it has since reached.
func (ts *targets[T]) applyHealth(st *storekit.TargetState) {
	if st.Empty() {
		if t, ok := ts.lookup(st.Target); !ok || t.healthy() {
			return
		}
	}
	t := ts.get(st.Target)
	now := ts.clock.Now()
	t.mu.Lock()
	blocked := t.disabled || t.holding(now)
	defer func() {
		freed := blocked && !t.disabled && !t.holding(now)
		t.mu.Unlock()
		if freed {
			ts.freed(st.Target) // resumed or enabled by another process, or by queuectl
		}
	}()
	changed := false
	if !t.suspended.Equal(st.SuspendedUntil) {
		t.suspended, changed = st.SuspendedUntil, true
	}
	if t.disabled != st.Disabled || t.reason != st.Reason {
		t.disabled, t.reason, t.disableAt, changed = st.Disabled, st.Reason, st.DisabledAt, true
	}
	switch {
	case st.BreakerUntil.IsZero():
		if t.brk != breakerClosed {
			t.brk, t.probes, changed = breakerClosed, 0, true
		}
	case t.brk == breakerClosed || ts.clock.Now().Before(st.BreakerUntil) && !t.brkUntil.Equal(st.BreakerUntil):
		t.brk, t.brkUntil, t.probes, changed = breakerOpen, st.BreakerUntil, 0, true
	}
	if changed {
		ts.publish(t)
	}
}

// healthy reports whether t is neither suspended, disabled nor held by
// its breaker.
func (t *target[T]) healthy() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.suspended.IsZero() && !t.disabled && t.brk == breakerClosed
}
