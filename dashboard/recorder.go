package dashboard

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// maxKnownTargets bounds the target names a Recorder remembers, so that a
// flood of distinct names cannot grow it without limit.
const maxKnownTargets = 1000

// Recorder gives the dashboard what Stats does not hold: the run time of
// finished jobs and the names of the targets the queue has seen, for the
// chart's run time and for listing healthy targets. It is safe for
// concurrent use.
//
// NewRecorder(q) reads them from the queue's own counters (RunSource):
// the workers' sample of run times, summed on read, and the queue's
// table of targets. That costs the queue no observer and no Event, and a
// run nothing but the few loads of its worker's running-job slot (see
// queue.Queue.RunTimes): the dashboard does this by default when its
// Source is a RunSource, as a *queue.Queue is, so WithRecorder is needed
// only to share one Recorder or to feed one by hand. Its run times are a
// sample (about one run in 256, and the first of each worker after each
// poll): an unbiased mean, and a longest run that is the longest sampled.
//
// The zero value is the observer-fed Recorder of earlier versions: feed
// it with queue.WithObserver(r.Observe) for the exact mean and longest of
// every run, at the cost of an Event built and delivered for every
// enqueue, start and end of a job, and a clock read for each (see
// docs/benchmarks.md); it keeps no payloads and at most 1000 target
// names.
type Recorder struct {
	src RunSource // NewRecorder's; nil: fed by Observe

	runs     atomic.Uint64 // finished runs timed
	runNanos atomic.Int64  // their summed run time
	maxNanos atomic.Int64  // the longest since the last take

	known sync.Map // target name -> struct{}
	mu    sync.Mutex
	n     int // names in known; mu
}

// RunSource is a Source that keeps what a Recorder reads, in counters of
// its own. *queue.Queue[T] is one for every T.
type RunSource interface {
	// RunTimes returns the run times sampled so far; Longest is the
	// longest since the previous call (queue.Queue.RunTimes).
	RunTimes() admin.RunTimes
	// TargetNames returns the names of the targets the queue has seen.
	TargetNames() []string
}

var _ RunSource = (*queue.Queue[struct{}])(nil)

// NewRecorder returns a Recorder that reads src's counters whenever the
// dashboard samples them, and ignores Observe. src must not be nil.
func NewRecorder(src RunSource) *Recorder {
	if src == nil {
		panic("dashboard: NewRecorder: nil RunSource")
	}
	return &Recorder{src: src}
}

// Observe records one event; pass it to queue.WithObserver. A Recorder
// made by NewRecorder ignores it.
func (r *Recorder) Observe(ev queue.Event) {
	if r.src != nil {
		return
	}
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

// targets returns the names seen, sorted: the source's, at most
// maxKnownTargets of them, and those remembered.
func (r *Recorder) targets() []string {
	var out []string
	if r.src != nil {
		out = r.src.TargetNames()
		if len(out) > maxKnownTargets {
			out = out[:maxKnownTargets]
		}
	}
	r.known.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	sort.Strings(out)
	return slices.Compact(out) // a name both sources know
}

// take returns the runs and run time so far and the longest run since
// the previous take.
func (r *Recorder) take() (runs uint64, nanos, longest int64) {
	if r.src != nil {
		rt := r.src.RunTimes()
		return rt.Runs, int64(rt.Total), int64(rt.Longest)
	}
	return r.runs.Load(), r.runNanos.Load(), r.maxNanos.Swap(0)
}
