package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// Complete ends a claimed job as done; see storekit.Store. If Redis is
// unreachable the completion is kept and written when it answers again.
func (s *Store[T]) Complete(ctx context.Context, job queue.Job[T]) error {
	return s.finish(ctx, job, "done", "")
}

// Dead ends a claimed job as dead-lettered with cause; see storekit.Store.
// The job stays in the dead set for the retention (WithDeadRetention,
// WithDeadMax).
func (s *Store[T]) Dead(ctx context.Context, job queue.Job[T], cause error) error {
	return s.finish(ctx, job, "dead", errString(cause))
}

// errString is err's text as every store shows it (core.ErrorText):
// NUL bytes and bytes that are not UTF-8 escaped.
func errString(err error) string { return storekit.ErrorText(err) }

func (s *Store[T]) finish(ctx context.Context, job queue.Job[T], mode, cause string) error {
	c, err := s.takeClaim(job.ID, job.Attempt)
	if err != nil {
		return err
	}
	s.forgetCancel(job.ID)
	if c.fb != nil {
		s.fbMu.Lock()
		s.fb.end(c.fb)
		s.fbReady.Store(int64(s.fb.readyLen()))
		s.fbMu.Unlock()
		s.signal()
		return nil
	}
	return s.runOp(ctx, c.sh, settleOp{id: job.ID, lease: c.lease, mode: mode, err: cause, key: job.Key})
}

// Retry schedules a claimed job to run again at at; see storekit.Store. If a
// coalesced rerun of its key is waiting, the job is dropped in favour of
// it and Retry returns storekit.ErrSuperseded.
func (s *Store[T]) Retry(ctx context.Context, job queue.Job[T], at time.Time, cause error) error {
	return s.again(ctx, job, at, "retry", errString(cause))
}

// Defer puts a claimed job back to run at at without using an attempt,
// recording cause (a downstream's "retry in" reason) when it is given. As
// with Retry, a coalesced rerun of its key supersedes it: the job is
// dropped, the rerun becomes the key's job, and Defer returns
// storekit.ErrSuperseded.
func (s *Store[T]) Defer(ctx context.Context, job queue.Job[T], at time.Time, cause error) error {
	return s.again(ctx, job, at, "defer", errString(cause))
}

var _ storekit.HoldStore[int] = (*Store[int])(nil)

// Hold implements queue.HoldStore: Defer without a cause, with the job
// marked held for its target until it is claimed again. A job the
// in-memory fallback holds during an outage is deferred plainly.
func (s *Store[T]) Hold(ctx context.Context, job queue.Job[T], at time.Time) error {
	return s.again(ctx, job, at, "hold", "")
}

// ReleaseHeld implements queue.HoldStore: on every shard, the jobs held
// for target that are not yet due become due now, which wakes a waiting
// worker in every process.
func (s *Store[T]) ReleaseHeld(ctx context.Context, target string) (int, error) {
	n := 0
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			continue // its jobs run when their hold ends
		}
		r, err := sh.run(ctx, sh.client, scriptReleaseHeld, nil, s.now(), target).Int()
		if err != nil {
			if isOutage(ctx, err) {
				s.markDown(sh, err)
			}
			return n, fmt.Errorf("redisstore: releasing held jobs of target %q: %w", target, err)
		}
		n += r
	}
	if n > 0 {
		s.signal()
	}
	return n, nil
}

func (s *Store[T]) again(ctx context.Context, job queue.Job[T], at time.Time, mode, cause string) error {
	c, err := s.takeClaim(job.ID, job.Attempt)
	if err != nil {
		return err
	}
	s.forgetCancel(job.ID)
	due := dueMs(at, s.cfg.Clock.Now())
	if c.fb != nil {
		s.fbMu.Lock()
		kept := s.fb.again(c.fb, due, mode == "retry", cause)
		s.fbReady.Store(int64(s.fb.readyLen()))
		s.fbMu.Unlock()
		s.signal()
		if !kept {
			return storekit.ErrSuperseded
		}
		return nil
	}
	err = s.runOp(ctx, c.sh, settleOp{id: job.ID, lease: c.lease, mode: mode, at: due, err: cause, key: job.Key})
	if err == nil && due > s.now() {
		s.noteDue(c.sh, due) // scheduled: see due.go
	}
	return err
}

// settleOp ends one claimed job (see scriptSettle). One that fails for an
// outage is kept and run again when Redis answers.
type settleOp struct {
	sh    *shard
	id    int64
	lease string
	mode  string // done, dead, retry, defer, hold
	at    int64
	err   string
	key   string
}

// settle runs op in a combined settle script call and returns its status.
func (s *Store[T]) settle(sh *shard, op settleOp) (string, error) {
	return sh.settles.do(op, func(ops []settleOp) ([]string, error) {
		return s.runSettle(context.Background(), sh, ops)
	})
}

func (s *Store[T]) runSettle(ctx context.Context, sh *shard, ops []settleOp) ([]string, error) {
	now := s.now()
	// A job that may go to a ready list's tail (a retry or defer due now,
	// the rerun of a job's key) must go after the inbox's jobs: the script
	// drains the inbox first. Plain jobs done or dead need no drain.
	drain := 0
	for _, op := range ops {
		if op.key != "" || (op.mode != "done" && op.mode != "dead" && op.at <= now) {
			drain = 1
		}
	}
	args := make([]any, 0, 2+5*len(ops))
	args = append(args, now, drain)
	for _, op := range ops {
		args = append(args, op.id, op.lease, op.mode, op.at, op.err)
	}
	res, err := sh.run(ctx, sh.client, scriptSettle, nil, args...).Slice()
	if err != nil {
		return nil, err
	}
	sh.ready.Store(replyInt(res[0]))
	out := make([]string, 0, len(ops))
	for _, v := range res[1:] {
		out = append(out, replyString(v))
	}
	return out, nil
}

func (s *Store[T]) runOp(ctx context.Context, sh *shard, op settleOp) error {
	op.sh = sh
	if !sh.healthy.Load() {
		s.keepOp(op)
		return nil
	}
	st, err := s.settle(sh, op)
	if err != nil {
		if !isOutage(ctx, err) {
			return err
		}
		s.markDown(sh, err)
		s.keepOp(op)
		return nil
	}
	s.signal()
	switch st {
	case "superseded":
		return storekit.ErrSuperseded
	case "lost", "gone":
		// takeClaim hands each claim out once, so a job already ended
		// ('gone': rescued, then dead-lettered, cancelled or completed by
		// another run) lost its lease to that end: the outcome was not
		// recorded, and must not look as if it was.
		return fmt.Errorf("%w: job %d", ErrLeaseLost, op.id)
	}
	return nil
}

func (s *Store[T]) keepOp(op settleOp) {
	s.claimMu.Lock()
	s.pending = append(s.pending, op)
	s.claimMu.Unlock()
}
