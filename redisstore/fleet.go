package redisstore

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue/storekit"
)

// Fleet state: what the processes of one queue share beyond the jobs. All
// of it is on the first shard, under the queue's hash tag.
//
//   - The admission bucket (TakeTokens): a GCRA in one script on the key
//     "{prefix:name}:admission", by Redis's clock (TIME); the queue leases
//     tokens from it (see storekit.Admitter).
//   - Presence (Processes): each started process renews its member of the
//     sorted set "{prefix:name}:procs" (score: expiry in TIME ms) every
//     fleet interval; a member counts for three intervals, and Close
//     removes it.
//   - Fill: the same call reads every shard's ready counters, so Len is
//     the queue's ready jobs in Redis, the same for every process, at most
//     a fleet interval old (and updated by each script call in between),
//     from Start on, whether or not this process has added or claimed yet.

var (
	_ storekit.Admitter   = (*Store[int])(nil)
	_ storekit.FleetSizer = (*Store[int])(nil)
)

// fleetInterval is how often a process renews its presence and re-reads
// the ready counts: the poll interval, at most a second.
func (s *Store[T]) fleetInterval() time.Duration { return min(s.o.PollInterval, time.Second) }

// scriptTake is the GCRA: KEYS[1] holds the bucket's theoretical arrival
// time in microseconds of Redis's clock. ARGV: emission interval T (µs),
// burst, n. It returns the tokens taken and, when none, the microseconds
// until one is available.
var scriptTake = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local T, burst, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local got = math.min(n, math.max(0, math.floor((now - tat) / T + burst)))
if got == 0 then
  return {0, math.floor(math.max(0, tat - now - (burst - 1) * T))}
end
tat = tat + got * T
redis.call('SET', KEYS[1], string.format('%.3f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
return {got, 0}
`)

// scriptPresence renews member ARGV[1] of the presence set KEYS[1] for
// ARGV[2] ms of Redis's clock, drops expired members, and returns the
// live count.
var scriptPresence = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return redis.call('ZCARD', KEYS[1])
`)

func (k keyspace) admission() string { return k.tag + ":admission" }
func (k keyspace) procs() string     { return k.tag + ":procs" }

// TakeTokens implements storekit.Admitter: it takes up to n tokens from the
// queue's admission bucket, shared by every process of the queue, in one
// script on the first shard (a GCRA by Redis's clock). The queue calls it
// once per lease of tokens, not per Admit.
func (s *Store[T]) TakeTokens(ctx context.Context, perSecond float64, burst, n int) (int, time.Duration, error) {
	switch {
	case !s.isBound():
		return 0, 0, fmt.Errorf("redisstore: TakeTokens: the store is not bound to a queue")
	case !(perSecond > 0) || math.IsInf(perSecond, 0):
		return 0, 0, fmt.Errorf("redisstore: TakeTokens: perSecond %v: must be > 0 and finite", perSecond)
	case burst < 1 || n < 1:
		return 0, 0, fmt.Errorf("redisstore: TakeTokens: burst %d, n %d: both must be >= 1", burst, n)
	}
	sh := s.shards[0]
	res, err := scriptTake.Run(ctx, sh.client, []string{sh.ks.admission()}, 1e6/perSecond, burst, n).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("redisstore: admission: %w", err)
	}
	return int(res[0]), time.Duration(res[1]) * time.Microsecond, nil
}

func (s *Store[T]) isBound() bool {
	s.initMu.Lock()
	defer s.initMu.Unlock()
	return s.bound
}

// Processes implements storekit.FleetSizer: the started processes of the
// queue (stores on the same Redis, prefix and queue name), this one
// included, as counted every fleet interval (the poll interval, at most
// 1 s). A process counts until three intervals after its last renewal, or
// until its store closes.
func (s *Store[T]) Processes() int { return int(max(s.procs.Load(), 1)) }

// fleetLoop renews this process's presence and refreshes the ready counts
// every fleet interval, from Start until Close.
func (s *Store[T]) fleetLoop() {
	defer s.wg.Done()
	ctx, cancel := s.background()
	defer cancel()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.refreshFleet(ctx); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Debug("redisstore: refreshing the fleet's state", "err", err)
		}
		t.Reset(s.fleetInterval())
	}
}

// refreshFleet renews the presence and reads the live processes and every
// reachable shard's ready count (its inboxes drained first), two round
// trips per shard.
func (s *Store[T]) refreshFleet(ctx context.Context) error {
	ttl := 3 * s.fleetInterval()
	var first error
	for i, sh := range s.shards {
		if !sh.healthy.Load() {
			continue
		}
		// The inboxes' jobs are ready jobs: drained into the counters
		// first (a script that reads one hash when they are empty).
		if err := s.runInbox(ctx, sh, false); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		pipe := sh.client.Pipeline()
		var procs *redis.Cmd
		if i == 0 {
			procs = scriptPresence.Eval(ctx, pipe, []string{sh.ks.procs()}, s.owner, ttl.Milliseconds())
		}
		counts := pipe.HGetAll(ctx, sh.ks.fixed[kCount])
		if _, err := pipe.Exec(ctx); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		if procs != nil {
			if n, err := procs.Int64(); err == nil {
				s.procs.Store(n)
			}
		}
		var ready int64
		for f, v := range counts.Val() {
			if l, ok := strings.CutPrefix(f, "r:"); ok && sh.serves(l) {
				ready += replyInt(v)
			}
		}
		sh.ready.Store(ready)
	}
	return first
}

// leaveFleet removes this process from the presence set.
func (s *Store[T]) leaveFleet(ctx context.Context) {
	select {
	case <-s.started:
	default:
		return // never counted
	}
	sh := s.shards[0]
	if sh.healthy.Load() {
		_ = sh.client.ZRem(ctx, sh.ks.procs(), s.owner).Err()
	}
}
