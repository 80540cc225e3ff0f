package storekit

import (
	"context"
	"fmt"
	"time"

	"github.com/queuekit/queue/queuetype"
)

// HookJob is what Config.EnqueueHook is given: the fields of a job a store
// enqueues on a path of its own, without its payload, as the caller wrote
// them (an empty Priority is the default one, a zero MaxAttempts the
// queue's). The hook may change Meta; the store then stores the job with
// the Meta the hook left.
type HookJob struct {
	Key         string         // Job.Key
	Group       string         // Job.Group
	Target      string         // Job.Target
	Priority    string         // Job.Priority
	RunAt       time.Time      // Job.RunAt
	MaxAttempts int            // Job.MaxAttempts
	Meta        queuetype.Meta // Job.Meta; the hook may change it
}

// EnqueueHook runs cfg.EnqueueHook, if any, for job and sets job.Meta to
// the Meta the hook left. Stores call it for a lone job they enqueue on a
// path of their own (a transactional insert) before they store it; on an
// error they must store nothing and return it.
func EnqueueHook[T any](ctx context.Context, cfg *Config, job *queuetype.Job[T]) error {
	if cfg.EnqueueHook == nil {
		return nil
	}
	h := HookJob{Key: job.Key, Group: job.Group, Target: job.Target, Priority: job.Priority,
		RunAt: job.RunAt, MaxAttempts: job.MaxAttempts, Meta: job.Meta}
	if err := cfg.EnqueueHook(ctx, &h); err != nil {
		return err
	}
	job.Meta = h.Meta
	return nil
}

// EnqueueHooks runs cfg.EnqueueHook, if any, for each of jobs, in order,
// and returns the jobs with the Meta the hooks left: a copy, so that the
// caller's slice is never changed, or jobs itself when the queue has no
// hook. Stores call it at the start of a batch enqueue; an error names
// the index of the job refused, and the store must then store none of the
// batch.
func EnqueueHooks[T any](ctx context.Context, cfg *Config, jobs []queuetype.Job[T]) ([]queuetype.Job[T], error) {
	if cfg.EnqueueHook == nil || len(jobs) == 0 {
		return jobs, nil
	}
	out := make([]queuetype.Job[T], len(jobs))
	copy(out, jobs)
	for i := range out {
		if err := EnqueueHook(ctx, cfg, &out[i]); err != nil {
			return nil, fmt.Errorf("job %d: %w", i, err)
		}
	}
	return out, nil
}
