package fleettest

import (
	"testing"

	"github.com/queuekit/queue"
)

// SlotRun is a run of the fair fleet concurrency tests
// (TestFleetConcurrencyFair): the process that ran it, and how many jobs
// of its target were still parked in that process as it started.
type SlotRun struct {
	Proc   string // the process that ran it
	Parked int    // its target's jobs parked in that process as it started
}

// Parked returns a function that reports how many jobs of target are
// parked in *q, once *q is set (0 before): a handler made before its queue
// reads it as it runs.
func Parked(q **queue.Queue[int], target string) func() int {
	return func() int {
		if *q == nil {
			return 0
		}
		st, _ := (*q).Target(target)
		return st.Parked
	}
}

// CheckFairSlots checks the runs of the fair fleet concurrency tests, in
// the order they started: each process ran at least a fifth of its own
// runs in the first half of all runs (an even share gives each about
// half; a process that waited for the others' backlogs ran none), and no
// process with jobs parked (as one of its runs started) waited for more
// than maxWait runs of the others in a row before its next run.
func CheckFairSlots(t *testing.T, runs []SlotRun, maxWait int) {
	t.Helper()
	total, early := map[string]int{}, map[string]int{}
	for i, r := range runs {
		total[r.Proc]++
		if i < len(runs)/2 {
			early[r.Proc]++
		}
	}
	waiting := map[string]bool{}
	streak, longest := map[string]int{}, map[string]int{}
	for _, r := range runs {
		waiting[r.Proc] = r.Parked > 0
		streak[r.Proc] = 0
		for o := range total {
			if o != r.Proc && waiting[o] {
				streak[o]++
				longest[o] = max(longest[o], streak[o])
			}
		}
	}
	t.Logf("runs by process: %v; in the first half: %v; longest wait with jobs parked, in runs of the others: %v", total, early, longest)
	for p, n := range total {
		if early[p]*5 < n {
			t.Errorf("process %s ran %d of its %d jobs in the first half of the runs: it waited for the others' backlogs", p, early[p], n)
		}
		if longest[p] > maxWait {
			t.Errorf("process %s, with jobs parked, waited for %d runs of the others in a row, more than %d", p, longest[p], maxWait)
		}
	}
}
