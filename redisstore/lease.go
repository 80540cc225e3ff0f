package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/queuekit/queue"
	"github.com/redis/go-redis/v9"
)

// rescueBatch bounds the expired leases one script call handles.
const rescueBatch = 100

// heartbeatBatch bounds the leases one heartbeat script call extends.
const heartbeatBatch = 500

// Heartbeat extends the leases of the given running jobs and returns the
// IDs whose lease this process no longer holds; see queue.Leaser. Jobs
// claimed from the fallback hold no lease and are never lost. While a
// shard is unreachable its leases cannot be checked and are not reported
// lost; they expire after the lease TTL if the outage lasts that long.
// The queue names running jobs by ID only, so a job claimed here again
// while its earlier, rescued run still runs here is checked by its newest
// claim; the earlier run's outcome is refused with ErrLeaseLost.
func (s *Store[T]) Heartbeat(ctx context.Context, ids []int64) ([]int64, error) {
	per := map[*shard][]leaseRef{}
	var lost []int64
	s.claimMu.Lock()
	for _, id := range ids {
		c, ok := s.claims[id]
		switch {
		case !ok:
			lost = append(lost, id)
		case c.fb == nil:
			per[c.sh] = append(per[c.sh], leaseRef{id, c.lease})
		}
	}
	s.claimMu.Unlock()
	var firstErr error
	for sh, refs := range per {
		if !sh.healthy.Load() {
			continue
		}
		l, err := s.extendLeases(ctx, sh, refs)
		lost = append(lost, l...)
		if err != nil {
			if isOutage(ctx, err) {
				s.markDown(sh, err)
			} else if firstErr == nil {
				firstErr = err
			}
		}
	}
	return lost, firstErr
}

// leaseRef names the lease of one claim.
type leaseRef struct {
	id    int64
	lease string
}

// extendLeases extends the leases refs on sh by the lease TTL, a batch per
// script call, and returns the IDs whose lease is no longer the caller's.
func (s *Store[T]) extendLeases(ctx context.Context, sh *shard, refs []leaseRef) ([]int64, error) {
	until := s.now() + s.o.leaseTTL.Milliseconds()
	var lost []int64
	for len(refs) > 0 {
		batch := refs[:min(len(refs), heartbeatBatch)]
		refs = refs[len(batch):]
		args := []any{until}
		for _, r := range batch {
			args = append(args, r.id, r.lease)
		}
		res, err := sh.run(ctx, sh.client, scriptHeartbeat, nil, args...).Slice()
		if err != nil {
			return lost, err
		}
		for _, v := range res {
			lost = append(lost, replyInt(v))
		}
	}
	return lost, nil
}

// renewLeases extends the leases of every job this process runs from sh.
// It is the first thing recover does: heartbeats skip a shard while it is
// down, so after an outage the leases of jobs still running here may be
// about to expire, and a process would rescue them, to run again, before
// the queue's next heartbeat. A lease already lost is left for that
// heartbeat to report.
func (s *Store[T]) renewLeases(ctx context.Context, sh *shard) error {
	var refs []leaseRef
	s.claimMu.Lock()
	for id, c := range s.claims {
		if c.sh == sh && c.fb == nil {
			refs = append(refs, leaseRef{id, c.lease})
		}
	}
	s.claimMu.Unlock()
	_, err := s.extendLeases(ctx, sh, refs)
	return err
}

// RescueExpired returns jobs whose lease expired to the head of their
// ready list, or dead-letters them after their last attempt; see
// queue.Leaser. Every process of the queue runs it by itself, leader or
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
			res, err := sh.run(ctx, sh.client, scriptRescue, nil, now, rescueBatch, s.cfg.MaxAttempts).Slice()
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
				if replyString(res[i+1]) == "dead" {
					ev.Kind = queue.EventDead
					ev.Err = errLeaseExpired
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

// trimDead deletes dead jobs past the retention, a batch per call.
func (s *Store[T]) trimDead(ctx context.Context, sh *shard) error {
	cutoff := s.now() - s.o.deadRetention.Milliseconds()
	for {
		n, err := sh.run(ctx, sh.client, scriptTrim, nil, cutoff, s.o.deadMax, 200).Int()
		if err != nil || n < 200 {
			return err
		}
	}
}

// rescueLoop rescues expired leases, in every process, leader or not, so
// that a dead worker's jobs run again within the lease TTL and a janitor
// interval whether or not the leader died with it (the rescue script
// moves each expired lease once, whichever process runs it first). The
// wait between calls is drawn from [interval/2, interval], so that the
// processes of a queue spread their calls.
func (s *Store[T]) rescueLoop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.closing
		cancel()
	}()
	every := s.o.janitorInterval
	for {
		wait := every/2 + rand.N(every/2+1)
		t := time.NewTimer(wait)
		select {
		case <-s.closing:
			t.Stop()
			return
		case <-t.C:
		}
		if _, err := s.RescueExpired(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("redisstore: rescuing expired leases", "err", err)
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

// leaderLoop runs the election of seed 002 on the first shard: a standby
// tries SET key owner NX PX ttl every standbyPoll; the leader renews with a
// compare-and-extend script every ttl/3 and runs the janitor; Close
// releases with a compare-and-delete script.
func (s *Store[T]) leaderLoop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.closing
		cancel()
	}()
	sh := s.shards[0]
	key := sh.ks.leader
	ttl := s.o.leaderTTL.Milliseconds()
	renewEvery := s.o.leaderTTL / 3
	standbyPoll := min(500*time.Millisecond, s.o.leaderTTL/4)
	var renewed time.Time
	nextJanitor := time.Now()
	for {
		wasLeader := s.leader.Load()
		isLeader := false
		if sh.healthy.Load() {
			if !wasLeader || time.Since(renewed) >= renewEvery {
				ok, err := s.acquireOrRenew(ctx, sh, key, ttl, wasLeader)
				if err == nil {
					isLeader = ok
					if ok {
						renewed = time.Now()
					}
				} else if wasLeader && time.Since(renewed) < s.o.leaderTTL/2 {
					isLeader = true // a blip: the key is still ours for a while
				}
			} else {
				isLeader = true
			}
		}
		if isLeader != wasLeader {
			s.leader.Store(isLeader)
			s.cfg.Logger.Info("redisstore: leadership changed", "leader", isLeader)
		}
		wait := standbyPoll
		if isLeader {
			if !time.Now().Before(nextJanitor) {
				s.janitor(ctx)
				nextJanitor = time.Now().Add(s.o.janitorInterval)
			}
			wait = min(time.Until(renewed.Add(renewEvery)), time.Until(nextJanitor))
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-s.closing:
			t.Stop()
			return
		case <-t.C:
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
