package redisstore

import (
	"container/heap"
	"math"

	"github.com/queuekit/queue"
)

// localIDBit marks the IDs of jobs accepted by the fallback when no Redis
// ID was reserved. Such a job gets a Redis ID when it is written back.
const localIDBit = int64(1) << 62

type fbState uint8

const (
	fbReady     fbState = iota + 1 // waits in a ready list
	fbSched                        // waits in the schedule
	fbUncertain                    // its Add may have reached Redis: never run here
	fbRerun                        // coalesced rerun of a running key
	fbRunning                      // claimed from the fallback
	fbWriting                      // being written back to Redis
)

// fbJob is a job held by the fallback.
type fbJob[T any] struct {
	job     queue.Job[T]
	enc     []byte // encoded payload
	sh      *shard
	seq     int64 // Redis sequence number; 0 while the job has a local ID
	blk     int64 // the ID block of seq (see shard.reserve)
	prio    int   // index in the queue's priorities
	due     int64 // ms; 0 when ready at once
	state   fbState
	inRedis bool // its Add or write-back may have reached Redis
	lastErr string
	hidx    int // index in the schedule heap
}

// fallback is the bounded in-memory queue that takes jobs while their
// Redis shard is unreachable. It keeps the in-memory store's rules within
// itself: strict priority order and FIFO, pending keys, scheduled groups
// and coalesced reruns. Its methods must be called with
// Store.fbMu held.
type fallback[T any] struct {
	size      int // bound on held jobs; 0 = off
	capacity  int // bound on ready jobs (the queue's Capacity)
	held      int // jobs waiting here: ready, scheduled, uncertain, reruns
	nready    int
	ready     [][]*fbJob[T] // per priority, FIFO
	sched     fbHeap[T]
	uncertain []*fbJob[T]
	keys      map[string]*fbJob[T] // pending key -> holder (any state but rerun)
	reruns    map[string]*fbJob[T]
	groups    map[string]*fbJob[T]
	running   map[int64]*fbJob[T]
	nextLocal int64
}

func newFallback[T any](size, capacity, priorities int) *fallback[T] {
	return &fallback[T]{
		size: size, capacity: capacity,
		ready:   make([][]*fbJob[T], priorities),
		keys:    map[string]*fbJob[T]{},
		reruns:  map[string]*fbJob[T]{},
		groups:  map[string]*fbJob[T]{},
		running: map[int64]*fbJob[T]{},
	}
}

// localID returns an ID for a job that could not reserve a Redis ID.
func (f *fallback[T]) localID() int64 {
	f.nextLocal++
	return localIDBit | f.nextLocal
}

// add accepts j under the in-memory rules. now is in ms. A job whose Add
// may have reached Redis (inRedis) is kept for writing back without checks:
// Redis decides about it when it answers again.
func (f *fallback[T]) add(j *fbJob[T], now int64, coalesce bool) (queue.Added, error) {
	added := queue.Added{ID: j.job.ID, Scheduled: j.due > now}
	if f.held >= f.size {
		return added, queue.ErrQueueFull
	}
	if j.inRedis {
		f.held++
		j.state = fbUncertain
		f.uncertain = append(f.uncertain, j)
		if k := j.job.Key; k != "" && f.keys[k] == nil {
			f.keys[k] = j
		}
		return added, nil
	}
	if k := j.job.Key; k != "" {
		if h := f.keys[k]; h != nil {
			if h.state != fbRunning || !coalesce || f.reruns[k] != nil {
				return added, queue.ErrDuplicate
			}
			f.held++
			j.state = fbRerun
			f.reruns[k] = j
			return queue.Added{ID: j.job.ID, Coalesced: true}, nil
		}
	}
	if added.Scheduled && j.job.Group != "" && f.groups[j.job.Group] != nil {
		return added, queue.ErrDuplicate
	}
	if !added.Scheduled && f.nready >= f.capacity {
		return added, queue.ErrQueueFull
	}
	f.held++
	f.activate(j, now, true)
	return added, nil
}

func (f *fallback[T]) mark(j *fbJob[T]) {
	if j.job.Key != "" {
		f.keys[j.job.Key] = j
	}
}

// activate makes a held job ready or scheduled and marks its key. Only a
// job being added reserves its group (reserve), as in the in-memory store:
// retries, deferrals and reruns do not take a group, and a job gives its
// group up when it is due.
func (f *fallback[T]) activate(j *fbJob[T], now int64, reserve bool) {
	f.mark(j)
	if j.due > now {
		j.state = fbSched
		heap.Push(&f.sched, j)
		if g := j.job.Group; reserve && g != "" && f.groups[g] == nil {
			f.groups[g] = j
		}
		return
	}
	f.unGroup(j)
	j.state = fbReady
	f.ready[j.prio] = append(f.ready[j.prio], j)
	f.nready++
}

// promote moves due scheduled jobs to their ready lists.
func (f *fallback[T]) promote(now int64) {
	for len(f.sched) > 0 && f.sched[0].due <= now {
		j := heap.Pop(&f.sched).(*fbJob[T])
		f.unGroup(j)
		j.state = fbReady
		f.ready[j.prio] = append(f.ready[j.prio], j)
		f.nready++
	}
}

func (f *fallback[T]) unGroup(j *fbJob[T]) {
	if g := j.job.Group; g != "" && f.groups[g] == j {
		delete(f.groups, g)
	}
}

// claim returns the first ready job in priority order among the
// priorities with an index below below, marked running.
func (f *fallback[T]) claim(now int64, below int) (*fbJob[T], bool) {
	f.promote(now)
	for p := range min(len(f.ready), below) {
		if len(f.ready[p]) == 0 {
			continue
		}
		j := f.ready[p][0]
		f.ready[p][0] = nil
		f.ready[p] = f.ready[p][1:]
		f.nready--
		f.held--
		j.state = fbRunning
		j.job.Attempt++
		f.running[j.job.ID] = j
		return j, true
	}
	return nil, false
}

// end finishes a running job and releases its key; a rerun becomes active.
func (f *fallback[T]) end(j *fbJob[T], now int64) {
	delete(f.running, j.job.ID)
	f.release(j, now)
}

func (f *fallback[T]) release(j *fbJob[T], now int64) {
	k := j.job.Key
	if k == "" || f.keys[k] != j {
		return
	}
	delete(f.keys, k)
	if r := f.reruns[k]; r != nil {
		delete(f.reruns, k)
		f.activate(r, now, false)
	}
}

// again puts a running job back: retry or defer. Either is superseded
// when a rerun of the key waits: it reports false when the job was
// dropped and the rerun took its key.
func (f *fallback[T]) again(j *fbJob[T], due, now int64, retry bool, cause string) bool {
	delete(f.running, j.job.ID)
	if j.job.Key != "" && f.reruns[j.job.Key] != nil {
		f.release(j, now)
		return false
	}
	if retry {
		j.lastErr = cause
	} else if j.job.Attempt > 0 {
		j.job.Attempt--
	}
	j.due = due
	f.held++
	f.activate(j, now, false)
	return true
}

// cancel removes the queued, scheduled or uncertain holder of key and its
// rerun, and reports how many jobs it removed.
func (f *fallback[T]) cancel(key string) int {
	n := 0
	if h := f.keys[key]; h != nil && h.state != fbRunning && h.state != fbWriting {
		f.unlink(h)
		delete(f.keys, key)
		n++
	}
	if r := f.reruns[key]; r != nil {
		delete(f.reruns, key)
		f.held--
		n++
	}
	return n
}

// unlink removes a waiting job from its list or heap.
func (f *fallback[T]) unlink(j *fbJob[T]) {
	switch j.state {
	case fbReady:
		l := f.ready[j.prio]
		for i, x := range l {
			if x == j {
				f.ready[j.prio] = append(l[:i:i], l[i+1:]...)
				f.nready--
				break
			}
		}
	case fbSched:
		heap.Remove(&f.sched, j.hidx)
		f.unGroup(j)
	case fbUncertain:
		for i, x := range f.uncertain {
			if x == j {
				f.uncertain = append(f.uncertain[:i:i], f.uncertain[i+1:]...)
				break
			}
		}
	}
	f.held--
}

// takeFor removes up to n waiting jobs of shard sh for writing back to
// Redis: uncertain ones first, then ready ones in order, then scheduled
// ones. Their keys and groups stay marked until settle.
func (f *fallback[T]) takeFor(sh *shard, n int) []*fbJob[T] {
	var out []*fbJob[T]
	for i := 0; len(out) < n && i < len(f.uncertain); {
		if j := f.uncertain[i]; j.sh == sh {
			f.uncertain = append(f.uncertain[:i:i], f.uncertain[i+1:]...)
			out = append(out, j)
			continue
		}
		i++
	}
	for p := range f.ready {
		for len(out) < n && len(f.ready[p]) > 0 && f.ready[p][0].sh == sh {
			out = append(out, f.ready[p][0])
			f.ready[p] = f.ready[p][1:]
			f.nready--
		}
	}
	for i := 0; len(out) < n && i < len(f.sched); {
		if j := f.sched[i]; j.sh == sh {
			heap.Remove(&f.sched, i)
			out = append(out, j)
			continue
		}
		i++
	}
	for _, j := range out {
		j.state = fbWriting
	}
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
// write landed) once Redis answers.
func (f *fallback[T]) settle(j *fbJob[T], out writeOutcome, now int64) {
	switch out {
	case writeDone:
		f.held--
		f.unGroup(j)
		if k := j.job.Key; k != "" && f.keys[k] == j {
			delete(f.keys, k)
		}
	case writeUnknown:
		f.unGroup(j)
		j.inRedis = true
		j.state = fbUncertain
		f.uncertain = append(f.uncertain, j)
	default:
		if j.inRedis {
			f.unGroup(j)
			j.state = fbUncertain
			f.uncertain = append(f.uncertain, j)
			return
		}
		f.activate(j, now, false) // it keeps the group it holds
	}
}

// waiting reports whether jobs of sh wait here for writing back.
func (f *fallback[T]) waiting(sh *shard) bool {
	for _, j := range f.uncertain {
		if j.sh == sh {
			return true
		}
	}
	for p := range f.ready {
		if len(f.ready[p]) > 0 && f.ready[p][0].sh == sh {
			return true
		}
	}
	for _, j := range f.sched {
		if j.sh == sh {
			return true
		}
	}
	return false
}

// nextDue returns the earliest due time in the schedule, or MaxInt64.
func (f *fallback[T]) nextDue() int64 {
	if len(f.sched) == 0 {
		return math.MaxInt64
	}
	return f.sched[0].due
}

type fbHeap[T any] []*fbJob[T]

func (h fbHeap[T]) Len() int           { return len(h) }
func (h fbHeap[T]) Less(i, j int) bool { return h[i].due < h[j].due }
func (h fbHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i, j
}
func (h *fbHeap[T]) Push(x any) {
	j := x.(*fbJob[T])
	j.hidx = len(*h)
	*h = append(*h, j)
}
func (h *fbHeap[T]) Pop() any {
	old := *h
	j := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return j
}
