package redisstore

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Leases are judged by Redis's clock. The claim and heartbeat scripts
// write a lease's expiry as the server's TIME plus the lease TTL, and the
// rescue script compares expiries with TIME: every process of a queue
// reads one clock, so a process whose clock is minutes ahead does not
// rescue another's live lease, and one whose clock is behind does not
// stamp leases that outlive its heartbeats. (A script may read TIME and
// then write: Redis 5 and later replicate a script's effects, not the
// script.) With priority sharding each shard's leases are judged by that
// shard's server, which alone stores them.
//
// The queue's clock still measures how much time passes: the lease time
// a script uses is TIME plus how far the queue's clock has moved beyond
// real time since Init (leaseShift). With the system clock that is zero,
// whatever the clock reads (the difference of two time.Now() readings is
// measured on the monotonic clock, which a wall clock step does not
// move); a fake clock, which does not move by itself, steps leases
// forward by each Advance, so that tests still expire leases without
// waiting. A process's clock error thus does not matter to leases; what
// remains is its clock's rate error over one lease TTL. (A custom Clock
// whose readings lack time.Now's monotonic reading lets a wall clock step
// through: the step shifts that process's leases by its size.)
//
// Due times (a job's RunAt, retry and deferral times) and dead-at times
// remain the queue's clock: they are times the caller gave or reads back,
// and a process whose clock is off promotes scheduled jobs early or late
// by its error (see doc.go).

// leaseClock is what leaseShift measures from: the queue's clock and real
// time, read together at Init.
type leaseClock struct {
	clock time.Time // the queue's clock at Init
	real  time.Time // time.Now() at Init (with its monotonic reading)
}

// leaseShift returns how far the queue's clock has moved beyond real time
// since Init, in milliseconds: zero for the system clock, each Advance
// less the real time passed for a fake one.
func (s *Store[T]) leaseShift() int64 {
	return (s.cfg.Clock.Now().Sub(s.lc.clock) - time.Since(s.lc.real)).Milliseconds()
}

// leaseOffset is the argument of the claim and heartbeat scripts: ms
// after Redis's TIME until a lease written now expires.
func (s *Store[T]) leaseOffset() int64 { return s.leaseShift() + s.o.LeaseTTL.Milliseconds() }

// heartbeatBatch bounds the leases one heartbeat script call extends.
const heartbeatBatch = 500

// Heartbeat extends the leases of the given running jobs and returns the
// IDs whose lease this process no longer holds; see storekit.Leaser. Jobs
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

// extendLeases extends the leases refs on sh to a lease TTL from now (by
// Redis's clock; see leaseClock), a batch per script call, and returns the
// IDs whose lease is no longer the caller's, and those an operator asked
// to cancel (see CancelRequested).
func (s *Store[T]) extendLeases(ctx context.Context, sh *shard, refs []leaseRef) ([]int64, error) {
	until := s.leaseOffset()
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
		var cancel map[int64]bool
		for _, v := range res {
			if str, ok := v.(string); ok && strings.HasPrefix(str, "c") {
				// Held, and an operator asked to cancel it (admin
				// Cancel): reported lost, and CancelRequested says why.
				id, _ := strconv.ParseInt(str[1:], 10, 64)
				if cancel == nil {
					cancel = map[int64]bool{}
				}
				cancel[id] = true
				lost = append(lost, id)
				continue
			}
			lost = append(lost, replyInt(v))
		}
		s.noteCancels(batch, cancel)
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
