package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
)

// writeBatch bounds the jobs one write-back pipeline carries.
const writeBatch = 200

// healthLoop pings sh every health interval. A failed ping switches the
// shard to the fallback; a successful one while the shard is down, or
// while the fallback still holds its jobs, runs recover.
func (s *Store[T]) healthLoop(sh *shard) {
	defer s.wg.Done()
	t := time.NewTicker(s.o.healthInterval)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.o.healthTimeout)
		err := sh.client.Ping(ctx).Err()
		cancel()
		if err != nil {
			s.markDown(sh, err)
			continue
		}
		if !sh.healthy.Load() || s.backlog(sh) {
			s.recover(sh)
		}
	}
}

// backlog reports whether work for sh waits locally: finishes not yet
// recorded or fallback jobs not yet written back.
func (s *Store[T]) backlog(sh *shard) bool {
	s.claimMu.Lock()
	for _, op := range s.pending {
		if op.sh == sh {
			s.claimMu.Unlock()
			return true
		}
	}
	s.claimMu.Unlock()
	s.fbMu.Lock()
	defer s.fbMu.Unlock()
	return s.fb.waiting(sh)
}

// recover brings sh back: it reloads the scripts, renews the leases of
// the jobs this process runs from sh (after an outage), records the
// finishes kept during the outage, writes the fallback's waiting jobs
// back, and switches the shard to Redis once nothing of it waits in the
// fallback.
func (s *Store[T]) recover(sh *shard) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	if err := sh.loadScripts(ctx); err != nil {
		s.markDown(sh, err)
		return
	}
	if !sh.healthy.Load() {
		if err := s.renewLeases(ctx, sh); err != nil {
			if isOutage(ctx, err) || ctx.Err() != nil {
				s.markDown(sh, err)
				return
			}
			s.cfg.Logger.Warn("redisstore: renewing leases after an outage", "err", err)
		}
	}
	if err := s.flushPending(ctx, sh); err != nil {
		return
	}
	if err := s.writeBack(ctx, sh); err != nil {
		return
	}
	s.fbMu.Lock()
	back := !s.fb.waiting(sh) && !sh.healthy.Swap(true)
	s.fbMu.Unlock()
	if back {
		s.cfg.Logger.Info("redisstore: redis reachable again, fallback written back",
			"priorities", sh.label, "fallback_jobs", s.nFallback.Load(),
			"written_back", s.nWrittenBack.Load(), "finishes_recorded", s.nFlushed.Load())
	}
	s.signal()
}

// flushPending records the finishes kept during an outage of sh.
func (s *Store[T]) flushPending(ctx context.Context, sh *shard) error {
	s.claimMu.Lock()
	var ops, rest []settleOp
	for _, op := range s.pending {
		if op.sh == sh {
			ops = append(ops, op)
		} else {
			rest = append(rest, op)
		}
	}
	s.pending = rest
	s.claimMu.Unlock()
	for len(ops) > 0 {
		batch := ops[:min(len(ops), 128)]
		res, err := s.runSettle(ctx, sh, batch)
		if err != nil {
			if isOutage(ctx, err) || ctx.Err() != nil {
				s.markDown(sh, err)
				s.claimMu.Lock()
				s.pending = append(s.pending, ops...)
				s.claimMu.Unlock()
				return err
			}
			s.cfg.Logger.Error("redisstore: recording finishes kept during an outage",
				"jobs", len(batch), "err", err)
			ops = ops[len(batch):]
			continue
		}
		for i, st := range res {
			op := batch[i]
			s.nFlushed.Add(1)
			switch st {
			case "superseded":
				s.cfg.Report(queue.Event{Kind: queue.EventCancelled, Time: time.UnixMilli(s.now()),
					JobID: op.id, Key: op.key, Err: storekit.ErrSuperseded})
			case "lost":
				s.cfg.Logger.Warn("redisstore: lease expired during the outage; the job may run again",
					"id", op.id)
			}
		}
		ops = ops[len(batch):]
	}
	return nil
}

// writeBack moves the fallback's waiting jobs of sh to Redis. Each job is
// written with the add script in restore mode, under a Redis ID fixed
// before the first try: the script's seen bit makes a repeated write a
// no-op, so every job lands exactly once even when a reply is lost.
func (s *Store[T]) writeBack(ctx context.Context, sh *shard) error {
	for {
		s.fbMu.Lock()
		batch := s.fb.takeFor(sh, writeBatch, s.cfg.Clock.Now())
		s.fbReady.Store(int64(s.fb.readyLen()))
		s.fbMu.Unlock()
		if len(batch) == 0 {
			return nil
		}
		outcomes, err := s.writeBatch(ctx, sh, batch)
		s.fbMu.Lock()
		for i, j := range batch {
			s.fb.settle(j, outcomes[i])
		}
		s.fbReady.Store(int64(s.fb.readyLen()))
		s.fbMu.Unlock()
		if err != nil {
			if isOutage(ctx, err) || ctx.Err() != nil {
				s.markDown(sh, err)
			} else {
				s.cfg.Logger.Error("redisstore: writing the fallback back", "err", err)
			}
			return err
		}
	}
}

func (s *Store[T]) writeBatch(ctx context.Context, sh *shard, batch []*fbJob[T]) ([]writeOutcome, error) {
	out := make([]writeOutcome, len(batch))
	for i := range out {
		out[i] = writeUnsent
	}
	for _, j := range batch {
		if j.seq == 0 {
			id, seq, blk, err := sh.newID(ctx)
			if err != nil {
				return out, err
			}
			j.job.ID, j.seq, j.blk = id, seq, blk
		}
	}
	items := make([]addItem, len(batch))
	for i, j := range batch {
		items[i] = s.itemOf(j, true)
	}
	res, err := s.runAdd(ctx, sh, items)
	if err != nil {
		what := writeUnknown // it may have run, wholly or in part
		if isNoScript(err) {
			what = writeUnsent
		}
		for i := range out {
			out[i] = what
		}
		return out, err
	}
	now := s.now()
	for i, j := range batch {
		if res[i] == "stale" {
			// Its ID block is unknown to Redis, which restarted since
			// the block was reserved: the job is not in Redis (an
			// earlier write of it would have gone with the block) and
			// is written again under an ID of a new block.
			sh.dropBlock(j.blk)
			j.seq, j.blk, j.inRedis = 0, 0, false
			continue
		}
		out[i] = writeDone
		s.nWrittenBack.Add(1)
		if res[i] == "dup" {
			s.cfg.Logger.Warn("redisstore: fallback job dropped on write-back: its key is pending in redis",
				"id", j.job.ID, "key", j.job.Key)
			s.cfg.Report(queue.Event{Kind: queue.EventCancelled, Time: time.UnixMilli(now), JobID: j.job.ID,
				Key: j.job.Key, Target: j.job.Target, Priority: j.job.Priority, Attempt: j.job.Attempt,
				Err: fmt.Errorf("%w: key pending in redis at write-back", queue.ErrDuplicate)})
		}
	}
	s.signal()
	return out, nil
}

// wakeWait is the BLPOP timeout of the wake listener, in seconds.
const wakeWait = "0.25"

// listen turns a shard's wake-up tokens into local wake-ups: while some
// Claim sleeps (in wait), it blocks in BLPOP on the wake list (one
// connection per shard and process) and wakes one sleeping Claim per
// token.
//
// A token that comes when no Claim here is left to wake (the last one
// woke by itself, or took a job, while the BLPOP it started was still
// blocked, for up to wakeWait) is handed back to the list, for a Claim
// asleep in another process: Redis serves the blocked BLPOPs in the order
// they blocked, so such a listener could take the tokens meant for an idle
// process, which then slept until its poll. The listener then waits for a
// Claim to fall asleep here before it blocks again.
func (s *Store[T]) listen(sh *shard) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.closing
		cancel()
	}()
	handedBack := false
	for {
		if handedBack || s.sleeping.Load() == 0 || !sh.healthy.Load() {
			handedBack = false
			t := time.NewTimer(s.o.healthInterval)
			select {
			case <-sh.hasWaiter:
			case <-t.C:
			case <-s.closing:
				t.Stop()
				return
			}
			t.Stop()
			continue
		}
		// BLPOP with a fractional timeout (Redis >= 6.0) through Do: the
		// client cannot interrupt a blocked read, so the timeout bounds how
		// long Close waits for this loop.
		_, err := sh.client.Do(ctx, "BLPOP", sh.ks.fixed[kWake], wakeWait).Result()
		switch {
		case err == nil:
			if s.asleepUnwoken() {
				s.signal()
				continue
			}
			handedBack = true
			s.handBack(ctx, sh)
		case errors.Is(err, redis.Nil):
		case ctx.Err() != nil:
			return
		case isOutage(ctx, err):
			s.markDown(sh, err)
		default:
			// A reply error (a replica refusing writes, an ACL, a wake key
			// of the wrong type) comes back at once, every time: wait a
			// health interval before the next try rather than spin. The
			// wait is on the queue's clock, so a test can hold it.
			s.cfg.Logger.Warn("redisstore: waiting for wake-ups",
				"priorities", sh.label, "err", err)
			t := s.cfg.Clock.NewTimer(s.o.healthInterval)
			select {
			case <-t.C():
			case <-s.closing:
				t.Stop()
				return
			}
		}
	}
}

// asleepUnwoken reports whether a Claim sleeps here that no wake-up is
// pending for (signal's channel holds one wake-up at most; a Claim it
// wakes that finds more jobs ready wakes the next, see claimShard).
func (s *Store[T]) asleepUnwoken() bool {
	return int(s.sleeping.Load()) > len(s.notify)
}

// handBack puts a wake-up token that no Claim here needs back at the head
// of sh's wake list (kept at 64 tokens, as the scripts keep it). Lost
// (when Redis fails), the token's Claim elsewhere wakes at its poll.
func (s *Store[T]) handBack(ctx context.Context, sh *shard) {
	_, err := sh.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, sh.ks.fixed[kWake], "1")
		p.LTrim(ctx, sh.ks.fixed[kWake], 0, 63)
		return nil
	})
	switch {
	case err == nil, ctx.Err() != nil:
	case isOutage(ctx, err):
		s.markDown(sh, err)
	default:
		s.cfg.Logger.Warn("redisstore: handing back a wake-up token", "priorities", sh.label, "err", err)
	}
}
