package fleettest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// CheckPeriodicRuns checks the n runs recorded by the processes of a
// periodic fleet test (TestPeriodicTwoProcessesAcrossKill), each of a
// one-second schedule "tick" (key, attempt, worker): at least minPeriods
// periods ran, none was enqueued twice (the same attempt twice), and none
// is missing between the first and the last.
func CheckPeriodicRuns(t *testing.T, n, minPeriods int, run func(i int) (key string, attempt int, worker string)) {
	t.Helper()
	attempts := map[int64]map[int]string{}
	byWorker := map[string]int{}
	for i := range n {
		key, attempt, worker := run(i)
		stamp, ok := strings.CutPrefix(key, "periodic:tick:")
		if !ok {
			t.Fatalf("run of key %q, not a period of tick", key)
		}
		sec, err := strconv.ParseInt(stamp, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if attempts[sec] == nil {
			attempts[sec] = map[int]string{}
		}
		if w, dup := attempts[sec][attempt]; dup {
			t.Errorf("period %s enqueued twice: attempt %d ran in %s and %s", key, attempt, w, worker)
		}
		attempts[sec][attempt] = worker
		byWorker[worker]++
	}
	periods := slices.Sorted(maps.Keys(attempts))
	if len(periods) < minPeriods {
		t.Fatalf("%d periods ran, want %d at least", len(periods), minPeriods)
	}
	var missing []string
	for p := periods[0]; p <= periods[len(periods)-1]; p++ {
		if attempts[p] == nil {
			missing = append(missing, fmt.Sprint(p))
		}
	}
	if len(missing) > 0 {
		t.Errorf("periods not run: %v", missing)
	}
	t.Logf("%d periods, each run once, by worker: %v", len(periods), byWorker)
}
