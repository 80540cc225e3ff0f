package bench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue"
)

// queueSystems returns this library's two in-process contenders.
func queueSystems() []System {
	return []System{
		{Name: "queue", Module: coreModule, Note: "queue.New[int], WithCapacity(capacity, 0), WithWorkers(W, W); Enqueue retried with runtime.Gosched on ErrQueueFull; Stop drains", Start: startQueue(false)},
		{Name: "queue+keys", Module: coreModule, Dedupe: true, Note: "as queue, each job with a distinct Key (the same N strings workqueue gets)", Start: startQueue(true)},
	}
}

type queueInst struct {
	q       *queue.Queue[int]
	keys    []string
	n       int
	retries atomic.Int64
}

func newQueue(handler queue.Handler[int], workers, capacity int) (*queue.Queue[int], error) {
	q, err := queue.New(handler,
		queue.WithCapacity(capacity, 0),
		queue.WithWorkers(workers, workers),
	)
	if err != nil {
		return nil, err
	}
	if err := q.Start(context.Background()); err != nil {
		return nil, err
	}
	return q, nil
}

func startQueue(keyed bool) func(Spec) (Instance, error) {
	return func(spec Spec) (Instance, error) {
		work := spec.Work
		q, err := newQueue(func(_ context.Context, j queue.Job[int]) error {
			work(j.Payload)
			return nil
		}, spec.Workers, spec.Capacity)
		if err != nil {
			return nil, err
		}
		inst := &queueInst{q: q, n: spec.N}
		if keyed {
			inst.keys = spec.Keys
		}
		return inst, nil
	}
}

func (qi *queueInst) Submit(i int) {
	job := queue.Job[int]{Payload: i}
	if qi.keys != nil {
		job.Key = qi.keys[i]
	}
	for {
		err := qi.q.Enqueue(context.Background(), job)
		if err == nil {
			return
		}
		if !errors.Is(err, queue.ErrQueueFull) {
			panic("bench: queue: " + err.Error())
		}
		qi.retries.Add(1)
		runtime.Gosched()
	}
}

func (qi *queueInst) Drain() error {
	if err := qi.q.Stop(context.Background()); err != nil {
		return err
	}
	if st := qi.q.Stats(); int(st.Done) != qi.n {
		return fmt.Errorf("queue: Stats().Done = %d after Stop, want %d", st.Done, qi.n)
	}
	return nil
}

func (qi *queueInst) Retries() int64 { return qi.retries.Load() }

// queueSchedSystem is this library on the scheduled path.
func queueSchedSystem() SchedSystem {
	return SchedSystem{
		Name:   "queue",
		Module: coreModule,
		Note:   "EnqueueIn(job, d), int payload, no key; W workers; capacity as in-process",
		Start: func(spec SchedSpec, run func(int)) (SchedInstance, error) {
			q, err := newQueue(func(_ context.Context, j queue.Job[int]) error {
				run(j.Payload)
				return nil
			}, spec.Workers, spec.Capacity)
			if err != nil {
				return nil, err
			}
			return queueSched{q}, nil
		},
	}
}

type queueSched struct{ q *queue.Queue[int] }

func (s queueSched) After(i int, d time.Duration) error {
	return s.q.EnqueueIn(context.Background(), queue.Job[int]{Payload: i}, d)
}

func (s queueSched) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return s.q.Stop(ctx)
}
