package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Processors: how many CPUs the Go scheduler runs the forwarder's
// goroutines on (GOMAXPROCS), fitted to the load.
//
// An announce costs the forwarder a few tens of microseconds, most of
// them in the kernel (accept, read, write, close), and between announces
// the process goes idle. With more than one P, every wake-up from idle
// also sets the runtime looking for work for the idle Ps: a second
// thread woken to spin (wakep), finding nothing, and put back to sleep
// (stopm), the network poller checked from both. Paced at 90 % of
// opentracker's capacity on a 2-CPU machine, that was a sixth of the
// forwarder's CPU (the scheduler's findRunnable held 16.6 % of the
// samples with two Ps, 4.7 % with one), and one P answered each announce
// for 7–27 % less CPU than two (docs/benchmarks.md, "one P while one
// CPU serves the load"). opentracker, too, serves on one thread.
//
// So the forwarder runs on one P while one CPU serves its load, and
// doubles its Ps, up to the CPUs it may use, when the load keeps them
// busy: every procsWindow it reads the CPU time the process has used
// (getrusage), and
//   - after procsUpAfter windows in a row in which it used at least
//     procsHigh of its Ps' time, it doubles them;
//   - after procsDownAfter windows in a row in which it used at most
//     procsLow of one P fewer, it takes one away.
//
// The gap between the two keeps it from flapping: two Ps cost more CPU
// per announce than one, so a load that raised the count reads higher,
// not lower, once it has. A change of GOMAXPROCS stops the world for a
// moment (16–21 µs on an idle process on the benchmark machine); it
// happens at most once a window. An idle forwarder on one P reads once a
// second instead (procsIdleEvery), so that it is not woken ten times a
// second for nothing; a load that arrives then gets its second P within
// about 1.3 s.
//
// -procs N fixes the count instead, and a GOMAXPROCS environment
// variable, the Go runtime's own setting, is left alone: both are
// operators' choices. Setting GOMAXPROCS at run time turns off the
// runtime's own updates of it when the container's CPU limit changes;
// the ceiling is the count the runtime chose at start (the CPUs the
// process may use, within its CPU limit).

const (
	procsWindow    = 100 * time.Millisecond
	procsIdleEvery = time.Second // the window while idle on one P
	procsIdle      = 0.05        // CPUs' worth used below which it is idle
	procsHigh      = 0.85        // share of the Ps' time used that adds Ps
	procsLow       = 0.70        // share of one P fewer, at most, that removes one
	procsUpAfter   = 2           // windows in a row above procsHigh
	procsDownAfter = 10          // windows in a row below procsLow
)

// procsNow is the GOMAXPROCS the forwarder runs on, as last set; the
// raw accept loop reads it to wake a helper only when one can run beside
// it. procsStart is the count the runtime chose at start: the ceiling.
var (
	procsStart = runtime.GOMAXPROCS(0)
	procsNow   atomic.Int32
)

func init() { procsNow.Store(int32(procsStart)) }

// procsCeiling is the most Ps the forwarder runs on: the count the
// runtime chose, or a larger one fixed by -procs.
func procsCeiling() int { return max(procsStart, int(procsNow.Load())) }

// procsAuto is the -procs value that fits the count to the load.
const procsAuto = 0

// procsFlag is -procs: "auto" (procsAuto) or a fixed count.
type procsFlag struct{ n int }

func (p *procsFlag) String() string {
	if p == nil || p.n == procsAuto {
		return "auto"
	}
	return strconv.Itoa(p.n)
}

func (p *procsFlag) Set(v string) error {
	if v == "auto" {
		p.n = procsAuto
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return errors.New("want auto or a number of CPUs >= 1")
	}
	p.n = n
	return nil
}

// procsController fits GOMAXPROCS to the process's CPU use.
type procsController struct {
	max int // the most Ps it sets
	cur int // the Ps now
	// set sets GOMAXPROCS (runtime.GOMAXPROCS); cpu returns the CPU time
	// the process has used so far, or false where it cannot be read.
	set func(int)
	cpu func() (time.Duration, bool)
	// The last reading (lastAt zero before the first), and the windows
	// in a row above procsHigh and below procsLow.
	lastCPU   time.Duration
	lastAt    time.Time
	lastBusy  float64 // CPUs' worth used in the last window
	high, low int
	changes   atomic.Uint64 // times the count changed
	onChange  func(from, to int)
}

// startProcs applies -procs (n) and, for auto, fits the count to the
// load until stop is called. It returns the controller (nil when the
// count is fixed: by n, by the GOMAXPROCS variable, or because the
// process may use one CPU only or its CPU time cannot be read), a
// description for the log, and stop, which ends the fitting and gives
// the runtime back the count it started with.
func startProcs(n int, onChange func(from, to int)) (pc *procsController, mode string, stop func()) {
	restore := func() {
		if int(procsNow.Load()) != procsStart {
			setProcs(procsStart)
		}
	}
	switch {
	case n != procsAuto:
		setProcs(n)
		return nil, fmt.Sprintf("fixed at %d (-procs)", n), restore
	case os.Getenv("GOMAXPROCS") != "":
		return nil, fmt.Sprintf("fixed at %d (GOMAXPROCS)", procsStart), func() {}
	case procsStart < 2:
		return nil, "fixed at 1 (one CPU)", func() {}
	}
	if _, ok := processCPU(); !ok {
		return nil, fmt.Sprintf("fixed at %d (no process CPU time here)", procsStart), func() {}
	}
	pc = newProcsController(procsStart, setProcs, processCPU)
	pc.onChange = onChange
	pc.apply(1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pc.run(ctx)
	}()
	return pc, fmt.Sprintf("auto, 1 to %d", procsStart), func() {
		cancel()
		<-done
		restore()
	}
}

func setProcs(n int) {
	runtime.GOMAXPROCS(n)
	procsNow.Store(int32(n))
}

func newProcsController(max int, set func(int), cpu func() (time.Duration, bool)) *procsController {
	return &procsController{max: max, cur: max, set: set, cpu: cpu}
}

// apply sets the count to n.
func (pc *procsController) apply(n int) {
	if n == pc.cur {
		return
	}
	from := pc.cur
	pc.cur = n
	pc.set(n)
	pc.changes.Add(1)
	if pc.onChange != nil {
		pc.onChange(from, n)
	}
}

func (pc *procsController) run(ctx context.Context) {
	t := time.NewTimer(procsWindow)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			if c, ok := pc.cpu(); ok {
				pc.observe(now, c)
			}
			t.Reset(pc.every())
		}
	}
}

// every is how long the next window lasts: procsIdleEvery while the
// forwarder idles on one P, procsWindow otherwise.
func (pc *procsController) every() time.Duration {
	if pc.cur == 1 && !pc.lastAt.IsZero() && pc.lastBusy < procsIdle {
		return procsIdleEvery
	}
	return procsWindow
}

// observe takes a reading of the process's CPU time c at now and moves
// the count when the windows call for it.
func (pc *procsController) observe(now time.Time, c time.Duration) {
	if pc.lastAt.IsZero() {
		pc.lastCPU, pc.lastAt = c, now
		return
	}
	wall := now.Sub(pc.lastAt)
	used := c - pc.lastCPU
	pc.lastCPU, pc.lastAt = c, now
	if wall <= 0 {
		return
	}
	busy := float64(used) / float64(wall) // CPUs' worth used
	pc.lastBusy = busy
	if busy >= procsHigh*float64(pc.cur) && pc.cur < pc.max {
		pc.high++
	} else {
		pc.high = 0
	}
	if pc.cur > 1 && busy <= procsLow*float64(pc.cur-1) {
		pc.low++
	} else {
		pc.low = 0
	}
	switch {
	case pc.high >= procsUpAfter:
		pc.apply(min(pc.max, 2*pc.cur))
		pc.high, pc.low = 0, 0
	case pc.low >= procsDownAfter:
		pc.apply(pc.cur - 1)
		pc.high, pc.low = 0, 0
	}
}

// registerProcsMetrics registers the count of Ps and, with a controller,
// its changes.
func registerProcsMetrics(reg prometheus.Registerer, pc *procsController) error {
	cs := []prometheus.Collector{prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "forwarder_procs",
		Help: "CPUs the Go scheduler runs the forwarder's goroutines on (GOMAXPROCS) now: -procs auto fits it to the load.",
	}, func() float64 { return float64(procsNow.Load()) })}
	if pc != nil {
		cs = append(cs, prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "forwarder_procs_changes_total",
			Help: "Times -procs auto changed the count of CPUs (forwarder_procs).",
		}, func() float64 { return float64(pc.changes.Load()) }))
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
