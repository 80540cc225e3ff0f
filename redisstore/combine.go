package redisstore

import "sync"

// combiner merges concurrent calls into batches, one round trip each: the
// first caller leads and runs the batch of everything queued (up to max);
// callers arriving meanwhile queue up, and when the batch ends the head of
// the queue leads the next one. A lone caller runs its batch of one at
// once, so combining costs nothing without contention.
type combiner[Q, R any] struct {
	max  int
	mu   sync.Mutex
	q    []*combined[Q, R]
	busy bool // a batch is running or its lead was handed on
}

type combined[Q, R any] struct {
	req  Q
	res  R
	err  error
	done bool
	wake chan struct{} // one send: done, or lead the next batch
}

// do runs req in a batch through run, which must return one result per
// request (or an error for all of them).
func (c *combiner[Q, R]) do(req Q, run func([]Q) ([]R, error)) (R, error) {
	me := &combined[Q, R]{req: req, wake: make(chan struct{}, 1)}
	c.mu.Lock()
	c.q = append(c.q, me)
	if c.busy {
		c.mu.Unlock()
		<-me.wake
		c.mu.Lock()
		if me.done {
			c.mu.Unlock()
			return me.res, me.err
		}
		// Handed the lead: me is at the head of the queue.
	}
	c.busy = true
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
	if len(c.q) > 0 {
		c.q[0].wake <- struct{}{}
	} else {
		c.busy = false
	}
	c.mu.Unlock()
	return me.res, me.err
}

type shortBatchError struct{}

func (shortBatchError) Error() string {
	return "redisstore: script returned fewer results than requests"
}

var errShortBatch error = shortBatchError{}
