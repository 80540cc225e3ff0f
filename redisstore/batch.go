package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/storekit"
	"github.com/queuekit/queue/storekit/durable"
)

// batchChunk bounds the jobs one add script call of EnqueueMany takes, so
// that no call holds Redis for long; a batch's calls go in one pipeline.
const batchChunk = 256

// EnqueueMany adds jobs in one round trip per shard (a pipeline of add
// script calls, each of up to 256 jobs, plus two round trips when the
// batch needs new ID blocks) and returns, for each job in order, what
// became of it. An Added with ID 0 means the job was not added: its key
// or group was taken (EnqueueMany never coalesces: a job whose key is
// running is skipped too), its key is in a unique window (Job.UniqueFor;
// a job of the batch opens its window for the later ones), or the ready
// jobs were at capacity. Scheduled
// jobs (RunAt in the future) go to the schedule, as with Add. Each job's
// dedupe and capacity checks are Add's, made in order, so a later job of
// the batch sees an earlier one's key or group.
//
// The queue counts and observes the jobs as enqueued (EventEnqueued) or,
// refused for capacity, dropped (EventDropped), as it does for Enqueue;
// the store must have been passed to queue.NewWithStore.
//
// If any job's priority is unknown or its payload cannot be encoded or is
// too large, nothing is added. When jobs were refused for capacity, the
// error matches queue.ErrQueueFull and says how many; the result still
// tells which jobs were added. While a shard is unreachable (or its reply
// is lost) its jobs go to the in-memory fallback one by one, as with Add.
// If Redis refuses a call for another reason, the jobs of the calls that
// succeeded are added (and reported in the result) and the error is
// returned.
func (s *Store[T]) EnqueueMany(ctx context.Context, jobs []queue.Job[T]) ([]storekit.Added, error) {
	s.initMu.Lock()
	bound := s.bound
	s.initMu.Unlock()
	if !bound {
		return nil, errors.New("redisstore: EnqueueMany before the store was passed to queue.NewWithStore")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redisstore: enqueue many: %w", err)
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	jobs, err := storekit.EnqueueHooks(ctx, &s.cfg, jobs)
	if err != nil {
		return nil, fmt.Errorf("redisstore: EnqueueMany: %w", err)
	}
	nowT := s.cfg.Clock.Now()
	now := ms(nowT)
	fjs := make([]fbJob[T], len(jobs))
	per := make(map[*shard][]int, len(s.shards))
	for i := range jobs {
		pi := s.cfg.PriorityIndex(jobs[i].Priority)
		if pi < 0 {
			return nil, fmt.Errorf("redisstore: job %d: %w", i, s.cfg.UnknownPriority(jobs[i].Priority))
		}
		if err := durable.CheckMeta(jobs[i].Meta); err != nil {
			return nil, fmt.Errorf("redisstore: job %d: %w", i, err)
		}
		if err := durable.CheckTarget(jobs[i].Target); err != nil {
			return nil, fmt.Errorf("redisstore: job %d: %w", i, err)
		}
		if err := durable.CheckUniqueFor(jobs[i].UniqueFor, jobs[i].Key); err != nil {
			return nil, fmt.Errorf("redisstore: job %d: %w", i, err)
		}
		enc, err := s.o.Encode(jobs[i].Payload)
		if err != nil {
			return nil, fmt.Errorf("redisstore: job %d: %w", i, err)
		}
		sh := s.byPrio[pi]
		fj := &fjs[i]
		*fj = fbJob[T]{job: jobs[i], enc: enc, sh: sh, prio: pi, created: now}
		fj.job.ID, fj.job.Attempt = 0, 0
		if !jobs[i].RunAt.IsZero() {
			fj.due = dueMs(jobs[i].RunAt, nowT)
		}
		per[sh] = append(per[sh], i)
	}
	b := batch[T]{s: s, fjs: fjs, out: make([]storekit.Added, len(jobs)), status: make([]string, len(jobs)), now: now}
	var firstErr error
	for _, sh := range s.shards {
		if idx := per[sh]; len(idx) > 0 {
			if err := b.run(ctx, sh, idx); err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
	full := 0
	for i := range fjs {
		kind := queue.EventEnqueued
		switch b.status[i] {
		case "full":
			kind = queue.EventDropped
			full++
		case "":
			continue // not added: a duplicate, or an error
		}
		j := &fjs[i].job
		s.cfg.Report(queue.Event{Kind: kind, Time: nowT, JobID: b.out[i].ID, Key: j.Key, Target: j.Target,
			Priority: j.Priority})
	}
	if firstErr != nil {
		return b.out, fmt.Errorf("redisstore: enqueue many: %w", firstErr)
	}
	if full > 0 {
		return b.out, fmt.Errorf("redisstore: enqueue many: %d of %d jobs refused: %w", full, len(jobs), queue.ErrQueueFull)
	}
	return b.out, nil
}

// batch is one EnqueueMany call.
type batch[T any] struct {
	s      *Store[T]
	fjs    []fbJob[T]
	out    []storekit.Added
	status []string // per job: "added", "full", or "" (not added)
	now    int64
}

// run adds the jobs idx, all of shard sh.
func (b *batch[T]) run(ctx context.Context, sh *shard, idx []int) error {
	s := b.s
	var firstErr error
	for try := 0; len(idx) > 0; try++ {
		if !sh.healthy.Load() {
			return b.fallback(idx, nil, false)
		}
		if try == 3 {
			return fmt.Errorf("redis %s keeps losing the job IDs reserved from it", sh.label)
		}
		if err := b.takeIDs(ctx, sh, idx); err != nil {
			if !isOutage(ctx, err) {
				return err
			}
			s.markDown(sh, err)
			return b.fallback(idx, err, false)
		}
		type call struct {
			sc    script
			argv  []any
			idx   []int
			items []addItem
			cmd   *redis.Cmd
		}
		var calls []call
		pipe := sh.client.Pipeline()
		for start := 0; start < len(idx); start += batchChunk {
			c := call{idx: idx[start:min(start+batchChunk, len(idx))]}
			items := make([]addItem, len(c.idx))
			plain := true
			for k, i := range c.idx {
				items[k] = s.itemOf(&b.fjs[i], false)
				plain = plain && sh.plain(&items[k], b.now)
			}
			c.items = items
			if plain {
				c.sc, c.argv = scriptAddReady, s.addReadyArgv(sh, items)
			} else {
				c.sc, c.argv = scriptAdd, s.addAllArgv(sh, items, b.now, false)
			}
			c.cmd = redis.NewCmd(ctx, c.argv...)
			c.cmd.SetFirstKeyPos(3)
			_ = pipe.Process(ctx, c.cmd)
			calls = append(calls, c)
		}
		_, _ = pipe.Exec(ctx)
		var stale, again []int
		signal := false
		for _, c := range calls {
			cmd := c.cmd
			if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
				cmd = c.sc.runArgv(ctx, sh.client, c.argv)
			}
			if sh.learnDrainKeys(cmd.Err()) {
				// The add script needs drain keys it was not given
				// (see shard.run): nothing was written; again.
				again = append(again, c.idx...)
				continue
			}
			st, err := sh.addReply(cmd)
			if err == nil && sh.leftToAdd(st) {
				// The add-ready script found the inbox's jobs to go
				// first, or permits out at the capacity, and wrote
				// nothing: the add script, which drains the inbox and
				// revokes the permits itself, adds the jobs.
				st, err = s.runAddAll(ctx, sh, c.items, b.now)
			}
			if err != nil {
				if isOutage(ctx, err) {
					// The call may have reached Redis: settled with Redis
					// by ID once it answers, as an Add whose reply was lost.
					s.markDown(sh, err)
					if ferr := b.fallback(c.idx, err, true); ferr != nil && firstErr == nil {
						firstErr = ferr
					}
				} else if firstErr == nil {
					firstErr = err
				}
				continue
			}
			for k, i := range c.idx {
				if k >= len(st) {
					break
				}
				switch st[k] {
				case "ready", "rerun":
					signal = true
					b.added(i, storekit.Added{ID: b.fjs[i].job.ID})
				case "sched":
					b.added(i, storekit.Added{ID: b.fjs[i].job.ID, Scheduled: true})
					s.noteDue(sh, b.fjs[i].due)
				case "seen":
					b.added(i, storekit.Added{ID: b.fjs[i].job.ID, Scheduled: b.fjs[i].due > b.now})
				case "full":
					b.status[i] = "full"
				case "stale":
					stale = append(stale, i)
				}
			}
		}
		if signal {
			s.signal()
		}
		if len(stale) > 0 {
			// Redis lost the blocks (it restarted): nothing of those
			// jobs was stored. They take IDs of new blocks.
			sh.dropBlocks()
		}
		idx = append(stale, again...)
	}
	return firstErr
}

func (b *batch[T]) added(i int, a storekit.Added) {
	b.out[i] = a
	b.status[i] = "added"
}

// takeIDs gives the jobs idx IDs of sh's reserved blocks, reserving as
// many blocks as they need at once.
func (b *batch[T]) takeIDs(ctx context.Context, sh *shard, idx []int) error {
	sh.idMu.Lock()
	defer sh.idMu.Unlock()
	for k, i := range idx {
		if err := sh.refill(ctx, len(idx)-k); err != nil {
			return err
		}
		fj := &b.fjs[i]
		fj.seq, fj.blk = sh.next, sh.end-1
		fj.job.ID = sh.idOf(sh.next)
		sh.next++
	}
	return nil
}

// fallback adds the jobs idx to the in-memory fallback, one by one, as
// Add does while their shard is down; inRedis marks jobs whose add may
// have reached Redis.
func (b *batch[T]) fallback(idx []int, cause error, inRedis bool) error {
	var firstErr error
	for _, i := range idx {
		fj := b.fjs[i].clone()
		fj.inRedis = inRedis
		if !inRedis {
			// Not in Redis: the fallback gives it an ID, as for Add.
			fj.job.ID, fj.seq, fj.blk = 0, 0, 0
		}
		a, err := b.s.addFallback(fj, b.now, cause)
		switch {
		case err == nil:
			b.added(i, a)
		case errors.Is(err, queue.ErrQueueFull):
			b.status[i] = "full"
		case errors.Is(err, queue.ErrDuplicate):
		default:
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	return firstErr
}
