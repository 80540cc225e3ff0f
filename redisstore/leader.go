package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit/durable"
)

// Leadership is the leader key on the first shard, taken with SET NX PX
// and renewed with a compare-and-extend script every third of the TTL;
// the others try to take it every tenth of the TTL, at most every 500 ms,
// so a leader that dies is replaced within TTL + min(TTL/10, 500 ms), and
// at once when it gives the key up in Close (a compare-and-delete
// script). The leader counts its term from before it asked, so that it
// stops believing it leads no later than the key expires.
//
// The leader promotes due jobs (Claim does too, in every process) and
// trims the dead set. Lease rescue runs in every process (rescueLoop): a
// leader that dies with a worker would otherwise leave the worker's jobs
// waiting for a new leader.

// rescueBatch bounds the expired leases one script call handles.
const rescueBatch = 100

// background returns a context that ends when Close begins, for the
// background loops.
func (s *Store[T]) background() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// rescueLoop rescues expired leases, in every process, leader or not, so
// that a dead worker's jobs run again within the lease TTL and a janitor
// interval whether or not the leader died with it (the rescue script
// moves each expired lease once, whichever process runs it first). Each
// wait is drawn from the interval's second half, so that the processes of
// a queue spread their calls (durable.RescueLoop).
func (s *Store[T]) rescueLoop() {
	defer s.wg.Done()
	ctx, cancel := s.background()
	defer cancel()
	durable.RescueLoop(ctx, s.o.JanitorInterval, s.RescueExpired, s.cfg.Logger, "redisstore")
}

// leaderLoop runs the election on the first shard and, while this process
// leads, the janitor (durable.Leader).
func (s *Store[T]) leaderLoop() {
	defer s.wg.Done()
	ctx, cancel := s.background()
	defer cancel()
	s.lead.Run(ctx, durable.Election{
		TTL:             s.o.LeaderTTL,
		JanitorInterval: s.o.JanitorInterval,
		Elect:           s.elect,
		Janitor:         s.janitor,
		Log:             s.cfg.Logger.With("worker", s.owner),
		Pkg:             "redisstore",
	})
}

// elect takes (renew false) or keeps (renew true) the leader key. While
// the first shard is down this process does not lead.
func (s *Store[T]) elect(ctx context.Context, renew bool) (bool, error) {
	sh := s.shards[0]
	if !sh.healthy.Load() {
		return false, nil
	}
	return s.acquireOrRenew(ctx, sh, sh.ks.leader, s.o.LeaderTTL.Milliseconds(), renew)
}

// RescueExpired returns jobs whose lease expired to the head of their
// ready list, or dead-letters them after their last attempt; see
// storekit.Leaser. Every process of the queue runs it by itself, leader or
// not, every janitor interval (WithJanitorInterval). The attempt
// count is kept: it counts started runs, so the rescued job's next Claim
// makes it attempt + 1. It works through the expired leases a bounded batch
// per script call and reports EventRescued or EventDead for each job.
func (s *Store[T]) RescueExpired(ctx context.Context) (int, error) {
	n := 0
	for _, sh := range s.shards {
		if !sh.healthy.Load() {
			continue
		}
		for {
			now := s.now()
			res, err := sh.run(ctx, sh.client, scriptRescue, nil, now, rescueBatch, s.cfg.MaxAttempts, s.leaseShift()).Slice()
			if err != nil {
				if isOutage(ctx, err) {
					s.markDown(sh, err)
				}
				return n, err
			}
			sh.ready.Store(replyInt(res[0]))
			got := 0
			for i := 1; i+5 < len(res); i += 6 {
				got++
				ev := queue.Event{Kind: queue.EventRescued, Time: time.UnixMilli(now),
					JobID: replyInt(res[i]), Key: replyString(res[i+2]), Target: replyString(res[i+3]),
					Priority: replyString(res[i+4]), Attempt: int(replyInt(res[i+5]))}
				switch replyString(res[i+1]) {
				case "dead":
					ev.Kind = queue.EventDead
					ev.Err = errLeaseExpired
				case "cancelled":
					ev.Kind = queue.EventCancelled
					ev.Err = errCancelledByAdmin
				}
				s.cfg.Report(ev)
			}
			n += got
			if got > 0 {
				s.signal()
			}
			if got < rescueBatch {
				break
			}
		}
	}
	return n, nil
}

var errLeaseExpired = errors.New("redisstore: lease expired after the last attempt")

// trimDead deletes dead jobs past the retention, and unique-window marks
// whose windows ended, a batch of each per call.
func (s *Store[T]) trimDead(ctx context.Context, sh *shard) error {
	cutoff := s.now() - s.o.DeadRetention.Milliseconds()
	for {
		n, err := sh.run(ctx, sh.client, scriptTrim, nil, cutoff, s.o.deadMax, 200, s.leaseShift()).Int()
		if err != nil || n < 200 {
			return err
		}
	}
}

// janitor does the leader's maintenance on every reachable shard: it
// promotes due jobs (Claim does too, in every process) and trims the dead
// set.
func (s *Store[T]) janitor(ctx context.Context) {
	if _, err := s.PromoteDue(ctx); err != nil && ctx.Err() == nil {
		s.cfg.Logger.Warn("redisstore: promoting due jobs", "err", err)
	}
	for _, sh := range s.shards {
		if sh.healthy.Load() {
			if err := s.trimDead(ctx, sh); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("redisstore: trimming dead jobs", "err", err)
			}
		}
	}
}

// acquireOrRenew tries to take or keep leadership.
func (s *Store[T]) acquireOrRenew(ctx context.Context, sh *shard, key string, ttl int64, renew bool) (bool, error) {
	if renew {
		n, err := scriptLeaderRenew.Run(ctx, sh.client, []string{key}, s.owner, ttl).Int()
		return n == 1, err
	}
	err := sh.client.Do(ctx, "SET", key, s.owner, "NX", "PX", ttl).Err()
	if err == nil {
		return true, nil
	}
	if !errors.Is(err, redis.Nil) {
		return false, err
	}
	// Taken: by this process still, after a failed renewal?
	n, err := scriptLeaderRenew.Run(ctx, sh.client, []string{key}, s.owner, ttl).Int()
	return n == 1, err
}
