package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// Task kinds.
const (
	KindInproc  = "inproc"  // in-process throughput
	KindBurst   = "burst"   // lateness, all jobs scheduled at once
	KindPaced   = "paced"   // lateness, jobs scheduled at a steady rate
	KindHeld    = "held"    // schedule rate and heap of jobs held an hour
	KindDurable = "durable" // a durable engine's suite
)

// Task is one measurement case. It is the unit that runs in a child
// process, so it is plain data.
type Task struct {
	Kind      string
	System    string
	N         int
	Producers int            `json:",omitempty"`
	Workers   int            `json:",omitempty"`
	Capacity  int            `json:",omitempty"`
	Reps      int            `json:",omitempty"` // timed repetitions after one warm-up
	Verify    bool           `json:",omitempty"` // count jobs and fail on a miscount
	Rate      float64        `json:",omitempty"` // jobs/s for KindPaced
	Spread    time.Duration  `json:",omitempty"`
	Seed      uint64         `json:",omitempty"`
	Durable   *DurableConfig `json:",omitempty"`
}

func (t Task) String() string {
	switch t.Kind {
	case KindInproc:
		return fmt.Sprintf("%s %s N=%d P=%d W=%d", t.Kind, t.System, t.N, t.Producers, t.Workers)
	case KindDurable:
		return fmt.Sprintf("%s %s", t.Kind, t.System)
	default:
		return fmt.Sprintf("%s %s N=%d", t.Kind, t.System, t.N)
	}
}

// TaskResult is what a Task measured.
type TaskResult struct {
	Task       Task
	Reps       []RepResult     `json:",omitempty"`
	Lateness   *Lateness       `json:",omitempty"`
	Held       *Held           `json:",omitempty"`
	Durable    []DurableResult `json:",omitempty"`
	PeakRSSKiB int64           `json:",omitempty"`
	Child      bool            `json:",omitempty"` // ran in a process of its own
	Err        string          `json:",omitempty"`
}

// RunTask runs t in this process.
func RunTask(t Task) TaskResult {
	res := TaskResult{Task: t}
	var err error
	switch t.Kind {
	case KindInproc:
		res.Reps, err = runInprocTask(t)
	case KindBurst, KindPaced:
		var l Lateness
		l, err = runLatenessTask(t)
		res.Lateness = &l
	case KindHeld:
		var h Held
		h, err = runHeldTask(t)
		res.Held = &h
	case KindDurable:
		res.Durable, err = RunDurable(t.System, *t.Durable)
	default:
		err = fmt.Errorf("unknown task kind %q", t.Kind)
	}
	if err != nil {
		res.Err = err.Error()
	}
	res.PeakRSSKiB = peakRSSKiB()
	return res
}

// keys is built once per process, the first time a dedupe system needs it.
var keys []string

func runInprocTask(t Task) ([]RepResult, error) {
	sys, ok := LookupSystem(t.System)
	if !ok {
		return nil, fmt.Errorf("unknown system %q", t.System)
	}
	spec := Spec{N: t.N, Producers: t.Producers, Workers: t.Workers, Capacity: t.Capacity}
	if sys.Dedupe {
		if len(keys) < t.N {
			keys = MakeKeys(t.N)
		}
		spec.Keys = keys
	}
	if _, err := RunInproc(sys, spec, t.Verify); err != nil { // warm-up
		return nil, err
	}
	reps := make([]RepResult, 0, t.Reps)
	for range t.Reps {
		r, err := RunInproc(sys, spec, t.Verify)
		if err != nil {
			return reps, err
		}
		reps = append(reps, r)
	}
	return reps, nil
}

func schedSpec(t Task) (SchedSystem, SchedSpec, error) {
	sys, ok := LookupSchedSystem(t.System)
	if !ok || sys.Start == nil {
		return sys, SchedSpec{}, fmt.Errorf("unknown scheduled-path system %q", t.System)
	}
	return sys, SchedSpec{Workers: t.Workers, Capacity: t.Capacity}, nil
}

func runLatenessTask(t Task) (Lateness, error) {
	sys, spec, err := schedSpec(t)
	if err != nil {
		return Lateness{}, err
	}
	rate := 0.0
	if t.Kind == KindPaced {
		rate = t.Rate
	}
	// A small burst first warms up the system's code paths and heap.
	if _, err := RunLateness(sys, spec, min(t.N, 5000), 10*time.Millisecond, 0, t.Seed+1); err != nil {
		return Lateness{}, err
	}
	return RunLateness(sys, spec, t.N, t.Spread, rate, t.Seed)
}

func runHeldTask(t Task) (Held, error) {
	sys, spec, err := schedSpec(t)
	if err != nil {
		return Held{}, err
	}
	return RunHeld(sys, spec, t.N)
}

// Runner runs Tasks, either here or in a child process per Task.
type Runner struct {
	// Exe, when set, is re-executed with ChildFlag once per Task, the Task
	// as JSON on its standard input and the TaskResult as JSON on its
	// standard output; peak RSS is then the Task's own.
	Exe string
	// Stderr receives the children's standard error.
	Stderr io.Writer
}

// ChildFlag is the flag with which Runner re-executes Exe.
const ChildFlag = "-child"

// Do runs t.
func (r Runner) Do(t Task) TaskResult {
	if r.Exe == "" {
		return RunTask(t)
	}
	in, err := json.Marshal(t)
	if err != nil {
		return TaskResult{Task: t, Err: err.Error()}
	}
	cmd := exec.Command(r.Exe, ChildFlag)
	cmd.Stdin = bytes.NewReader(in)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = r.Stderr
	runErr := cmd.Run()
	var res TaskResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		if runErr == nil {
			runErr = err
		}
		return TaskResult{Task: t, Err: fmt.Sprintf("child: %v", runErr)}
	}
	res.Child = true
	return res
}

// ServeChild runs the one Task on standard input and writes its result to
// standard output; qbench calls it when started with ChildFlag.
func ServeChild() error {
	var t Task
	if err := json.NewDecoder(os.Stdin).Decode(&t); err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(RunTask(t))
}
