package bench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// SchedSpec configures a scheduled-path contender.
type SchedSpec struct {
	Workers  int
	Capacity int
}

// SchedInstance is a started scheduled-path contender.
type SchedInstance interface {
	// After schedules job i to run d from now. One goroutine calls it.
	After(i int, d time.Duration) error
	// Close stops the system; jobs still scheduled are abandoned.
	Close() error
}

// SchedSystem is one contender on the scheduled path.
type SchedSystem struct {
	Name   string
	Module string
	Note   string
	Start  func(spec SchedSpec, run func(i int)) (SchedInstance, error)
}

// SchedSystems returns the scheduled-path contenders in report order.
func SchedSystems() []SchedSystem {
	return []SchedSystem{
		queueSchedSystem(),
		{Name: "workqueue", Module: "k8s.io/client-go", Note: "NewTypedDelayingQueue[int], AddAfter(i, d), W Get/Done loops", Start: startDelaying},
		{Name: "time.AfterFunc", Note: "one runtime timer per job (the reference: no queue, no workers)", Start: startAfterFunc},
	}
}

// LookupSchedSystem returns the scheduled-path system with the given name.
func LookupSchedSystem(name string) (SchedSystem, bool) {
	for _, s := range SchedSystems() {
		if s.Name == name {
			return s, true
		}
	}
	return SchedSystem{}, false
}

// Lateness is the distribution of start − due over one run.
type Lateness struct {
	Jobs               int
	Min, P50, P90, P99 time.Duration
	Max                time.Duration
	EnqueueTime        time.Duration // how long scheduling all jobs took
	Early              int           // jobs that started before they were due
}

// RunLateness schedules n jobs with delays uniform in [0, spread) — all at
// once when rate is 0, otherwise rate jobs per second — and measures how
// late each starts.
func RunLateness(sys SchedSystem, spec SchedSpec, n int, spread time.Duration, rate float64, seed uint64) (Lateness, error) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = time.Duration(rng.Int64N(int64(spread)))
	}
	due := make([]int64, n)
	late := make([]int64, n)
	var left atomic.Int64
	left.Store(int64(n))
	done := make(chan struct{})
	base := time.Now()
	run := func(i int) {
		late[i] = int64(time.Since(base)) - due[i]
		if left.Add(-1) == 0 {
			close(done)
		}
	}
	inst, err := sys.Start(spec, run)
	if err != nil {
		return Lateness{}, fmt.Errorf("%s: start: %w", sys.Name, err)
	}
	defer inst.Close()

	begin := time.Since(base)
	for i := 0; i < n; {
		if rate > 0 {
			next := begin + time.Duration(float64(i)/rate*float64(time.Second))
			if wait := next - time.Since(base); wait > 0 {
				time.Sleep(wait)
			}
		}
		// Send every job whose send time has come (all of them in a burst).
		limit := n
		if rate > 0 {
			limit = min(n, int(float64(time.Since(base)-begin)/float64(time.Second)*rate)+1)
		}
		for ; i < limit; i++ {
			due[i] = int64(time.Since(base)) + int64(delays[i])
			if err := inst.After(i, delays[i]); err != nil {
				return Lateness{}, fmt.Errorf("%s: schedule job %d: %w", sys.Name, i, err)
			}
		}
	}
	enqueued := time.Since(base) - begin

	select {
	case <-done:
	case <-time.After(spread + time.Minute):
		return Lateness{}, fmt.Errorf("%s: %d of %d jobs never ran", sys.Name, left.Load(), n)
	}
	slices.Sort(late)
	l := Lateness{
		Jobs:        n,
		Min:         time.Duration(late[0]),
		P50:         time.Duration(percentile(late, 50)),
		P90:         time.Duration(percentile(late, 90)),
		P99:         time.Duration(percentile(late, 99)),
		Max:         time.Duration(late[n-1]),
		EnqueueTime: enqueued,
	}
	for _, v := range late {
		if v >= 0 {
			break
		}
		l.Early++
	}
	return l, nil
}

// Held is the cost of holding jobs scheduled far in the future.
type Held struct {
	Jobs       int
	Elapsed    time.Duration // time to schedule all of them
	Rate       float64       // jobs scheduled per second
	HeapPerJob float64       // HeapAlloc growth after GC, bytes per job
	MallocsJob float64       // allocations per scheduled job
}

// RunHeld schedules n jobs an hour out, timing it, and measures the heap
// they hold after a GC.
func RunHeld(sys SchedSystem, spec SchedSpec, n int) (Held, error) {
	inst, err := sys.Start(spec, func(int) {})
	if err != nil {
		return Held{}, fmt.Errorf("%s: start: %w", sys.Name, err)
	}
	defer inst.Close()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	start := time.Now()
	for i := range n {
		if err := inst.After(i, time.Hour); err != nil {
			return Held{}, fmt.Errorf("%s: schedule job %d: %w", sys.Name, i, err)
		}
	}
	elapsed := time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	return Held{
		Jobs:       n,
		Elapsed:    elapsed,
		Rate:       float64(n) / elapsed.Seconds(),
		HeapPerJob: (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(n),
		MallocsJob: float64(m1.Mallocs-m0.Mallocs) / float64(n),
	}, nil
}

type delayingInst struct {
	q    workqueue.TypedDelayingInterface[int]
	done chan struct{}
}

func startDelaying(spec SchedSpec, run func(int)) (SchedInstance, error) {
	d := &delayingInst{
		q:    workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[int]{}),
		done: make(chan struct{}),
	}
	left := atomic.Int64{}
	left.Store(int64(spec.Workers))
	for range spec.Workers {
		go func() {
			defer func() {
				if left.Add(-1) == 0 {
					close(d.done)
				}
			}()
			for {
				i, shutdown := d.q.Get()
				if shutdown {
					return
				}
				run(i)
				d.q.Done(i)
			}
		}()
	}
	return d, nil
}

func (d *delayingInst) After(i int, dur time.Duration) error { d.q.AddAfter(i, dur); return nil }
func (d *delayingInst) Close() error                         { d.q.ShutDown(); <-d.done; return nil }

type afterFuncInst struct{ run func(int) }

func startAfterFunc(_ SchedSpec, run func(int)) (SchedInstance, error) {
	return afterFuncInst{run}, nil
}

// After leaves the timer unreferenced: the runtime keeps a pending timer
// alive, as a fire-and-forget caller would.
func (a afterFuncInst) After(i int, d time.Duration) error {
	time.AfterFunc(d, func() { a.run(i) })
	return nil
}

func (afterFuncInst) Close() error { return nil }
