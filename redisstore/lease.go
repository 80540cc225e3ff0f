package redisstore

import "context"

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
	until := s.now() + s.o.LeaseTTL.Milliseconds()
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
