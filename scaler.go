package queue

import "context"

// scaler resizes the pool every scale interval.
func (q *Queue[T]) scaler(ctx context.Context) {
	t := q.clock.NewTimer(q.cfg.scaleInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		q.scale()
		q.obs.tick()
		if q.adm.used.Load() {
			q.stampNow() // the coarse clock of the admin API's running jobs
		}
		t.Reset(q.cfg.scaleInterval)
	}
}

// scale adds or retires at most one worker.
func (q *Queue[T]) scale() {
	depth := q.depth()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state.Load() != stateRunning {
		return
	}
	n := len(q.pool.workers)
	var want int
	switch q.cfg.scalePolicy {
	case ScaleByDepth:
		want = min(max(q.depthShare(depth), q.cfg.baseWorkers), q.cfg.maxWorkers)
	default:
		switch {
		case atOrAbove(depth, q.cfg.capacity, q.cfg.scaleUp):
			want = n + 1
		case !atOrAbove(depth, q.cfg.capacity, q.cfg.scaleDown):
			want = n - 1
		default:
			want = n
		}
		want = min(max(want, q.cfg.baseWorkers), q.cfg.maxWorkers)
	}
	// No worker above the concurrency limit: it would only wait. The
	// base workers stay, waiting, for the limit to rise.
	want = min(want, max(q.gate.concurrency(), q.cfg.baseWorkers))
	switch {
	case want > n:
		q.pool.add()
	case want < n:
		q.pool.retireOne()
	}
}

// depthShare is this process's share of depth under ScaleByDepth: the
// ready jobs divided by the live processes of the queue, rounded up, when
// the store is shared (FleetSizer); depth itself otherwise. So a fleet of
// n processes on one store asks for about depth workers in all, not n ×
// depth (each still within its own base and max).
func (q *Queue[T]) depthShare(depth int) int {
	if q.fleet == nil {
		return depth
	}
	n := max(q.fleet.Processes(), 1)
	return (depth + n - 1) / n
}
