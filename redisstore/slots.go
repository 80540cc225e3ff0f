package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue/storekit"
)

// The store implements storekit.SlotStore on the first shard: a sorted set
// per target, "{prefix:name}:slots:<target>", whose members are the
// holders and whose scores are their leases' expiries in ms of Redis's
// clock (TIME), and the target's line of waiting processes, two sorted
// sets with the processes as members: "{prefix:name}:slotline:<target>",
// scored by the instant each began to wait, and
// "{prefix:name}:slotlinex:<target>", by the expiry of its place. One
// script each, one round trip:
//
//   - acquire drops the expired members and adds the holder when fewer
//     than limit remain and more are free than processes wait ahead of
//     the caller; a granted process leaves the line, a refused one takes
//     (or keeps) its place and the refusal is PUBLISHed as
//     "w <process> <target>";
//   - renew moves the expiry of the holders still members (a lease that
//     expired but that no acquire has dropped yet is still its holder's);
//   - release removes the holder and, when it was a member, PUBLISHes
//     "r <target>"; it counts the other processes waiting;
//   - leave removes a process from the line.
//
// The announcements go on "{prefix:name}:slots", to which every process
// subscribes. Every key carries the queue's hash tag, so the scripts run
// on Redis Cluster. A set expires a second after its longest lease or
// place, so that a target no longer used leaves nothing behind.
var _ storekit.SlotStore = (*Store[int])(nil)

// slotWatch holds WatchSlots' function.
type slotWatch struct {
	fn atomic.Pointer[func(target, waiter string)]
}

const luaNowMs = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaKeep makes a key live at least a second past expiry exp.
const luaKeep = `
local function keep(key, exp)
  if redis.call('PTTL', key) < exp - now + 1000 then
    redis.call('PEXPIRE', key, exp - now + 1000)
  end
end
`

// luaLine drops the expired places of the line KEYS[2] (expiries in
// KEYS[3]), and counts the processes other than me in it.
const luaLine = `
local function line(me)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  for _, p in ipairs(gone) do
    redis.call('ZREM', KEYS[2], p)
    redis.call('ZREM', KEYS[3], p)
  end
  local n = redis.call('ZCARD', KEYS[2])
  if redis.call('ZSCORE', KEYS[2], me) then n = n - 1 end
  return n
end
`

// KEYS: the target's set, its line, the line's expiries. ARGV: holder,
// limit, ttl ms, process, waited ms, line ms, channel, target. Returns
// {1 when the holder has a slot, the other processes waiting}.
var scriptAcquireSlot = redis.NewScript(luaNowMs + luaKeep + luaLine + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local others = line(ARGV[4])
local since = now - tonumber(ARGV[5])
local ahead = redis.call('ZCOUNT', KEYS[2], '-inf', '(' .. since)
local mine = redis.call('ZSCORE', KEYS[2], ARGV[4])
if mine and tonumber(mine) < since then ahead = ahead - 1 end
if redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('ZCARD', KEYS[1]) + ahead < tonumber(ARGV[2]) then
  local exp = now + tonumber(ARGV[3])
  redis.call('ZADD', KEYS[1], exp, ARGV[1])
  keep(KEYS[1], exp)
  redis.call('ZREM', KEYS[2], ARGV[4])
  redis.call('ZREM', KEYS[3], ARGV[4])
  return {1, others}
end
local exp = now + tonumber(ARGV[6])
redis.call('ZADD', KEYS[2], since, ARGV[4])
redis.call('ZADD', KEYS[3], exp, ARGV[4])
keep(KEYS[2], exp)
keep(KEYS[3], exp)
redis.call('PUBLISH', ARGV[7], 'w ' .. ARGV[4] .. ' ' .. ARGV[8])
return {0, others}
`)

// KEYS: the target's set. ARGV: ttl ms, then the holders. Returns the
// holders that are not members.
var scriptRenewSlots = redis.NewScript(luaNowMs + luaKeep + `
local exp = now + tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', exp, ARGV[i])
  else
    lost[#lost + 1] = ARGV[i]
  end
end
if #lost < #ARGV - 1 then keep(KEYS[1], exp) end
return lost
`)

// KEYS: the target's set, its line, the line's expiries. ARGV: holder,
// channel, target, process. Returns the processes other than process
// waiting.
var scriptReleaseSlot = redis.NewScript(luaNowMs + luaLine + `
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], 'r ' .. ARGV[3])
end
return line(ARGV[4])
`)

// KEYS: the target's line, the line's expiries. ARGV: process.
var scriptLeaveSlotLine = redis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`)

// slotKeys returns the first shard, the target's set, its line and the
// line's expiries, and the channel; ok is false before Init.
func (s *Store[T]) slotKeys(target string) (sh *shard, keys []string, channel string, ok bool) {
	if !s.isBound() || len(s.shards) == 0 {
		return nil, nil, "", false
	}
	sh = s.shards[0]
	channel = sh.ks.tag + ":slots"
	return sh, []string{channel + ":" + target, sh.ks.tag + ":slotline:" + target, sh.ks.tag + ":slotlinex:" + target}, channel, true
}

// AcquireSlot implements storekit.SlotStore: one script.
func (s *Store[T]) AcquireSlot(ctx context.Context, req storekit.SlotRequest) (storekit.SlotAnswer, error) {
	target := req.Target
	sh, keys, channel, ok := s.slotKeys(target)
	switch {
	case !ok:
		return storekit.SlotAnswer{}, ErrNotBound
	case target == "":
		return storekit.SlotAnswer{}, fmt.Errorf("redisstore: AcquireSlot: empty target")
	case req.Holder == "":
		return storekit.SlotAnswer{}, fmt.Errorf("redisstore: AcquireSlot of %q: empty holder", target)
	case req.Process == "" || strings.Contains(req.Process, " "):
		return storekit.SlotAnswer{}, fmt.Errorf("redisstore: AcquireSlot of %q: process %q: must be non-empty, without spaces", target, req.Process)
	case req.Limit < 1:
		return storekit.SlotAnswer{}, fmt.Errorf("redisstore: AcquireSlot of %q: limit %d: must be >= 1", target, req.Limit)
	case req.TTL < time.Millisecond:
		return storekit.SlotAnswer{}, fmt.Errorf("redisstore: AcquireSlot of %q: ttl %s: must be >= 1ms", target, req.TTL)
	case req.Line < time.Millisecond:
		return storekit.SlotAnswer{}, fmt.Errorf("redisstore: AcquireSlot of %q: line %s: must be >= 1ms", target, req.Line)
	case req.Waited < 0:
		return storekit.SlotAnswer{}, fmt.Errorf("redisstore: AcquireSlot of %q: waited %s: must be >= 0", target, req.Waited)
	}
	got, err := scriptAcquireSlot.Run(ctx, sh.client, keys, req.Holder, req.Limit, req.TTL.Milliseconds(),
		req.Process, req.Waited.Milliseconds(), req.Line.Milliseconds(), channel, target).Int64Slice()
	if err != nil || len(got) != 2 {
		return storekit.SlotAnswer{}, fmt.Errorf("redisstore: acquiring a slot of %q: %w (%d values)", target, err, len(got))
	}
	return storekit.SlotAnswer{Granted: got[0] == 1, Waiting: int(got[1])}, nil
}

// RenewSlots implements storekit.SlotStore: one script.
func (s *Store[T]) RenewSlots(ctx context.Context, target string, holders []string, ttl time.Duration) ([]string, error) {
	sh, keys, _, ok := s.slotKeys(target)
	switch {
	case !ok:
		return nil, ErrNotBound
	case target == "":
		return nil, fmt.Errorf("redisstore: RenewSlots: empty target")
	case ttl < time.Millisecond:
		return nil, fmt.Errorf("redisstore: RenewSlots of %q: ttl %s: must be >= 1ms", target, ttl)
	case len(holders) == 0:
		return nil, nil
	}
	args := make([]any, 0, 1+len(holders))
	args = append(args, ttl.Milliseconds())
	for _, h := range holders {
		args = append(args, h)
	}
	lost, err := scriptRenewSlots.Run(ctx, sh.client, keys[:1], args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: renewing slots of %q: %w", target, err)
	}
	if len(lost) == 0 {
		lost = nil
	}
	return lost, nil
}

// ReleaseSlot implements storekit.SlotStore: one script, which publishes the
// freed slot.
func (s *Store[T]) ReleaseSlot(ctx context.Context, target, holder, process string) (int, error) {
	sh, keys, channel, ok := s.slotKeys(target)
	switch {
	case !ok:
		return 0, ErrNotBound
	case target == "":
		return 0, fmt.Errorf("redisstore: ReleaseSlot: empty target")
	}
	waiting, err := scriptReleaseSlot.Run(ctx, sh.client, keys, holder, channel, target, process).Int()
	if err != nil {
		return 0, fmt.Errorf("redisstore: releasing a slot of %q: %w", target, err)
	}
	return waiting, nil
}

// LeaveSlotLine implements storekit.SlotStore: one script.
func (s *Store[T]) LeaveSlotLine(ctx context.Context, target, process string) error {
	sh, keys, _, ok := s.slotKeys(target)
	switch {
	case !ok:
		return ErrNotBound
	case target == "":
		return fmt.Errorf("redisstore: LeaveSlotLine: empty target")
	}
	if err := scriptLeaveSlotLine.Run(ctx, sh.client, keys[1:], process).Err(); err != nil {
		return fmt.Errorf("redisstore: leaving the slot line of %q: %w", target, err)
	}
	return nil
}

// WatchSlots implements storekit.SlotStore: from Start, the store subscribes
// to the queue's slot channel and calls fn with each target released, and
// each target and process refused. go-redis resubscribes after a lost
// connection; a release published meanwhile the queue's waiter finds when
// it next asks (every half second).
func (s *Store[T]) WatchSlots(fn func(target, waiter string)) { s.sw.fn.Store(&fn) }

// slotChannel is the channel releases are published on, when WatchSlots
// was called; "" otherwise.
func (s *Store[T]) slotChannel() string {
	if s.sw.fn.Load() == nil {
		return ""
	}
	_, _, channel, ok := s.slotKeys("")
	if !ok {
		return ""
	}
	return channel
}

// slotReleased hands a published release ("r <target>") or refusal ("w
// <process> <target>") to WatchSlots' function.
func (s *Store[T]) slotReleased(m *redis.Message) {
	fn := s.sw.fn.Load()
	if fn == nil {
		return
	}
	kind, rest, _ := strings.Cut(m.Payload, " ")
	switch kind {
	case "r":
		(*fn)(rest, "")
	case "w":
		if waiter, target, ok := strings.Cut(rest, " "); ok {
			(*fn)(target, waiter)
		}
	}
}
