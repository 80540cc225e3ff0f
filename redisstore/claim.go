package redisstore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// Claim waits for the next ready job in priority order; see storekit.Store.
// Under weighted dispatch the claim script takes, for each claim, the
// priority whose turn it is in this process's weighted order (falling
// back to priority order when it has no ready job), and with sharded
// priorities Claim starts from that priority's shard.
// It tries each reachable shard in priority order, and before each the
// fallback's jobs of higher priorities than the shard's, then the rest of
// the fallback. Waiting costs no polling: Claim sleeps until a wake-up token
// arrives on a shard's wake list (pushed by every script that makes a job
// ready), until the next scheduled job is due, or at most PollInterval.
// A job whose payload cannot be decoded is dead-lettered with the error
// and Claim goes on.
func (s *Store[T]) Claim(ctx context.Context) (queue.Job[T], error) {
	var zero queue.Job[T]
	select {
	case <-s.started:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	s.waiting.Add(1)
	defer s.waiting.Add(-1)
	for {
		if err := ctx.Err(); err != nil {
			return zero, err
		}
		now := s.now()
		if s.isDrained() {
			if j, ok := s.claimFallback(now, math.MaxInt); ok {
				return j, nil
			}
			return zero, storekit.ErrDrained
		}
		next := int64(math.MaxInt64)
		first := 0 // strict: shards in priority order
		if c := s.cycle; c != nil {
			// Weighted across shards: start from the shard of the
			// priority whose turn it is (each shard's script then
			// weighs its own priorities).
			first = s.byPrio[c[(s.tick.Add(1)-1)%uint64(len(c))]].index
		}
		for k := range s.shards {
			sh := s.shards[(first+k)%len(s.shards)]
			// The fallback's jobs of higher priorities come first, not
			// all of them: with priority sharding it holds the jobs of
			// a shard that is down, which must not delay the higher
			// priorities of a shard that is up.
			if j, ok := s.claimFallback(now, sh.top); ok {
				return j, nil
			}
			if !sh.healthy.Load() {
				continue
			}
			j, due, ok, err := s.claimShard(sh, now)
			if err != nil {
				if !isOutage(ctx, err) {
					return zero, err
				}
				s.markDown(sh, err)
				continue
			}
			if ok {
				return j, nil
			}
			next = min(next, due)
		}
		if j, ok := s.claimFallback(now, math.MaxInt); ok {
			return j, nil
		}
		s.fbMu.Lock()
		next = min(next, s.fb.nextDue())
		s.fbMu.Unlock()
		// What another Claim here learnt since (see due.go).
		next = min(next, s.learntDue())
		if err := s.wait(ctx, next); err != nil {
			return zero, err
		}
	}
}

// wait sleeps until a wake-up, the due time next (ms), the poll interval,
// drain or ctx.
func (s *Store[T]) wait(ctx context.Context, next int64) error {
	var due <-chan time.Time
	if next != math.MaxInt64 {
		d := time.Duration(next-s.now()) * time.Millisecond
		if d <= 0 {
			return nil
		}
		t := s.cfg.Clock.NewTimer(d)
		defer t.Stop()
		due = t.C()
	}
	poll := time.NewTimer(s.o.PollInterval)
	defer poll.Stop()
	// Asleep: the wake listeners take wake-up tokens for this Claim (and
	// hand back those that come when no Claim here sleeps, see listen).
	s.sleeping.Add(1)
	defer s.sleeping.Add(-1)
	for _, sh := range s.shards {
		select {
		case sh.hasWaiter <- struct{}{}:
		default:
		}
	}
	select {
	case <-s.notify:
	case <-due:
	case <-poll.C:
	case <-s.drained:
	case <-s.closing:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// claimFallback claims the fallback's first ready job in priority order
// among the priorities with an index below below.
func (s *Store[T]) claimFallback(now int64, below int) (queue.Job[T], bool) {
	s.fbMu.Lock()
	fj, ok := s.fb.claim(below)
	s.fbReady.Store(int64(s.fb.readyLen()))
	if ok {
		s.claimMu.Lock()
		s.claims[fj.job.ID] = &claimRec[T]{sh: fj.sh, fb: fj, attempt: fj.job.Attempt, older: s.claims[fj.job.ID]}
		s.claimMu.Unlock()
	}
	evs := s.fb.takeEvents()
	s.fbMu.Unlock()
	s.reportFallback(evs, now)
	if !ok {
		return queue.Job[T]{}, false
	}
	return fj.job, true
}

// reportFallback reports the events of the fallback's in-memory store,
// stamped now (ms).
func (s *Store[T]) reportFallback(evs []queue.Event, now int64) {
	for _, ev := range evs {
		if ev.Time.IsZero() {
			ev.Time = time.UnixMilli(now)
		}
		s.cfg.Report(ev)
	}
}

// claimShard claims a job from sh. Concurrent claims on a shard are
// combined into one script call. Without a job it returns the shard's next
// due time (ms, MaxInt64 for none).
func (s *Store[T]) claimShard(sh *shard, now int64) (queue.Job[T], int64, bool, error) {
	for {
		r, err := sh.claims.do(now, func(reqs []int64) ([]claimRes, error) {
			return s.runClaim(sh, reqs[0], len(reqs))
		})
		if err != nil {
			return queue.Job[T]{}, 0, false, err
		}
		if r.job == nil {
			if r.ready > 0 && r.more {
				continue // the lists began with cancelled jobs; look again
			}
			return queue.Job[T]{}, r.next, false, nil
		}
		j, lease, perr := s.decodeClaim(r.job)
		if perr != nil {
			s.deadUndecodable(sh, j, lease, perr, now)
			now = s.now()
			continue
		}
		s.claimMu.Lock()
		s.claims[j.ID] = &claimRec[T]{sh: sh, lease: lease, attempt: j.Attempt, older: s.claims[j.ID]}
		s.claimMu.Unlock()
		if r.ready > 0 {
			s.signal() // let another waiter take the next one
		}
		return j, 0, true, nil
	}
}

// claimRes is one claimer's share of a combined claim.
type claimRes struct {
	job   []any // the job's 10 reply fields, nil for none
	ready int64 // ready jobs left
	next  int64 // next due time, ms
	more  bool  // the script stopped early (cancelled jobs); look again
}

// claimFields is the number of reply fields per claimed job.
const claimFields = 11

// runClaim claims up to n jobs in one script call.
func (s *Store[T]) runClaim(sh *shard, now int64, n int) ([]claimRes, error) {
	prefs := ""
	if c := sh.cycle; c != nil {
		// The priority each of the n claims tries first, in the
		// shard's weighted order.
		b := make([]byte, n)
		t := sh.tick.Add(uint64(n)) - uint64(n)
		for i := range b {
			b[i] = c[(t+uint64(i))%uint64(len(c))]
		}
		prefs = string(b)
	}
	res, err := sh.run(context.Background(), sh.client, scriptClaim, nil, now, s.leaseOffset(), s.owner,
		promoteBatch, s.cfg.Capacity, s.cfg.RequeueDelay.Milliseconds(), n, prefs).Slice()
	if err != nil {
		return nil, err
	}
	ready := replyInt(res[0])
	sh.ready.Store(ready)
	s.reportRequeued(replySlice(res[1]), now)
	next := dueReply(res[2])
	jobs := res[3:]
	out := make([]claimRes, n)
	if len(jobs) == 1 && replyString(jobs[0]) == "paused" {
		// Paused (admin Pause): nothing to claim until Resume, whose
		// wake-up tokens end the wait. No due time wakes a Claim (nor a
		// hand-on, see due.go) meanwhile.
		s.learnDue(sh, noDue)
		for i := range out {
			out[i] = claimRes{ready: ready, next: next}
		}
		return out, nil
	}
	s.learnDue(sh, next)
	for i := range out {
		out[i] = claimRes{ready: ready, next: next}
		if (i+1)*claimFields <= len(jobs) {
			out[i].job = jobs[i*claimFields : (i+1)*claimFields]
		} else {
			out[i].more = true
		}
	}
	if len(jobs)/claimFields == n {
		for i := range out {
			out[i].more = false
		}
	}
	return out, nil
}

// decodeClaim builds the job from the claim script's reply: id, key,
// group, target, label, runAt, attempt, max, lease, payload, metadata. A
// payload or metadata that does not decode is an error (the job is
// dead-lettered with it).
func (s *Store[T]) decodeClaim(r []any) (queue.Job[T], string, error) {
	j := queue.Job[T]{
		ID: replyInt(r[0]), Key: replyString(r[1]), Group: replyString(r[2]),
		Target: replyString(r[3]), Priority: replyString(r[4]),
		Attempt: int(replyInt(r[6])), MaxAttempts: int(replyInt(r[7])),
	}
	if at := replyInt(r[5]); at > 0 {
		j.RunAt = time.UnixMilli(at)
	}
	lease := replyString(r[8])
	md, err := jobMeta(replyString(r[10]))
	if err != nil {
		return j, lease, fmt.Errorf("redisstore: job %d: %w", j.ID, err)
	}
	j.Meta = md
	if err := s.o.Decode(j.ID, []byte(replyString(r[9])), &j.Payload); err != nil {
		return j, lease, err
	}
	return j, lease, nil
}

func (s *Store[T]) deadUndecodable(sh *shard, j queue.Job[T], lease string, cause error, now int64) {
	st, err := s.settle(sh, settleOp{id: j.ID, lease: lease, mode: "dead", err: errString(cause), key: j.Key})
	if err != nil || st != "ok" {
		s.cfg.Logger.Error("redisstore: dead-lettering undecodable job", "id", j.ID,
			"status", st, "err", err)
		return
	}
	s.cfg.Logger.Error("redisstore: dead-lettered undecodable job", "id", j.ID, "err", cause)
	s.cfg.Report(queue.Event{Kind: queue.EventDead, Time: time.UnixMilli(now), JobID: j.ID, Key: j.Key,
		Target: j.Target, Priority: j.Priority, Attempt: j.Attempt, Err: cause})
}

// reportRequeued reports jobs that promotion found no room for: flat
// tuples of id, key, target, label, attempt.
func (s *Store[T]) reportRequeued(r []any, now int64) {
	for i := 0; i+4 < len(r); i += 5 {
		s.cfg.Report(queue.Event{Kind: queue.EventRequeued, Time: time.UnixMilli(now),
			JobID: replyInt(r[i]), Key: replyString(r[i+1]), Target: replyString(r[i+2]),
			Priority: replyString(r[i+3]), Attempt: int(replyInt(r[i+4])), Delay: s.cfg.RequeueDelay})
	}
}

// takeClaim removes and returns this process's record of the claim of job
// id that returned attempt.
func (s *Store[T]) takeClaim(id int64, attempt int) (*claimRec[T], error) {
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	var newer *claimRec[T]
	for c := s.claims[id]; c != nil; newer, c = c, c.older {
		if c.attempt != attempt {
			continue
		}
		switch {
		case newer != nil:
			newer.older = c.older
		case c.older != nil:
			s.claims[id] = c.older
		default:
			delete(s.claims, id)
		}
		return c, nil
	}
	return nil, fmt.Errorf("%w: job %d attempt %d", ErrNotClaimed, id, attempt)
}
