package bench

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alitto/pond/v2"
	"github.com/gammazero/workerpool"
	"github.com/panjf2000/ants/v2"
	"k8s.io/client-go/util/workqueue"
)

// Spec is one in-process case: N jobs whose payload is their index, sent by
// Producers goroutines to a system running Workers workers.
type Spec struct {
	N         int
	Producers int
	Workers   int
	// Capacity bounds the ready queue of the systems that have a bound of
	// their own choosing: the bare channel's buffer and this library's
	// capacity.
	Capacity int
	// Keys holds N distinct dedupe keys, built before timing starts, for
	// the systems that deduplicate.
	Keys []string
	// Work is the job body; it receives the payload. It is a no-op in
	// timed runs and a counter when verifying.
	Work func(i int)
}

// Instance is a started system ready to accept jobs.
type Instance interface {
	// Submit hands job i to the system, waiting or retrying until it is
	// accepted. Producers call it concurrently.
	Submit(i int)
	// Drain waits until every submitted job has run, then releases the
	// system's goroutines.
	Drain() error
}

// Retrier is implemented by instances that count how often Submit had to
// retry because the queue was full.
type Retrier interface {
	Retries() int64
}

// System is one contender in the in-process comparison.
type System struct {
	Name   string
	Module string // module path whose version the report lists; "" for none
	Dedupe bool   // jobs carry distinct keys (Spec.Keys)
	Note   string // configuration, as the report states it
	Start  func(Spec) (Instance, error)
}

// InprocSystems returns the in-process contenders in report order. The
// first is the floor every ratio is taken against.
func InprocSystems() []System {
	s := []System{
		{Name: "channel", Note: "buffered chan int (buffer = capacity) drained by W goroutines; the floor", Start: startChan},
		{Name: "pond", Module: "github.com/alitto/pond/v2", Note: "pond.NewPool(W), Go(func) with a closure per job, unbounded queue (default), StopAndWait", Start: startPond},
		{Name: "ants", Module: "github.com/panjf2000/ants/v2", Note: "NewPoolWithFuncGeneric[int](W), Invoke blocks for a free worker (default), ReleaseTimeout", Start: startAnts},
		{Name: "workerpool", Module: "github.com/gammazero/workerpool", Note: "workerpool.New(W), Submit(func) with a closure per job, unbounded queue, StopWait", Start: startWorkerpool},
		{Name: "workqueue", Module: "k8s.io/client-go", Dedupe: true, Note: "workqueue.NewTypedWithConfig[string], Add/Get/Done with N distinct string keys, W Get loops, ShutDown", Start: startWorkqueue},
	}
	return append(s, queueSystems()...)
}

// LookupSystem returns the in-process system with the given name.
func LookupSystem(name string) (System, bool) {
	for _, s := range InprocSystems() {
		if s.Name == name {
			return s, true
		}
	}
	return System{}, false
}

// MakeKeys returns n distinct dedupe keys.
func MakeKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	return keys
}

// RepResult is one timed repetition.
type RepResult struct {
	Elapsed time.Duration
	Mallocs uint64 // runtime.MemStats.Mallocs delta
	Retries int64  // ErrQueueFull retries, where counted
}

// RunInproc runs spec through sys once and times it from the first Submit
// to the end of Drain. Building the system is not timed. When verify is
// set, Work counts jobs and a miscount is an error.
func RunInproc(sys System, spec Spec, verify bool) (RepResult, error) {
	var ran atomic.Int64
	if verify {
		spec.Work = func(int) { ran.Add(1) }
	} else if spec.Work == nil {
		spec.Work = func(int) {}
	}
	if sys.Dedupe && len(spec.Keys) < spec.N {
		return RepResult{}, fmt.Errorf("%s: needs %d keys, have %d", sys.Name, spec.N, len(spec.Keys))
	}
	runtime.GC()
	inst, err := sys.Start(spec)
	if err != nil {
		return RepResult{}, fmt.Errorf("%s: start: %w", sys.Name, err)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	var wg sync.WaitGroup
	for p := range spec.Producers {
		lo, hi := p*spec.N/spec.Producers, (p+1)*spec.N/spec.Producers
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				inst.Submit(i)
			}
		})
	}
	wg.Wait()
	err = inst.Drain()
	elapsed := time.Since(start)
	runtime.ReadMemStats(&m1)
	if err != nil {
		return RepResult{}, fmt.Errorf("%s: drain: %w", sys.Name, err)
	}
	r := RepResult{Elapsed: elapsed, Mallocs: m1.Mallocs - m0.Mallocs}
	if rt, ok := inst.(Retrier); ok {
		r.Retries = rt.Retries()
	}
	if verify && ran.Load() != int64(spec.N) {
		return r, fmt.Errorf("%s: ran %d of %d jobs", sys.Name, ran.Load(), spec.N)
	}
	return r, nil
}

type chanInst struct {
	ch chan int
	wg sync.WaitGroup
}

func startChan(spec Spec) (Instance, error) {
	c := &chanInst{ch: make(chan int, spec.Capacity)}
	work := spec.Work
	for range spec.Workers {
		c.wg.Go(func() {
			for i := range c.ch {
				work(i)
			}
		})
	}
	return c, nil
}

func (c *chanInst) Submit(i int) { c.ch <- i }
func (c *chanInst) Drain() error { close(c.ch); c.wg.Wait(); return nil }

type pondInst struct {
	pool pond.Pool
	work func(int)
}

func startPond(spec Spec) (Instance, error) {
	return &pondInst{pool: pond.NewPool(spec.Workers), work: spec.Work}, nil
}

func (p *pondInst) Submit(i int) {
	if err := p.pool.Go(func() { p.work(i) }); err != nil {
		panic("bench: pond: " + err.Error())
	}
}

func (p *pondInst) Drain() error { p.pool.StopAndWait(); return nil }

type antsInst struct {
	pool *ants.PoolWithFuncGeneric[int]
}

func startAnts(spec Spec) (Instance, error) {
	p, err := ants.NewPoolWithFuncGeneric(spec.Workers, spec.Work)
	if err != nil {
		return nil, err
	}
	return &antsInst{pool: p}, nil
}

func (a *antsInst) Submit(i int) {
	if err := a.pool.Invoke(i); err != nil {
		panic("bench: ants: " + err.Error())
	}
}

func (a *antsInst) Drain() error { return a.pool.ReleaseTimeout(time.Minute) }

type workerpoolInst struct {
	wp   *workerpool.WorkerPool
	work func(int)
}

func startWorkerpool(spec Spec) (Instance, error) {
	return &workerpoolInst{wp: workerpool.New(spec.Workers), work: spec.Work}, nil
}

func (w *workerpoolInst) Submit(i int) { w.wp.Submit(func() { w.work(i) }) }
func (w *workerpoolInst) Drain() error { w.wp.StopWait(); return nil }

type workqueueInst struct {
	q    *workqueue.Typed[string]
	keys []string
	wg   sync.WaitGroup
}

func startWorkqueue(spec Spec) (Instance, error) {
	w := &workqueueInst{
		q:    workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[string]{}),
		keys: spec.Keys,
	}
	work := spec.Work
	for range spec.Workers {
		w.wg.Go(func() {
			for {
				k, shutdown := w.q.Get()
				if shutdown {
					return
				}
				// The item is the key; a controller looks its payload up
				// elsewhere, so the body sees no index.
				work(0)
				w.q.Done(k)
			}
		})
	}
	return w, nil
}

func (w *workqueueInst) Submit(i int) { w.q.Add(w.keys[i]) }

// Drain relies on ShutDown letting Get hand out what is still queued before
// it reports shutdown.
func (w *workqueueInst) Drain() error {
	w.q.ShutDown()
	w.wg.Wait()
	if n := w.q.Len(); n != 0 {
		return errors.New("workqueue: items left after shutdown")
	}
	return nil
}

// coreModule is this library's module path.
const coreModule = "github.com/queuekit/queue"
