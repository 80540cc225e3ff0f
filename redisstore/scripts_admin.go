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
-- The inboxes' jobs were accepted before this call: drained first.
while drain(1000) > 0 do end
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

// IndexReady: budget. Brings the ready index up to date with the ready
// lists (see luaBase): for each list whose last entry is not indexed, it
// finds a position after which no entry is (a binary search over LINDEX
// for an indexed entry: the unindexed entries are the list's last ones,
// but for the tombstone of a job cancelled after it was indexed, which
// only makes the search stop earlier and re-index some entries for
// nothing), then indexes every entry from there, oldest first, at most
// budget in all, so that a call cut short leaves an indexed head and an
// unindexed tail as before. A queued job is indexed by its enqueue time;
// a tombstone too (score 0, so that each call indexes at least one entry
// that was not: the one the search stopped at), which List skips as it
// has no record and the claim or purge that pops it removes. Returns 1
// when entries are left to index (call again), else 0.
var scriptIndexReady = newScript("index-ready", `
local budget = tonumber(arg(1))
-- The inboxes' jobs were accepted before this call: drained first.
while drain(1000) > 0 do end
local more = 0
local function indexed(id) return id and redis.call('ZSCORE', RIDX, pad(id)) end
for i = 1, NL do
  local list = LIST[LABELS[i]]
  local n = redis.call('LLEN', list)
  if n > 0 and not indexed(redis.call('LINDEX', list, -1)) then
    if budget <= 0 then return 1 end
    local lo, hi = -1, n - 1
    while hi - lo > 1 do
      local mid = math.floor((lo + hi) / 2)
      if indexed(redis.call('LINDEX', list, mid)) then lo = mid else hi = mid end
    end
    local last = math.min(n - 1, lo + budget)
    local ids = redis.call('LRANGE', list, lo + 1, last)
    budget = budget - #ids
    if last < n - 1 then more = 1 end
    local recs = redis.call('HMGET', META, unpack(ids))
    local z = {}
    for k, id in ipairs(ids) do
      local c = 0
      if recs[k] then
        local ok, m = pcall(cjson.decode, recs[k])
        if ok and type(m) == 'table' and m.s == 'q' then c = m.c or 0 end
      end
      z[#z + 1] = c
      z[#z + 1] = pad(id)
    end
    if #z > 0 then redis.call('ZADD', RIDX, unpack(z)) end
  end
end
return more
`)
