package queue

// The engine's side of keys: a job's Key is its pending key (the store
// keeps the set: a key is held while a job with it is queued, scheduled
// or running, and by its unique window, Job.UniqueFor); WithCoalesce
// turns an Enqueue for a running key into the key's single rerun; Cancel
// and CancelMatch end the waiting jobs of a key, those parked behind a
// target included, so that a cancelled job never runs.

import (
	"context"
)

// Cancel cancels the queued or scheduled job with key (one parked for a
// busy target's slot included), or the coalesced rerun of a running one,
// so that it never runs. A running job is not interrupted. It reports how
// many jobs it cancelled, each counted as cancelled: 0 or 1, or 2 when a
// parked job had a rerun waiting, or on a durable store that held two
// jobs for the key (one rescued while its rerun waited).
func (q *Queue[T]) Cancel(ctx context.Context, key string) (int, error) {
	n, err := q.store.Cancel(ctx, key)
	n += q.cancelParked(func(k string) bool { return k == key }, false)
	q.cancelled(n, key)
	return n, err
}

// CancelMatch cancels every queued, scheduled or rerun job whose key
// satisfies match (for a forwarder: all jobs of one peer for one torrent,
// across upstreams) and reports how many. match must be fast and must not
// call the queue; it may see every pending key. If match panics, no
// further key is matched, the jobs already cancelled are counted, and the
// panic is raised again in the caller's goroutine.
func (q *Queue[T]) CancelMatch(ctx context.Context, match func(key string) bool) (int, error) {
	var panicked any
	safe := func(key string) (ok bool) {
		if panicked != nil {
			return false
		}
		defer func() {
			if v := recover(); v != nil {
				panicked, ok = v, false
			}
		}()
		return match(key)
	}
	n, err := q.store.CancelMatch(ctx, safe)
	n += q.cancelParked(safe, false)
	q.cancelled(n, "")
	if panicked != nil {
		panic(panicked)
	}
	return n, err
}

func (q *Queue[T]) cancelled(n int, key string) {
	if n == 0 {
		return
	}
	q.ctr.cancelled.Add(uint64(n))
	if q.obs.active {
		for range n {
			q.emit(EventCancelled, &Job[T]{Key: key}, nil, 0)
		}
	}
}

// cancelParked ends, as cancelled, the jobs parked for a target's slot
// (claimed from the store, not started) whose key satisfies match, and
// jobs without key if keyless, and reports how many; the caller counts
// them.
func (q *Queue[T]) cancelParked(match func(key string) bool, keyless bool) int {
	if q.targets.parked.Load() == 0 {
		return 0
	}
	jobs := q.targets.takeWaiting(func(j *Job[T]) bool {
		if k := j.Key; k != "" {
			return match(k)
		}
		return keyless
	})
	n := 0
	for i := range jobs {
		if q.endClaimed(&jobs[i], errCancelled) {
			n++
		}
	}
	return n
}
