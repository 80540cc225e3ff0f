package queue

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue/storekit"
)

// counters are a set of event counts. The queue keeps one set for
// producer-side events and one per worker for outcomes, so that no two
// cores fight over one counter on the hot path; Stats adds them up.
type counters struct {
	enqueued, dropped, droppedLimit, coalesced, cancelled            atomic.Uint64
	rateLimited, throttled                                           atomic.Uint64
	done, retried, failed, dead, deferred, panics, requeued, rescued atomic.Uint64
}

func (c *counters) add(o *counters) {
	c.enqueued.Add(o.enqueued.Load())
	c.dropped.Add(o.dropped.Load())
	c.droppedLimit.Add(o.droppedLimit.Load())
	c.coalesced.Add(o.coalesced.Load())
	c.cancelled.Add(o.cancelled.Load())
	c.rateLimited.Add(o.rateLimited.Load())
	c.throttled.Add(o.throttled.Load())
	c.done.Add(o.done.Load())
	c.retried.Add(o.retried.Load())
	c.failed.Add(o.failed.Load())
	c.dead.Add(o.dead.Load())
	c.deferred.Add(o.deferred.Load())
	c.panics.Add(o.panics.Load())
	c.requeued.Add(o.requeued.Load())
	c.rescued.Add(o.rescued.Load())
}

// Counts are the queue's event counters since New. Every accepted job is
// eventually counted once as Done, Dead or Cancelled; until then it is
// ready, scheduled, waiting (a coalesced rerun) or running, so that
// Enqueued = Done + Dead + Cancelled + Ready + Scheduled + Waiting + Running
// (for the in-memory store, once the counts are quiescent).
type Counts struct {
	Enqueued    uint64 `json:"enqueued"`     // accepted by Enqueue (coalesced reruns included)
	Done        uint64 `json:"done"`         // handler succeeded, or RetryAfter past the ceiling
	Retried     uint64 `json:"retried"`      // scheduled again after a failed run
	Failed      uint64 `json:"failed"`       // handler runs that returned an error or panicked
	Dead        uint64 `json:"dead"`         // dead-lettered
	Cancelled   uint64 `json:"cancelled"`    // cancelled before running (Cancel, Purge, disabled target, superseded)
	DroppedFull uint64 `json:"dropped_full"` // refused by Enqueue: ready queue full
	// DroppedLimit counts jobs refused by Enqueue with ErrPendingLimit:
	// the queue held WithCapacity's pending bound of jobs.
	DroppedLimit uint64 `json:"dropped_limit"`
	Coalesced    uint64 `json:"coalesced"`    // accepted as the rerun of a running key
	Requeued     uint64 `json:"requeued"`     // due but the ready queue was full: rescheduled
	Deferred     uint64 `json:"deferred"`     // put back without an attempt (target suspended or busy, shutdown)
	Rescued      uint64 `json:"rescued"`      // returned to the queue after a lost lease
	Panics       uint64 `json:"panics"`       // handler panics recovered
	RateLimited  uint64 `json:"rate_limited"` // Admit refusals
	Throttled    uint64 `json:"throttled"`    // targets left out of a Fanout by throttling
	GateErrors   uint64 `json:"gate_errors"`  // errors returned by WithClaimGate's gate
}

// Stats is a snapshot of a queue. What the store alone knows (ready jobs
// per priority, scheduled and waiting jobs, pending keys, dead jobs, the
// backend's health) is in Store; the fields here are the engine's view.
// On a durable store shared by several processes, Depth and FleetRunning
// count the jobs of the whole fleet, Running and Workers this process's.
type Stats struct {
	Name       string  `json:"name"`        // the queue's name (WithName)
	State      string  `json:"state"`       // new, running, paused (Admin().Pause), stopping, stopped
	Depth      int     `json:"depth"`       // ready jobs (the fleet's), and jobs parked in this process for a busy target's slot
	Capacity   int     `json:"capacity"`    // the most ready jobs the queue holds (WithCapacity)
	MaxPending int     `json:"max_pending"` // the bound on ready, scheduled, waiting and parked jobs (WithCapacity's pending; in-memory store)
	FillPct    float64 `json:"fill_pct"`    // Depth as a percentage of Capacity
	// Running counts the jobs whose handler runs in this process (this
	// engine's workers), whatever the store.
	Running int `json:"running"`
	// FleetRunning counts the jobs running in every process of the
	// queue: the store's count (Store.Running) less the jobs parked in
	// this process for a busy target's slot, which the store counts as
	// running. Jobs parked in another process count here too. On the
	// in-memory store, whose process is the whole fleet, it is Running
	// with the jobs claimed whose handler has not started yet.
	FleetRunning int `json:"fleet_running"`
	Workers      int `json:"workers"`      // active workers
	BaseWorkers  int `json:"base_workers"` // the pool's floor (WithWorkers' base)
	MaxWorkers   int `json:"max_workers"`  // the pool's ceiling (WithWorkers' max)
	// Concurrency is the limit on jobs running at once (SetConcurrency;
	// MaxWorkers unless set).
	Concurrency int `json:"concurrency"`
	// AtGate counts the workers waiting, holding no job, at the
	// concurrency limit or in WithClaimGate's gate.
	AtGate int `json:"at_gate"`
	// Counts are the event counters since New.
	Counts
	// NextScheduled lists the next 10 scheduled jobs, earliest first.
	NextScheduled []ScheduledJob `json:"next_scheduled"`
	// Targets lists the targets that are suspended, disabled or have an
	// open or half-open circuit breaker.
	Targets []TargetStatus `json:"targets,omitempty"`
	// RecentErrors holds the latest job errors, newest first.
	RecentErrors []ErrorRecord `json:"recent_errors,omitempty"`
	// Periodic lists the periodic jobs (Queue.Periodic) by name, as this
	// process sees them: next and last period, the last run's outcome.
	Periodic []PeriodicStatus `json:"periodic,omitempty"`
	// Store is the store's own snapshot: its ready jobs per priority,
	// scheduled and waiting jobs, pending keys and dead jobs, and the
	// backend, leadership and health. Its Ready and Running count jobs
	// parked for a busy target's slot as running; Depth and Running above
	// count them as waiting to run.
	Store storekit.Stats `json:"store"`
}

var stateNames = [...]string{stateNew: "new", stateRunning: "running", stateStopping: "stopping", stateStopped: "stopped"}

// Stats returns a snapshot of the queue. It does not block on workers;
// with a durable store it queries the store, bounded by a 2 s timeout, and
// returns what it has if that fails.
func (q *Queue[T]) Stats() Stats {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st := Stats{
		Name:        q.cfg.name,
		State:       stateNames[q.state.Load()],
		Capacity:    q.cfg.capacity,
		MaxPending:  q.cfg.maxPending,
		BaseWorkers: q.cfg.baseWorkers,
		MaxWorkers:  q.cfg.maxWorkers,
		Concurrency: q.gate.concurrency(),
		AtGate:      int(q.gate.waiting.Load()),
	}
	if p, _ := q.pausedNow(); p && st.State == "running" {
		st.State = "paused" // the admin API paused it: workers do not claim
	}
	ss, err := q.store.Stats(ctx)
	if err != nil {
		ss.Detail = "stats: " + err.Error()
		ss.Ready = q.store.Len()
	}
	st.Store = ss
	// Jobs parked for a busy target's slot are claimed from the store,
	// which counts them running; they wait to run, as ready jobs do.
	parked := int(q.targets.parked.Load())
	st.Depth = ss.Ready + parked
	st.FleetRunning = max(ss.Running-parked, 0)
	st.FillPct = float64(st.Depth) * 100 / float64(st.Capacity)
	st.Counts = q.counts()
	q.mu.Lock()
	st.Workers = len(q.pool.workers)
	for _, w := range q.pool.all() {
		if w.running() != 0 {
			st.Running++
		}
	}
	q.mu.Unlock()
	if next, err := q.store.Scheduled(ctx, 10); err == nil {
		st.NextScheduled = next
	}
	st.Targets = q.targets.statuses(q.clock.Now())
	st.RecentErrors = q.obs.recentErrors()
	st.Periodic = q.per.statuses()
	return st
}

// counts sums the producer-side counters and every worker's.
func (q *Queue[T]) counts() Counts {
	var c counters
	c.add(&q.ctr)
	q.mu.Lock()
	c.add(&q.pool.exited)
	for _, w := range q.pool.all() {
		c.add(&w.ctr)
	}
	q.mu.Unlock()
	return Counts{
		Enqueued: c.enqueued.Load(), Done: c.done.Load(), Retried: c.retried.Load(),
		Failed: c.failed.Load(), Dead: c.dead.Load(), Cancelled: c.cancelled.Load(),
		DroppedFull: c.dropped.Load(), DroppedLimit: c.droppedLimit.Load(), Coalesced: c.coalesced.Load(), Requeued: c.requeued.Load(),
		Deferred: c.deferred.Load(), Rescued: c.rescued.Load(), Panics: c.panics.Load(),
		RateLimited: c.rateLimited.Load(), Throttled: c.throttled.Load(),
		GateErrors: q.gate.errs.Load(),
	}
}
