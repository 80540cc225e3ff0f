package redisstore

import (
	"context"
	"fmt"

	"github.com/queuekit/queue"
)

// Add accepts a job; see queue.Store. The payload is encoded first (an
// error, or ErrPayloadTooLarge, refuses the job). While the job's Redis is
// unreachable the job goes to the in-memory fallback, whose dedupe and
// capacity checks see only the fallback; an Add whose reply was lost goes
// there too and is settled with Redis, by its ID, when Redis answers.
func (s *Store[T]) Add(ctx context.Context, job queue.Job[T]) (queue.Added, error) {
	pi := s.cfg.PriorityIndex(job.Priority)
	if pi < 0 {
		return queue.Added{}, fmt.Errorf("%w: %q", queue.ErrUnknownPriority, job.Priority)
	}
	enc, err := s.o.codec.Marshal(job.Payload)
	if err != nil {
		return queue.Added{}, fmt.Errorf("redisstore: encoding payload: %w", err)
	}
	if len(enc) > s.o.maxPayload {
		return queue.Added{}, fmt.Errorf("%w: %d bytes, limit %d", ErrPayloadTooLarge, len(enc), s.o.maxPayload)
	}
	sh := s.byPrio[pi]
	now := s.now()
	fj := &fbJob[T]{job: job, enc: enc, sh: sh, prio: pi}
	if !job.RunAt.IsZero() {
		fj.due = ms(job.RunAt)
	}
	fj.job.Attempt = 0
	if !sh.healthy.Load() {
		return s.addFallback(fj, now, nil)
	}
	id, seq, err := sh.newID(ctx)
	if err != nil {
		if !isOutage(ctx, err) {
			return queue.Added{}, err
		}
		s.markDown(sh, err)
		return s.addFallback(fj, now, err)
	}
	fj.job.ID, fj.seq = id, seq
	status, err := s.addOne(sh, fj, false)
	if err != nil {
		if !isOutage(ctx, err) {
			return queue.Added{}, err
		}
		s.markDown(sh, err)
		fj.inRedis = true
		return s.addFallback(fj, now, err)
	}
	added := queue.Added{ID: id}
	switch status {
	case "dup":
		return queue.Added{}, queue.ErrDuplicate
	case "full":
		return queue.Added{}, queue.ErrQueueFull
	case "sched":
		added.Scheduled = true
	case "rerun":
		added.Coalesced = true
	case "seen":
		added.Scheduled = fj.due > now
	}
	if status == "ready" || status == "rerun" {
		s.signal()
	}
	return added, nil
}

// addItem is one job for the add script.
type addItem struct {
	id, seq, due, attempt int64
	key, group, target    string
	label, lastErr        string
	max                   int
	enc                   []byte
	restore               bool
}

func (s *Store[T]) itemOf(fj *fbJob[T], restore bool) addItem {
	j := &fj.job
	return addItem{id: j.ID, seq: fj.seq, due: fj.due, attempt: int64(j.Attempt), key: j.Key,
		group: j.Group, target: j.Target, label: s.cfg.Priorities[fj.prio].Name, lastErr: fj.lastErr,
		max: j.MaxAttempts, enc: fj.enc, restore: restore}
}

// addOne adds fj through sh's combiner: concurrent Adds share one script
// call. restore marks a write-back from the fallback.
func (s *Store[T]) addOne(sh *shard, fj *fbJob[T], restore bool) (string, error) {
	return sh.adds.do(s.itemOf(fj, restore), func(items []addItem) ([]string, error) {
		return s.runAdd(context.Background(), sh, items)
	})
}

// runAdd adds items in one script call and returns their statuses.
func (s *Store[T]) runAdd(ctx context.Context, sh *shard, items []addItem) ([]string, error) {
	keys := append([]string(nil), sh.ks.fixed...)
	seenIdx := map[string]int{}
	args := make([]any, 0, 3+13*len(items))
	args = append(args, s.now(), s.cfg.Capacity, boolArg(s.cfg.Coalesce))
	for _, it := range items {
		key, off := sh.ks.seen(it.seq)
		idx, ok := seenIdx[key]
		if !ok {
			idx = len(seenIdx) + 1
			seenIdx[key] = idx
			keys = append(keys, key)
		}
		args = append(args, it.id, it.key, it.group, it.target, it.label, it.due, it.max, it.enc,
			boolArg(it.restore), idx, off, it.attempt, it.lastErr)
	}
	res, err := sh.run(ctx, sh.client, scriptAdd, keys, args...).Slice()
	if err != nil {
		return nil, err
	}
	sh.ready.Store(replyInt(res[0]))
	out := make([]string, 0, len(items))
	for _, v := range res[1:] {
		out = append(out, replyString(v))
	}
	return out, nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// addFallback puts fj into the fallback, giving it an ID if it has none.
func (s *Store[T]) addFallback(fj *fbJob[T], now int64, cause error) (queue.Added, error) {
	if s.o.fallbackSize == 0 {
		if cause == nil {
			cause = fmt.Errorf("redis %s unreachable (%s)", fj.sh.label, fj.sh.lastError())
		}
		return queue.Added{}, fmt.Errorf("redisstore: %w", cause)
	}
	if fj.job.ID == 0 {
		if id, seq, ok := fj.sh.reservedID(); ok {
			fj.job.ID, fj.seq = id, seq
		}
	}
	s.fbMu.Lock()
	defer s.fbMu.Unlock()
	if fj.job.ID == 0 {
		fj.job.ID = s.fb.localID()
	}
	added, err := s.fb.add(fj, now, s.cfg.Coalesce)
	s.fbReady.Store(int64(s.fb.nready))
	if err == nil {
		s.nFallback.Add(1)
	}
	if err == nil && !fj.inRedis {
		s.signal()
	}
	return added, err
}

// reservedID returns an ID from the block already reserved, without Redis.
func (sh *shard) reservedID() (id, seq int64, ok bool) {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	if sh.next >= sh.end {
		return 0, 0, false
	}
	seq = sh.next
	sh.next++
	return sh.idOf(seq), seq, true
}
