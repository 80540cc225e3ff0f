package redisstore

import "sync"

// combiner merges concurrent calls into batches, one round trip each: the
// first caller leads and runs the batch of everything queued (up to max);
// callers arriving meanwhile queue up, and when the batch ends the head of
// the queue leads the next one. A lone caller runs its batch of one at
// once, without allocating, so combining costs nothing without contention.
type combiner[Q, R any] struct {
	max  int
	mu   sync.Mutex
	q    []*combined[Q, R]
	busy bool // a batch is running or its lead was handed on
	one  [1]Q // a lone caller's batch; used by the lead only
}

type combined[Q, R any] struct {
	req  Q
	res  R
	err  error
	done bool
	wake chan struct{} // one send: done, or lead the next batch
}

// do runs req in a batch through run, which must return one result per
// request (or an error for all of them). run must not keep its argument.
func (c *combiner[Q, R]) do(req Q, run func([]Q) ([]R, error)) (R, error) {
	c.mu.Lock()
	if !c.busy {
		// A lone caller (the queue is empty when nothing runs) runs its
		// batch of one without queueing: no allocation.
		c.busy = true
		c.mu.Unlock()
		c.one[0] = req
		res, err := run(c.one[:])
		var zero Q
		c.one[0] = zero
		var r R
		if err == nil && len(res) == 0 {
			err = errShortBatch
		} else if err == nil {
			r = res[0]
		}
		c.mu.Lock()
		c.handOn()
		c.mu.Unlock()
		return r, err
	}
	me := &combined[Q, R]{req: req, wake: make(chan struct{}, 1)}
	c.q = append(c.q, me)
	c.mu.Unlock()
	<-me.wake
	c.mu.Lock()
	if me.done {
		c.mu.Unlock()
		return me.res, me.err
	}
	// Handed the lead: me is at the head of the queue, and c stays busy.
	n := min(len(c.q), max(c.max, 1))
	batch := make([]*combined[Q, R], n)
	copy(batch, c.q)
	c.q = append(c.q[:0:0], c.q[n:]...)
	c.mu.Unlock()

	reqs := make([]Q, n)
	for i, b := range batch {
		reqs[i] = b.req
	}
	res, err := run(reqs)

	c.mu.Lock()
	for i, b := range batch {
		if err == nil && i < len(res) {
			b.res = res[i]
		} else if err == nil {
			b.err = errShortBatch
		} else {
			b.err = err
		}
		b.done = true
		if b != me {
			b.wake <- struct{}{}
		}
	}
	c.handOn()
	c.mu.Unlock()
	return me.res, me.err
}

// handOn ends a batch, with c.mu held: the head of the queue leads the
// next one.
func (c *combiner[Q, R]) handOn() {
	if len(c.q) > 0 {
		c.q[0].wake <- struct{}{}
	} else {
		c.busy = false
	}
}

type shortBatchError struct{}

func (shortBatchError) Error() string {
	return "redisstore: script returned fewer results than requests"
}

var errShortBatch error = shortBatchError{}
