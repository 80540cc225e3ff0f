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
		if d, _, _ := ts.admitJob("upstream", now, &job, false); d != runJob {
			b.Fatal(d)
		}
		ts.release("upstream", now, false, &job, false)
	}
}

// BenchmarkTargetParkHandoff is the path of a job that waits for a busy
// target: with a limit of one, a second job parks, and the first's
// release hands it the slot; one goroutine.
func BenchmarkTargetParkHandoff(b *testing.B) {
	cfg := defaultTargets()
	cfg.concurrency = 1
	ts := newTargets[int](cfg, systemClock{}, func(EventKind, string, error, time.Duration) {})
	now := time.Now()
	running, next := Job[int]{Target: "upstream"}, Job[int]{Target: "upstream", Payload: 1}
	b.ReportAllocs()
	for range b.N {
		if d, _, _ := ts.admitJob("upstream", now, &running, false); d != runJob {
			b.Fatal(d)
		}
		if d, at, _ := ts.admitJob("upstream", now, &next, false); d != waitJob || !at.IsZero() {
			b.Fatal(d, at)
		}
		if h := ts.release("upstream", now, false, &running, false); !h.ok || running.Payload != 1 {
			b.Fatal("no handoff")
		}
		ts.release("upstream", now, false, &running, false)
		running.Payload = 0
	}
}
