package redisstore

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/queuekit/queue"
	"github.com/redis/go-redis/v9"
)

// The store implements queue.SlotStore on the first shard: a sorted set
// per target, "{prefix:name}:slots:<target>", whose members are the
// holders and whose scores are their leases' expiries in ms of Redis's
// clock (TIME). One script each, one round trip:
//
//   - acquire drops the expired members and adds the holder when fewer
//     than limit remain;
//   - renew moves the expiry of the holders still members (a lease that
//     expired but that no acquire has dropped yet is still its holder's);
//   - release removes the holder and, when it was a member, PUBLISHes the
//     target on "{prefix:name}:slots", to which every process subscribes.
//
// Every key carries the queue's hash tag, so the scripts run on Redis
// Cluster. A set expires a second after its longest lease, so that a
// target no longer used leaves nothing behind.
var _ queue.SlotStore = (*Store[int])(nil)

// slotWatch holds WatchSlots' function.
type slotWatch struct {
	fn atomic.Pointer[func(string)]
}

const luaNowMs = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// luaKeep makes KEYS[1] live at least a second past expiry exp.
const luaKeep = `
local function keep(exp)
  if redis.call('PTTL', KEYS[1]) < exp - now + 1000 then
    redis.call('PEXPIRE', KEYS[1], exp - now + 1000)
  end
end
`

// KEYS: the target's set. ARGV: holder, limit, ttl ms. Returns 1 when the
// holder has a slot.
var scriptAcquireSlot = redis.NewScript(luaNowMs + luaKeep + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
local exp = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[1], exp, ARGV[1])
keep(exp)
return 1
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
if #lost < #ARGV - 1 then keep(exp) end
return lost
`)

// KEYS: the target's set. ARGV: holder, channel, target.
var scriptReleaseSlot = redis.NewScript(`
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], ARGV[3])
end
return 1
`)

// slotKeys returns the first shard, the target's set and the channel; ok
// is false before Init.
func (s *Store[T]) slotKeys(target string) (sh *shard, key, channel string, ok bool) {
	if !s.isBound() || len(s.shards) == 0 {
		return nil, "", "", false
	}
	sh = s.shards[0]
	channel = sh.ks.tag + ":slots"
	return sh, channel + ":" + target, channel, true
}

// AcquireSlot implements queue.SlotStore: one script.
func (s *Store[T]) AcquireSlot(ctx context.Context, target, holder string, limit int, ttl time.Duration) (bool, error) {
	sh, key, _, ok := s.slotKeys(target)
	switch {
	case !ok:
		return false, ErrNotBound
	case target == "":
		return false, fmt.Errorf("redisstore: AcquireSlot: empty target")
	case holder == "":
		return false, fmt.Errorf("redisstore: AcquireSlot of %q: empty holder", target)
	case limit < 1:
		return false, fmt.Errorf("redisstore: AcquireSlot of %q: limit %d: must be >= 1", target, limit)
	case ttl < time.Millisecond:
		return false, fmt.Errorf("redisstore: AcquireSlot of %q: ttl %s: must be >= 1ms", target, ttl)
	}
	got, err := scriptAcquireSlot.Run(ctx, sh.client, []string{key}, holder, limit, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("redisstore: acquiring a slot of %q: %w", target, err)
	}
	return got == 1, nil
}

// RenewSlots implements queue.SlotStore: one script.
func (s *Store[T]) RenewSlots(ctx context.Context, target string, holders []string, ttl time.Duration) ([]string, error) {
	sh, key, _, ok := s.slotKeys(target)
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
	lost, err := scriptRenewSlots.Run(ctx, sh.client, []string{key}, args...).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: renewing slots of %q: %w", target, err)
	}
	if len(lost) == 0 {
		lost = nil
	}
	return lost, nil
}

// ReleaseSlot implements queue.SlotStore: one script, which publishes the
// freed slot.
func (s *Store[T]) ReleaseSlot(ctx context.Context, target, holder string) error {
	sh, key, channel, ok := s.slotKeys(target)
	switch {
	case !ok:
		return ErrNotBound
	case target == "":
		return fmt.Errorf("redisstore: ReleaseSlot: empty target")
	}
	if err := scriptReleaseSlot.Run(ctx, sh.client, []string{key}, holder, channel, target).Err(); err != nil {
		return fmt.Errorf("redisstore: releasing a slot of %q: %w", target, err)
	}
	return nil
}

// WatchSlots implements queue.SlotStore: from Start, the store subscribes
// to the queue's slot channel and calls fn with each target released.
// go-redis resubscribes after a lost connection; a release published
// meanwhile the queue's waiter finds when it next asks (every half
// second).
func (s *Store[T]) WatchSlots(fn func(target string)) { s.sw.fn.Store(&fn) }

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

// slotReleased hands a published release to WatchSlots' function.
func (s *Store[T]) slotReleased(m *redis.Message) {
	if fn := s.sw.fn.Load(); fn != nil {
		(*fn)(m.Payload)
	}
}
