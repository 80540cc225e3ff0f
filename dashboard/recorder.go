package dashboard

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/queuekit/queue"
)

// maxKnownTargets bounds the target names a Recorder remembers, so that a
// flood of distinct names cannot grow it without limit.
const maxKnownTargets = 1000

// Recorder collects, from the queue's events, what Stats does not hold:
// the run time of finished jobs and the names of the targets the queue
// has seen. Feed it with queue.WithObserver(r.Observe) and give it to the
// dashboard with WithRecorder. The zero value is ready to use; it is safe
// for concurrent use.
//
// Observe costs a few atomic operations per finished job, and a map
// lookup per event that names a target; it keeps no payloads and at most
// 1000 target names. Being an observer costs the queue more: an Event
// built and delivered for every enqueue, start and end of a job, and a
// clock read for each. With WithAdmin the dashboard charts run times
// without a Recorder, from the admin API's sample; a Recorder is for the
// exact mean and longest run, and for listing healthy targets.
type Recorder struct {
	runs     atomic.Uint64 // finished runs timed
	runNanos atomic.Int64  // their summed run time
	maxNanos atomic.Int64  // the longest since the last take

	known sync.Map // target name -> struct{}
	mu    sync.Mutex
	n     int // names in known; mu
}

// Observe records one event; pass it to queue.WithObserver.
func (r *Recorder) Observe(ev queue.Event) {
	switch ev.Kind {
	case queue.EventDone, queue.EventDead:
		d := int64(ev.Delay)
		r.runs.Add(1)
		r.runNanos.Add(d)
		for {
			m := r.maxNanos.Load()
			if d <= m || r.maxNanos.CompareAndSwap(m, d) {
				break
			}
		}
	}
	if ev.Target != "" {
		r.remember(ev.Target)
	}
}

func (r *Recorder) remember(name string) {
	if _, ok := r.known.Load(name); ok {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= maxKnownTargets {
		return
	}
	if _, loaded := r.known.LoadOrStore(name, struct{}{}); !loaded {
		r.n++
	}
}

// targets returns the names seen, sorted.
func (r *Recorder) targets() []string {
	var out []string
	r.known.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	sort.Strings(out)
	return out
}

// take returns the runs and run time so far and the longest run since
// the previous take.
func (r *Recorder) take() (runs uint64, nanos, longest int64) {
	return r.runs.Load(), r.runNanos.Load(), r.maxNanos.Swap(0)
}
