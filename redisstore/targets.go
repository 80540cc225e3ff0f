package redisstore

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/queuekit/queue/storekit"
)

// The store implements storekit.TargetStore on the first shard (the one of
// the queue's highest priority, which also holds the leader key): one
// hash per queue, "{prefix:name}:targets", holds an entry per field (its
// JSON); a sorted set, "{prefix:name}:targets:due", holds the next-due
// entries by time, so that loads prune those more than a minute past. A
// script writes a batch and PUBLISHes each entry on the channel
// "{prefix:name}:targets", to which every process of the queue
// subscribes. Both keys carry the queue's hash tag.
var _ storekit.TargetStore = (*Store[int])(nil)

// targetWatch holds WatchTargets' function.
type targetWatch struct {
	fn atomic.Pointer[func(storekit.TargetState)]
}

// KEYS: the hash, the due set. ARGV: the channel, then per entry its
// field, its JSON, "d" (delete) or "s" (set), and its next-due time in
// ms ("" for a health entry).
var scriptSaveTargets = redis.NewScript(`
for i = 2, #ARGV, 4 do
  local f, v, op, due = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3]
  if op == 'd' then
    redis.call('HDEL', KEYS[1], f)
    redis.call('ZREM', KEYS[2], f)
  else
    redis.call('HSET', KEYS[1], f, v)
    if due ~= '' then redis.call('ZADD', KEYS[2], due, f) end
  end
  redis.call('PUBLISH', ARGV[1], v)
end
return 1
`)

// KEYS: the hash, the due set. Deletes next-due entries more than a
// minute past by the server's clock, and returns the rest.
var scriptLoadTargets = redis.NewScript(`
local t = redis.call('TIME')
local cut = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - 60000
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cut)
for _, f in ipairs(old) do
  redis.call('HDEL', KEYS[1], f)
  redis.call('ZREM', KEYS[2], f)
end
return redis.call('HVALS', KEYS[1])
`)

// targetKeys returns the hash, the due set and the channel, on the first
// shard; ok is false before Init.
func (s *Store[T]) targetKeys() (sh *shard, hash, due, channel string, ok bool) {
	s.initMu.Lock()
	bound := s.bound
	s.initMu.Unlock()
	if !bound || len(s.shards) == 0 {
		return nil, "", "", "", false
	}
	sh = s.shards[0]
	base := sh.ks.tag + ":targets"
	return sh, base, base + ":due", base, true
}

// LoadTargets implements storekit.TargetStore.
func (s *Store[T]) LoadTargets(ctx context.Context) ([]storekit.TargetState, error) {
	sh, hash, due, _, ok := s.targetKeys()
	if !ok {
		return nil, ErrNotBound
	}
	vals, err := scriptLoadTargets.Run(ctx, sh.client, []string{hash, due}).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("redisstore: loading target state: %w", err)
	}
	out := make([]storekit.TargetState, 0, len(vals))
	for _, v := range vals {
		var st storekit.TargetState
		if err := json.Unmarshal([]byte(v), &st); err != nil {
			return nil, fmt.Errorf("redisstore: decoding target state %q: %w", v, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// SaveTargets implements storekit.TargetStore: one script, one round trip,
// writes the entries and publishes each.
func (s *Store[T]) SaveTargets(ctx context.Context, states []storekit.TargetState) error {
	sh, hash, due, channel, ok := s.targetKeys()
	switch {
	case !ok:
		return ErrNotBound
	case len(states) == 0:
		return nil
	}
	args := make([]any, 0, 1+4*len(states))
	args = append(args, channel)
	for i := range states {
		st := &states[i]
		v, err := json.Marshal(st)
		if err != nil {
			return fmt.Errorf("redisstore: encoding target state: %w", err)
		}
		op, at := "s", ""
		if st.Empty() {
			op = "d"
		} else if st.Key != "" {
			at = strconv.FormatInt(st.NextDue.UnixMilli(), 10)
		}
		args = append(args, st.Target+"\x00"+st.Key, string(v), op, at)
	}
	if err := scriptSaveTargets.Run(ctx, sh.client, []string{hash, due}, args...).Err(); err != nil {
		return fmt.Errorf("redisstore: writing target state: %w", err)
	}
	return nil
}

// WatchTargets implements storekit.TargetStore: from Start, the store
// subscribes to the queue's channel and calls fn with each entry any
// process writes. go-redis resubscribes after a lost connection; what was
// published meanwhile the queue sees at its next reload.
func (s *Store[T]) WatchTargets(fn func(storekit.TargetState)) { s.tw.fn.Store(&fn) }

// subscribeTargets subscribes to the queue's channel when WatchTargets
// was called, and to its slot channel when WatchSlots was, waiting for Redis to confirm (at most the connect timeout),
// so that no entry written after Start is missed; nil otherwise.
func (s *Store[T]) subscribeTargets() *redis.PubSub {
	sh, _, _, channel, ok := s.targetKeys()
	if !ok {
		return nil
	}
	var channels []string
	if s.tw.fn.Load() != nil {
		channels = append(channels, channel)
	}
	if c := s.slotChannel(); c != "" {
		channels = append(channels, c) // WatchSlots' (slots.go)
	}
	if len(channels) == 0 {
		return nil
	}
	ps := sh.client.Subscribe(context.Background(), channels...)
	ctx, cancel := context.WithTimeout(context.Background(), s.o.connectTimeout)
	defer cancel()
	if _, err := ps.Receive(ctx); err != nil {
		// go-redis keeps trying; the queue's reloads cover the gap.
		s.cfg.Logger.Warn("redisstore: subscribing to target changes", "err", err)
	}
	return ps
}

// watchTargets hands each entry published on ps to WatchTargets'
// function until Close.
func (s *Store[T]) watchTargets(ps *redis.PubSub) {
	defer s.wg.Done()
	if ps == nil {
		return
	}
	defer ps.Close()
	fn := s.tw.fn.Load()
	slots := s.slotChannel()
	msgs := ps.Channel()
	for {
		select {
		case <-s.closing:
			return
		case m, open := <-msgs:
			if !open {
				return
			}
			if m.Channel == slots {
				s.slotReleased(m)
				continue
			}
			if fn == nil {
				continue
			}
			var st storekit.TargetState
			if err := json.Unmarshal([]byte(m.Payload), &st); err == nil {
				(*fn)(st)
			}
		}
	}
}
