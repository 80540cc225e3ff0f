package redisstore

// The admin API's scripts (see admin.go).

// Admin: action ('retry', 'delete' or 'cancel'), id, now. Acts on one job
// by ID, atomically against every claim, outcome, rescue and trim:
//
//   - retry: a dead job becomes ready now (pushed to the end of its ready
//     list, indexed by its enqueue time) with its attempts reset and its
//     key taken again; 'dup' when another pending or running job holds
//     the key (nothing changes).
//   - delete: a ready, scheduled or rerun job is removed ('cancelled': it
//     had not run to its end), a dead one too ('deleted'); a running one
//     is refused ('state').
//   - cancel: a ready, scheduled or rerun job is removed ('cancelled'); a
//     running one is marked (x in its meta record, its ID in the cancel
//     set) for the heartbeat script to report to the process that runs it
//     ('running'); a dead one is refused ('state').
//
// A removed job releases its group and its key, and a rerun waiting for
// the key becomes the key's job (release_key). Returns {status, ready,
// state, key, target, label, attempt}; status 'notfound' when the shard
// holds no such job.
var scriptAdmin = newScript("admin", `
local act, id, now = arg(1), arg(2), tonumber(arg(3))
local m = load(id)
if not m then return {'notfound', ready_count()} end
local st = m.s
local function reply(status) return {status, ready_count(), st, m.k, m.t, m.p, m.a} end
if act == 'retry' then
  if st ~= 'd' then return reply('state') end
  if m.k ~= '' then
    local h = redis.call('HGET', KEYIDX, m.k)
    if h and h ~= id then
      local hm = load(h)
      if hm and hm.s ~= 'd' then return reply('dup') end
    end
  end
  unbury(id, m)
  uncancel(id, m)
  m.a = 0
  m.d = nil
  m.r = now
  if m.k ~= '' then redis.call('HSET', KEYIDX, m.k, id) end
  push_ready(id, m)
  save(id, m)
  return reply('ok')
end
if st == 'x' then
  if act == 'delete' then return reply('state') end
  if not m.x then
    m.x = 1
    save(id, m)
    redis.call('SADD', CANCEL, id)
  end
  return reply('running')
end
if st == 'd' then
  if act == 'cancel' then return reply('state') end
  unbury(id, m)
  forget(id)
  return reply('deleted')
end
if st == 'w' then
  if redis.call('HGET', RERUNS, m.k) == id then redis.call('HDEL', RERUNS, m.k) end
  forget(id)
  return reply('cancelled')
end
if st == 'q' then unready(id, m) else redis.call('ZREM', SCHED, id) end
release_group(id, m)
release_key(id, m, now)
forget(id)
return reply('cancelled')
`)

// ZPage: KEYS[1] a sorted set; ARGV: reverse (1/0), after (1/0), the
// position's score and member, count. Returns up to count members with
// their scores (member, score, ...) in the set's order (score, then
// member), or its reverse, starting strictly after the position when
// after is 1, else at the start. The position is found in O(log n) whether
// or not its member is still in the set, or has moved: the script adds
// the member followed by a NUL byte at the position's score, reads its
// rank and removes it (members are decimal IDs, so that one sorts right
// after the position's member and before any other). The script's
// effects are replicated, so the transient member never reaches a
// replica, and no other command sees it.
var scriptZPage = newRawScript("zpage", `
local key, rev, after, n = KEYS[1], ARGV[1] == '1', ARGV[2] == '1', tonumber(ARGV[5])
if not after then
  if rev then return redis.call('ZREVRANGE', key, 0, n - 1, 'WITHSCORES') end
  return redis.call('ZRANGE', key, 0, n - 1, 'WITHSCORES')
end
local at, mem = ARGV[3], ARGV[4]
local probe = mem .. '\0'
redis.call('ZADD', key, at, probe)
local r = redis.call('ZRANK', key, probe)
redis.call('ZREM', key, probe)
if not rev then return redis.call('ZRANGE', key, r, r + n - 1, 'WITHSCORES') end
-- Reverse: the members of rank below r, those at or before the
-- position, the position's own member (if still there) left out.
if r == 0 then return {} end
local card = redis.call('ZCARD', key)
local got = redis.call('ZREVRANGE', key, card - r, card - r + n, 'WITHSCORES')
local out = {}
for i = 1, #got, 2 do
  if not (got[i] == mem and tonumber(got[i + 1]) == tonumber(at)) and #out < 2 * n then
    out[#out + 1] = got[i]
    out[#out + 1] = got[i + 1]
  end
end
return out
`)
