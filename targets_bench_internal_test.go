package queue

import (
	"testing"
	"time"
)

// BenchmarkTargetAdmitRelease is the target check a worker makes for each
// job that names a target, without the rest of the job's path: admission
// and release of its slot, one target, one goroutine.
func BenchmarkTargetAdmitRelease(b *testing.B) {
	ts := newTargets[int](defaultTargets(), systemClock{}, func(EventKind, string, error, time.Duration) {})
	now := time.Now()
	job := Job[int]{Target: "upstream"}
	for range b.N {
		if d, _, _ := ts.admitJob("upstream", now, &job); d != runJob {
			b.Fatal(d)
		}
		ts.release("upstream", now, false, &job)
	}
}
