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
		want = min(max(depth, q.cfg.baseWorkers), q.cfg.maxWorkers)
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
	switch {
	case want > n:
		q.pool.add()
	case want < n:
		q.pool.retireOne()
	}
}
