package redisstore

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/memstore"
)

// localIDBit marks the IDs of jobs accepted by the fallback when no Redis
// ID was reserved. Such a job gets a Redis ID when it is written back.
// Redis IDs stay far below it, and local IDs below memstore.MaxID.
const localIDBit = int64(1) << 60

// fbJob is a job the fallback holds: what Redis needs of it besides what
// the in-memory store keeps (the encoded payload, the Redis ID
// reservation, the last error), and the job itself while the in-memory
// store does not hold it (uncertain, being written back, claimed).
type fbJob[T any] struct {
	job     queue.Job[T]
	enc     []byte // encoded payload
	sh      *shard
	seq     int64 // Redis sequence number; 0 while the job has a local ID
	blk     int64 // the ID block of seq (see shard.reserve)
	prio    int   // index in the queue's priorities
	due     int64 // ms; 0 when ready at once
	inRedis bool  // its Add or write-back may have reached Redis
	lastErr string
	created int64 // enqueue time, ms (the queue's clock)
	want    int64 // inbox permits its Add may ask for (see inbox.go)
}

// fallback is the bounded in-memory queue that takes jobs while their
// Redis shard is unreachable. The in-memory store (internal/memstore)
// holds its waiting jobs and applies the in-memory rules: strict priority
// order and FIFO, pending keys, scheduled groups, coalesced reruns, the
// capacity. What is Redis's stays here: jobs whose Add may have reached
// Redis (uncertain: never run here, only written back) and jobs being
// written back, which hold their keys while they are out of the
// in-memory store. Its methods must be called with Store.fbMu held.
type fallback[T any] struct {
	mem       *memstore.Store[*fbJob[T]] // made for the first job it takes (see use); nil until then
	mcfg      storekit.Config            // mem's configuration
	size      int                        // bound on held jobs; 0 = off
	uncertain []*fbJob[T]
	writing   int            // jobs out for write-back, until settled
	away      map[string]int // keys of uncertain and writing jobs: how many hold each
	events    []queue.Event  // the in-memory store's reports, made under fbMu: see takeEvents
	nextLocal int64
	byPrio    []*shard // the queue's shards by priority index
}

// newFallback returns the fallback for a queue configured as cfg. Its
// ready bound is the queue's capacity, and never above size, which bounds
// all it holds (so the in-memory store's ready queues, allocated whole,
// stay as small as the fallback).
func newFallback[T any](size int, cfg storekit.Config, byPrio []*shard) (*fallback[T], error) {
	f := &fallback[T]{size: size, away: map[string]int{}, byPrio: byPrio}
	mc := cfg
	mc.Capacity = cfg.Capacity
	if mc.Capacity <= 0 || mc.Capacity > size {
		mc.Capacity = size
	}
	mc.Capacity = max(min(mc.Capacity, memstore.MaxCapacity), 1)
	mc.MaxPending = max(size, 1)
	mc.Report = func(ev queue.Event) { f.events = append(f.events, ev) }
	f.mcfg = mc
	probe := mc
	probe.Capacity = 1 // the configuration is checked now; the store is made when first used
	if err := memstore.New[*fbJob[T]]().Init(probe); err != nil {
		return nil, err
	}
	return f, nil
}

// use returns the in-memory store, making it first if need be: its ready
// queue is allocated whole, which a process whose Redis never fails need
// not pay for.
func (f *fallback[T]) use() *memstore.Store[*fbJob[T]] {
	if f.mem == nil {
		m := memstore.New[*fbJob[T]]()
		if err := m.Init(f.mcfg); err != nil {
			panic("redisstore: " + err.Error()) // newFallback checked the same configuration
		}
		f.mem = m
	}
	return f.mem
}

// readyLen returns the number of ready jobs.
func (f *fallback[T]) readyLen() int {
	if f.mem == nil {
		return 0
	}
	return f.mem.Len()
}

// promote moves due jobs to the ready queues and returns how many it moved.
func (f *fallback[T]) promote() int {
	if f.mem == nil {
		return 0
	}
	n, _ := f.mem.PromoteDue(context.Background())
	return n
}

// purge removes the ready and scheduled jobs and the reruns, not the jobs
// whose Add may have reached Redis, and returns how many it removed.
func (f *fallback[T]) purge() int {
	if f.mem == nil {
		return 0
	}
	n, _ := f.mem.Purge(context.Background())
	return n
}

// stats returns the in-memory store's counts.
func (f *fallback[T]) stats() storekit.Stats {
	if f.mem == nil {
		return storekit.Stats{}
	}
	st, _ := f.mem.Stats(context.Background())
	return st
}

// scheduled returns up to n scheduled jobs, earliest first.
func (f *fallback[T]) scheduled(n int) []queue.ScheduledJob {
	if f.mem == nil {
		return nil
	}
	out, _ := f.mem.Scheduled(context.Background(), n)
	return out
}

// takeEvents returns the events the in-memory store reported (due jobs
// requeued for want of room), for the caller to report once fbMu is
// released.
func (f *fallback[T]) takeEvents() []queue.Event {
	evs := f.events
	f.events = nil
	return evs
}

// held returns the number of jobs waiting here: ready, scheduled,
// reruns, uncertain and being written back.
func (f *fallback[T]) held() int {
	n := len(f.uncertain) + f.writing
	if f.mem != nil {
		n += f.mem.Pending()
	}
	return n
}

// localID returns an ID for a job that could not reserve a Redis ID.
func (f *fallback[T]) localID() int64 {
	f.nextLocal++
	return localIDBit | f.nextLocal
}

// memJob is j as the in-memory store takes it, j riding as the payload.
func memJob[T any](j *fbJob[T]) queue.Job[*fbJob[T]] {
	m := queue.Job[*fbJob[T]]{ID: j.job.ID, Key: j.job.Key, Group: j.job.Group, Target: j.job.Target,
		Priority: j.job.Priority, MaxAttempts: j.job.MaxAttempts, Attempt: j.job.Attempt, UniqueFor: j.job.UniqueFor, Payload: j}
	if j.due != 0 {
		m.RunAt = time.UnixMilli(j.due)
	}
	return m
}

// fromMem updates the fbJob that m carries from m and returns it.
func fromMem[T any](m queue.Job[*fbJob[T]], now time.Time) *fbJob[T] {
	j := m.Payload
	j.job.Priority, j.job.Attempt, j.job.RunAt = m.Priority, m.Attempt, m.RunAt
	j.due = 0
	if !m.RunAt.IsZero() {
		j.due = dueMs(m.RunAt, now)
	}
	return j
}

// add accepts j under the in-memory rules. now is in ms. A job whose Add
// may have reached Redis (inRedis) is kept for writing back without checks:
// Redis decides about it when it answers again.
func (f *fallback[T]) add(j *fbJob[T], now int64) (storekit.Added, error) {
	if j.inRedis {
		if f.held() >= f.size {
			return storekit.Added{}, queue.ErrQueueFull
		}
		f.uncertain = append(f.uncertain, j)
		f.hold(j)
		return storekit.Added{ID: j.job.ID, Scheduled: j.due > now}, nil
	}
	if k := j.job.Key; k != "" && f.away[k] > 0 {
		return storekit.Added{}, queue.ErrDuplicate
	}
	added, err := f.use().Put(memJob(j), len(f.uncertain)+f.writing)
	if errors.Is(err, queue.ErrPendingLimit) {
		err = queue.ErrQueueFull // the fallback's bound, as before it was the in-memory store's
	}
	return added, err
}

// hold marks j's key as held by a job outside the in-memory store.
func (f *fallback[T]) hold(j *fbJob[T]) {
	if k := j.job.Key; k != "" {
		f.away[k]++
	}
}

// unhold undoes hold.
func (f *fallback[T]) unhold(j *fbJob[T]) {
	if k := j.job.Key; k != "" {
		if f.away[k]--; f.away[k] <= 0 {
			delete(f.away, k)
		}
	}
}

// claim promotes due jobs and returns the first ready job in priority
// order among the priorities with an index below below, claimed.
func (f *fallback[T]) claim(below int) (*fbJob[T], bool) {
	if f.mem == nil {
		return nil, false
	}
	f.promote()
	m, ok := f.mem.TryClaim(below)
	if !ok {
		return nil, false
	}
	return fromMem(m, time.Time{}), true
}

// end finishes a claimed job and releases its key; a rerun becomes active.
func (f *fallback[T]) end(j *fbJob[T]) {
	_ = f.mem.Complete(context.Background(), memJob(j))
}

// again puts a claimed job back to run at due (ms): retry or defer.
// Either is superseded when a rerun of the key waits: it reports false
// when the job was dropped and the rerun took its key.
func (f *fallback[T]) again(j *fbJob[T], due int64, retry bool, cause string) bool {
	at := time.UnixMilli(due)
	var err error
	if retry {
		j.lastErr = cause
		err = f.mem.Retry(context.Background(), memJob(j), at, nil)
	} else {
		err = f.mem.Defer(context.Background(), memJob(j), at, nil)
	}
	return !errors.Is(err, storekit.ErrSuperseded)
}

// cancel removes the queued, scheduled or uncertain jobs of key and its
// rerun, and reports how many jobs it removed.
func (f *fallback[T]) cancel(key string) int {
	n := 0
	if f.mem != nil {
		n, _ = f.mem.Cancel(context.Background(), key)
	}
	return n + f.cancelUncertain(func(k string) bool { return k == key })
}

// cancelMatch is cancel for every key that satisfies match.
func (f *fallback[T]) cancelMatch(match func(string) bool) int {
	n := 0
	if f.mem != nil {
		n, _ = f.mem.CancelMatch(context.Background(), match)
	}
	return n + f.cancelUncertain(match)
}

func (f *fallback[T]) cancelUncertain(match func(string) bool) int {
	n := 0
	kept := f.uncertain[:0]
	for _, j := range f.uncertain {
		if j.job.Key != "" && match(j.job.Key) {
			f.unhold(j)
			n++
			continue
		}
		kept = append(kept, j)
	}
	clear(f.uncertain[len(kept):])
	f.uncertain = kept
	return n
}

// takeFor removes up to n waiting jobs of shard sh for writing back to
// Redis: uncertain ones first, then ready ones in order, then scheduled
// ones. Their keys stay held until settle; their groups are free.
func (f *fallback[T]) takeFor(sh *shard, n int, now time.Time) []*fbJob[T] {
	var out []*fbJob[T]
	kept := f.uncertain[:0]
	for _, j := range f.uncertain {
		if j.sh == sh && len(out) < n {
			out = append(out, j)
			continue
		}
		kept = append(kept, j)
	}
	clear(f.uncertain[len(kept):])
	f.uncertain = kept
	if len(out) < n && f.mem != nil {
		for _, m := range f.mem.Take(n-len(out), func(p int) bool { return f.byPrio[p] == sh }) {
			j := fromMem(m, now)
			f.hold(j)
			out = append(out, j)
		}
	}
	f.writing += len(out)
	return out
}

// writeOutcome is how a write-back of one job ended.
type writeOutcome uint8

const (
	writeDone    writeOutcome = iota + 1 // in Redis (or dropped as a duplicate)
	writeUnsent                          // never reached Redis
	writeUnknown                         // may or may not have reached Redis
)

// settle ends a write-back. A job whose write may have landed becomes
// uncertain: it never runs here and is written again (a no-op if the first
// write landed) once Redis answers. One that never reached Redis goes
// back into the in-memory store as it was.
func (f *fallback[T]) settle(j *fbJob[T], out writeOutcome) {
	f.writing--
	if out == writeUnknown {
		j.inRedis = true
	}
	if out == writeDone {
		f.unhold(j)
		return
	}
	if !j.inRedis {
		f.unhold(j)
		if f.use().Restore(memJob(j)) == nil {
			return
		}
		f.hold(j) // its key is held again (cannot happen: the key stayed held): write it back later
	}
	f.uncertain = append(f.uncertain, j)
}

// waiting reports whether jobs of sh wait here for writing back.
func (f *fallback[T]) waiting(sh *shard) bool {
	for _, j := range f.uncertain {
		if j.sh == sh {
			return true
		}
	}
	return f.mem != nil && f.mem.Holds(func(p int) bool { return f.byPrio[p] == sh })
}

// nextDue returns the earliest due time in the schedule (ms, rounded
// up), or MaxInt64.
func (f *fallback[T]) nextDue() int64 {
	next := f.scheduled(1)
	if len(next) == 0 {
		return math.MaxInt64
	}
	return dueMs(next[0].RunAt, time.Time{})
}
