package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Every script but add-ready and add-one (which take only the few keys a
// plain job touches) is called with the same key layout, so that every
// key a script touches is declared in KEYS (Cluster-safe, checked by
// TestScriptsDeclareKeys) and the helpers below can be shared:
//
//	KEYS[1..12]  meta, data, lease, run, sched, keys, reruns, groups, dead,
//	             count, wake, seen (a placeholder, kept so that the
//	             layout stays fixed)
//	KEYS[13..]   the shard's ready lists, highest priority first, then
//	             (add only) the seen bitmaps of the jobs being added
//	ARGV[1]      number of ready lists n
//	ARGV[2]      the label used for a job whose label is not on the shard
//	ARGV[3..n+2] the labels of the ready lists, in KEYS order
//	ARGV[n+3..]  the script's own arguments, read with arg(i)
//
// Job records are fields of two hashes, meta (a small JSON object per job,
// which the add scripts get encoded by the client and the other scripts
// read and rewrite with cjson) and data (the encoded payload), rather than
// one hash per job: a script that pops a job ID from a list can then reach
// its record through a declared key. Meta fields: k key, g group, t
// target, p priority label, r run-at (ms), a attempts started, m max
// attempts (0 = queue default), s state (q ready, s scheduled, x running,
// w coalesced rerun, d dead), e last error, d dead-at (ms).
const luaBase = `
local META, DATA, LEASE, RUN, SCHED, KEYIDX, RERUNS, GROUPS, DEAD, COUNT, WAKE, SEEN =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12]
local NL = tonumber(ARGV[1])
local DEFLABEL = ARGV[2]
local LABELS, LIST = {}, {}
for i = 1, NL do
  LABELS[i] = ARGV[2 + i]
  LIST[ARGV[2 + i]] = KEYS[12 + i]
end
local function arg(i) return ARGV[2 + NL + i] end

local function load(id)
  local raw = redis.call('HGET', META, id)
  if not raw then return nil end
  local ok, m = pcall(cjson.decode, raw)
  if not ok or type(m) ~= 'table' then return nil end
  return m
end
-- The ready counters are one field per priority ('r:' .. label); the
-- script reads them once and keeps the sum in RC.
local RC = nil
local function ready_count()
  if not RC then
    local fields = {}
    for i = 1, NL do fields[i] = 'r:' .. LABELS[i] end
    RC = 0
    for _, v in ipairs(redis.call('HMGET', COUNT, unpack(fields))) do RC = RC + (tonumber(v) or 0) end
  end
  return RC
end
-- wake pushes up to n wake-up tokens, keeping at most 64 on the list.
local function wake(n)
  n = math.min(n or 1, 64 - redis.call('LLEN', WAKE))
  if n == 1 then
    redis.call('RPUSH', WAKE, '1')
  elseif n > 1 then
    local t = {}
    for i = 1, n do t[i] = '1' end
    redis.call('RPUSH', WAKE, unpack(t))
  end
end
`

// luaHeader is luaBase and the helpers of the scripts that move existing
// jobs.
const luaHeader = luaBase + `
local function save(id, m) redis.call('HSET', META, id, cjson.encode(m)) end
local function forget(id)
  redis.call('HDEL', META, id)
  redis.call('HDEL', DATA, id)
end
-- push_ready appends a job to its ready list, or puts it first (front):
-- a rescued job goes back where it was when it was claimed, ahead of the
-- jobs that came after it.
local function push_ready(id, m, front)
  if not LIST[m.p] then m.p = DEFLABEL end
  m.s = 'q'
  local push = 'RPUSH'
  if front then push = 'LPUSH' end
  -- A Claim waits only after finding nothing ready, so a wake-up token is
  -- needed only while the list is short.
  if redis.call(push, LIST[m.p], id) <= 64 then wake() end
  redis.call('HINCRBY', COUNT, 'r:' .. m.p, 1)
  if RC then RC = RC + 1 end
end
-- unready accounts for a queued job leaving its list; a cancelled job's ID
-- stays in the list as a tombstone that Claim skips, so that no script has
-- to search a list.
local function unready(m)
  redis.call('HINCRBY', COUNT, 'r:' .. m.p, -1)
  if RC then RC = RC - 1 end
end
-- schedule puts a retried, deferred or rerun job in the schedule. Such a
-- job does not take its group (as in the in-memory store): only Add
-- reserves a group, for a job it schedules.
local function schedule(id, m, at)
  m.s = 's'
  m.r = at
  redis.call('ZADD', SCHED, at, id)
  if redis.call('ZRANGE', SCHED, 0, 0)[1] == id then wake() end
end
local function release_group(id, m)
  if m.g ~= '' and redis.call('HGET', GROUPS, m.g) == id then redis.call('HDEL', GROUPS, m.g) end
end
local function activate(id, m, now)
  if m.k ~= '' then redis.call('HSET', KEYIDX, m.k, id) end
  if m.r > now then schedule(id, m, m.r) else push_ready(id, m) end
  save(id, m)
end
local function release_key(id, m, now)
  if m.k == '' or redis.call('HGET', KEYIDX, m.k) ~= id then return end
  redis.call('HDEL', KEYIDX, m.k)
  local rr = redis.call('HGET', RERUNS, m.k)
  if rr then
    redis.call('HDEL', RERUNS, m.k)
    local rm = load(rr)
    if rm then activate(rr, rm, now) end
  end
end
local function bury(id, m, now, err)
  release_key(id, m, now)
  release_group(id, m)
  m.s = 'd'
  m.e = err
  m.d = now
  save(id, m)
  redis.call('ZADD', DEAD, now, id)
end
-- remove_pending deletes a queued or scheduled job and its marks.
local function remove_pending(id, m)
  if m.s == 'q' then unready(m) else redis.call('ZREM', SCHED, id) end
  release_group(id, m)
  if m.k ~= '' and redis.call('HGET', KEYIDX, m.k) == id then redis.call('HDEL', KEYIDX, m.k) end
  forget(id)
end
-- promote moves up to batch due jobs to their ready lists; a job that finds
-- the ready jobs at capacity is rescheduled requeue ms later. A due job
-- gives up its group either way: a group holds a job until it is due.
local function promote(now, batch, cap, requeue)
  local ids = redis.call('ZRANGEBYSCORE', SCHED, '-inf', now, 'LIMIT', 0, batch)
  local moved, requeued = 0, {}
  for _, id in ipairs(ids) do
    redis.call('ZREM', SCHED, id)
    local m = load(id)
    if m and m.s == 's' then
      release_group(id, m)
      if ready_count() >= cap then
        m.r = now + requeue
        redis.call('ZADD', SCHED, m.r, id)
        save(id, m)
        for _, v in ipairs({id, m.k, m.t, m.p, m.a}) do table.insert(requeued, v) end
      else
        push_ready(id, m)
        save(id, m)
        moved = moved + 1
      end
    end
  end
  return moved, requeued
end
-- check_lease reports whether tok holds id's lease; if not, whether the job
-- already ended ('gone': a repeated call) or is held or queued elsewhere.
local function check_lease(id, tok)
  local cur = redis.call('HGET', LEASE, id)
  if cur == tok then return nil end
  if not cur then
    local m = load(id)
    if not m or m.s == 'd' then return 'gone' end
  end
  return 'lost'
end
`

// Add: now, capacity, coalesce (1/0), number of seen bitmaps ns, the
// caller's block token, then per job: id, key, group, label, runAt,
// restore (1 ignores capacity and the group, for jobs written back from
// the fallback), index of its seen bitmap among the keys after the ready
// lists, seen offset, meta prefix, payload, index of its block
// registration hash among the keys after the seen bitmaps, its block. The meta
// prefix is the job's meta record as the client encodes it (metaPrefix),
// up to the value of s, which the script appends with the closing quote
// and brace: Add needs no cjson.encode. Jobs are added in order. Returns
// {ready, then per job 'ready', 'sched', 'rerun', 'dup', 'full', 'seen'
// (added before) or 'stale' (its ID block is not registered to the
// caller: see shard.reserve; nothing was done)}.
//
// The seen bit (set first, cleared again when the job is refused) makes
// Add idempotent per ID: a call repeated after a lost reply, or a
// write-back of a job whose first Add may have landed, is a no-op. The
// bitmaps' expiry is kept by the ID reservation (shard.newID).
//
// The writes that no later job of the call reads (records, ready lists,
// counters, wake-up tokens) are gathered and made once per call at the
// end, so that a batch of n jobs costs about n + 6 commands rather than
// 6n; the records written so far are looked up in NEW, so a later job of
// the same call sees an earlier one's key or group.
var scriptAdd = newRawScript("add", luaBase+`
local now, cap, coalesce, NS, TOK = tonumber(arg(1)), tonumber(arg(2)), arg(3) == '1', tonumber(arg(4)), arg(5)
ready_count()
local NEW, METAS, DATAS, PUSH, BLK = {}, {}, {}, {}, {}
-- owned reports whether block blk is registered to the caller.
local function owned(bkey, blk)
  local ok = BLK[blk]
  if ok == nil then
    ok = redis.call('HGET', bkey, blk) == TOK
    BLK[blk] = ok
  end
  return ok
end
local function loadm(id)
  local raw = NEW[id]
  if not raw then return load(id) end
  return cjson.decode(raw)
end
local function add(id, key, grp, label, at, restore, seen, off, pre, payload, bkey, blk)
  if not owned(bkey, blk) then return 'stale' end
  if redis.call('SETBIT', seen, off, 1) == 1 then return 'seen' end
  local state = 'q'
  if tonumber(at) > now then state = 's' end
  if key ~= '' then
    local h = redis.call('HGET', KEYIDX, key)
    if h then
      local hm = loadm(h)
      if not hm or hm.s == 'd' then
        redis.call('HDEL', KEYIDX, key)
      elseif hm.s == 'x' and coalesce and redis.call('HEXISTS', RERUNS, key) == 0 then
        state = 'w'
      else
        redis.call('SETBIT', seen, off, 0)
        return 'dup'
      end
    end
  end
  if state ~= 'w' and not restore then
    if state == 's' then
      if grp ~= '' then
        local gh = redis.call('HGET', GROUPS, grp)
        if gh then
          local gm = loadm(gh)
          if gm and gm.s == 's' then
            redis.call('SETBIT', seen, off, 0)
            return 'dup'
          end
          redis.call('HDEL', GROUPS, grp)
        end
      end
    elseif RC >= cap then
      redis.call('SETBIT', seen, off, 0)
      return 'full'
    end
  end
  local meta = pre .. state .. '"}'
  local status = 'ready'
  if state == 'w' then
    redis.call('HSET', RERUNS, key, id)
    status = 'rerun'
  else
    if key ~= '' then redis.call('HSET', KEYIDX, key, id) end
    if state == 's' then
      redis.call('ZADD', SCHED, at, id)
      if grp ~= '' then redis.call('HSETNX', GROUPS, grp, id) end
      if redis.call('ZRANGE', SCHED, 0, 0)[1] == id then wake() end
      status = 'sched'
    else
      if not LIST[label] then
        local m = cjson.decode(meta)
        m.p = DEFLABEL
        label, meta = DEFLABEL, cjson.encode(m)
      end
      local ids = PUSH[label]
      if not ids then
        ids = {}
        PUSH[label] = ids
      end
      ids[#ids + 1] = id
      RC = RC + 1
    end
  end
  NEW[id] = meta
  METAS[#METAS + 1] = id
  METAS[#METAS + 1] = meta
  DATAS[#DATAS + 1] = id
  DATAS[#DATAS + 1] = payload
  return status
end
local out = {0}
local A, i = ARGV, 2 + NL + 6
while A[i] do
  -- Arguments that go back to Redis stay strings: Redis would format a
  -- number back.
  out[#out + 1] = add(A[i], A[i + 1], A[i + 2], A[i + 3], A[i + 4], A[i + 5] == '1',
    KEYS[12 + NL + tonumber(A[i + 6])], A[i + 7], A[i + 8], A[i + 9],
    KEYS[12 + NL + NS + tonumber(A[i + 10])], A[i + 11])
  i = i + 12
end
if #METAS > 0 then
  redis.call('HSET', META, unpack(METAS))
  redis.call('HSET', DATA, unpack(DATAS))
end
for label, ids in pairs(PUSH) do
  local n = #ids
  local len = redis.call('RPUSH', LIST[label], unpack(ids))
  redis.call('HINCRBY', COUNT, 'r:' .. label, n)
  -- A Claim waits only after finding nothing ready, so a wake-up token is
  -- needed only for the jobs among the first 64 of their list.
  if len - n < 64 then wake(math.min(n, 64 - (len - n))) end
end
out[1] = RC
return out
`)

// AddReady adds plain jobs: no key, no group, due now, not written back
// (Store.runAdd decides). It declares only the keys it touches: KEYS are
// meta, data, count, wake, the ready lists the jobs go to, then their seen
// bitmaps, then their block registration hashes. ARGV: capacity, number of
// those lists m, number of the shard's ready counters nf, number of seen
// bitmaps ns, the caller's block token, the counters' fields, the counter
// field of each of the m lists, then per job: id, index of its list among
// the m, index of its seen bitmap, seen offset, meta record (complete:
// state q), payload, index of its block registration hash, its block.
// Returns {ready, then per job 'ready', 'full', 'seen' or 'stale'}, like
// Add, whose rules for these jobs it applies with about n + 6 commands and
// no cjson.
var scriptAddReady = newRawScript("add-ready", `
local META, DATA, COUNT, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local A = ARGV
local cap, m, nf, ns, tok = tonumber(A[1]), tonumber(A[2]), tonumber(A[3]), tonumber(A[4]), A[5]
local fields = {}
for i = 1, nf do fields[i] = A[5 + i] end
local rc = 0
for _, v in ipairs(redis.call('HMGET', COUNT, unpack(fields))) do rc = rc + (tonumber(v) or 0) end
local out, metas, datas, push, blks = {0}, {}, {}, {}, {}
local i = 6 + nf + m
while A[i] do
  local id, seen, off = A[i], KEYS[4 + m + tonumber(A[i + 2])], A[i + 3]
  local blk = A[i + 7]
  local owned = blks[blk]
  if owned == nil then
    owned = redis.call('HGET', KEYS[4 + m + ns + tonumber(A[i + 6])], blk) == tok
    blks[blk] = owned
  end
  if not owned then
    out[#out + 1] = 'stale'
  elseif redis.call('SETBIT', seen, off, 1) == 1 then
    out[#out + 1] = 'seen'
  elseif rc >= cap then
    redis.call('SETBIT', seen, off, 0)
    out[#out + 1] = 'full'
  else
    rc = rc + 1
    metas[#metas + 1] = id
    metas[#metas + 1] = A[i + 4]
    datas[#datas + 1] = id
    datas[#datas + 1] = A[i + 5]
    local li = tonumber(A[i + 1])
    local ids = push[li]
    if not ids then
      ids = {}
      push[li] = ids
    end
    ids[#ids + 1] = id
    out[#out + 1] = 'ready'
  end
  i = i + 8
end
if #metas > 0 then
  redis.call('HSET', META, unpack(metas))
  redis.call('HSET', DATA, unpack(datas))
end
for li, ids in pairs(push) do
  local n = #ids
  local len = redis.call('RPUSH', KEYS[4 + li], unpack(ids))
  redis.call('HINCRBY', COUNT, A[5 + nf + li], n)
  -- A wake-up token for each job among the first 64 of its list, at
  -- most 64 on the wake list (as Add).
  if len - n < 64 then
    local k = math.min(n, 64 - (len - n), 64 - redis.call('LLEN', WAKE))
    if k > 0 then
      local t = {}
      for j = 1, k do t[j] = '1' end
      redis.call('RPUSH', WAKE, unpack(t))
    end
  end
end
out[1] = rc
return out
`)

// AddOne is add-ready for one job, the lone producer's case, with the
// fewest arguments and commands: KEYS are meta, data, count, wake, the
// job's ready list, its seen bitmap and its block registration hash; ARGV:
// capacity, the list's counter field, id, seen offset, meta record
// (complete: state q), payload, its block, the caller's block token, then
// the shard's ready counters' fields. Returns {ready, 'ready', 'full',
// 'seen' or 'stale'}, as add-ready does. A job among the first 64 of its list pushes
// a wake-up token, and the wake list is trimmed back to 64.
var scriptAddOne = newRawScript("add-one", `
local META, DATA, COUNT, WAKE, LIST, SEEN, BLOCKS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id, off = ARGV[3], ARGV[4]
local rc = 0
for _, v in ipairs(redis.call('HMGET', COUNT, unpack(ARGV, 9))) do rc = rc + (tonumber(v) or 0) end
if redis.call('HGET', BLOCKS, ARGV[7]) ~= ARGV[8] then return {rc, 'stale'} end
if redis.call('SETBIT', SEEN, off, 1) == 1 then return {rc, 'seen'} end
if rc >= tonumber(ARGV[1]) then
  redis.call('SETBIT', SEEN, off, 0)
  return {rc, 'full'}
end
redis.call('HSET', META, id, ARGV[5])
redis.call('HSET', DATA, id, ARGV[6])
if redis.call('RPUSH', LIST, id) <= 64 and redis.call('RPUSH', WAKE, '1') > 64 then
  redis.call('LTRIM', WAKE, 0, 63)
end
redis.call('HINCRBY', COUNT, ARGV[2], 1)
return {rc + 1, 'ready'}
`)

// Claim: now, lease-until, owner, promote batch, capacity, requeue ms, n.
// Claims up to n jobs, highest priority first. Returns {ready, requeued,
// next due (-1 for none), then per job: id, key, group, target, label,
// runAt, attempt, max, lease, payload}.
var scriptClaim = newScript("claim", `
local now, untl, owner = tonumber(arg(1)), tonumber(arg(2)), arg(3)
local _, requeued = promote(now, tonumber(arg(4)), tonumber(arg(5)), tonumber(arg(6)))
local want = tonumber(arg(7))
local out = {0, requeued, -1}
local got, skipped = 0, 0
for i = 1, NL do
  local list = LIST[LABELS[i]]
  while got < want and skipped < 100 do
    local id = redis.call('LPOP', list)
    if not id then break end
    local m = load(id)
    if m and m.s == 'q' then
      unready(m)
      m.a = m.a + 1
      m.s = 'x'
      local tok = owner .. ':' .. m.a
      redis.call('HSET', LEASE, id, tok)
      redis.call('ZADD', RUN, untl, id)
      save(id, m)
      for _, v in ipairs({id, m.k, m.g, m.t, m.p, m.r, m.a, m.m, tok, redis.call('HGET', DATA, id) or ''}) do
        table.insert(out, v)
      end
      got = got + 1
    else
      skipped = skipped + 1
    end
  end
end
if got == 0 and skipped < 100 then
  -- Nothing live: the counters must say so for every empty list (they can
  -- only disagree after keys were edited by hand).
  for i = 1, NL do
    if redis.call('LLEN', LIST[LABELS[i]]) == 0 then redis.call('HSET', COUNT, 'r:' .. LABELS[i], 0) end
  end
  RC = nil
end
if got < want then
  local nxt = redis.call('ZRANGE', SCHED, 0, 0, 'WITHSCORES')
  if nxt[2] then out[3] = nxt[2] end
end
out[1] = ready_count()
return out
`)

// Settle ends claimed jobs: now, then per job: id, lease, mode, at, error.
// Modes: done, dead (to the dead set with error), retry (scheduled at at
// with error), defer (at at, giving the attempt back). A retry or defer of
// a job whose key has a coalesced rerun waiting is dropped in favour of
// the rerun, which becomes the key's job ('superseded'), as in the
// in-memory store. Returns {ready, then per job 'ok', 'superseded', 'gone'
// (already settled: a repeated call) or 'lost' (the lease is no longer the
// caller's)}.
var scriptSettle = newScript("settle", `
local now = tonumber(arg(1))
local function settle(id, tok, mode, at, err)
  local bad = check_lease(id, tok)
  if bad then return bad end
  redis.call('HDEL', LEASE, id)
  redis.call('ZREM', RUN, id)
  local m = load(id)
  if not m then return 'gone' end
  if mode == 'done' then
    release_key(id, m, now)
    release_group(id, m)
    forget(id)
    return 'ok'
  elseif mode == 'dead' then
    bury(id, m, now, err)
    return 'ok'
  end
  if m.k ~= '' and redis.call('HEXISTS', RERUNS, m.k) == 1 then
    release_key(id, m, now)
    forget(id)
    return 'superseded'
  end
  if mode == 'defer' then
    if m.a > 0 then m.a = m.a - 1 end
    if err ~= '' then m.e = err end
  else
    m.e = err
  end
  if at > now then
    schedule(id, m, at)
  else
    m.r = at
    push_ready(id, m)
  end
  save(id, m)
  return 'ok'
end
local out = {0}
local i = 2
while arg(i) do
  table.insert(out, settle(arg(i), arg(i + 1), arg(i + 2), tonumber(arg(i + 3)), arg(i + 4)))
  i = i + 5
end
out[1] = ready_count()
return out
`)

// Cancel: key, mode ('all' cancels the queued or scheduled holder of key
// and its rerun; 'rerun' only the rerun). Returns {n, ready}, n the number
// of jobs cancelled: a rerun waits behind a running job, or behind a queued
// one that a lease rescue put back, so 'all' may cancel two.
var scriptCancel = newScript("cancel", `
local key, mode = arg(1), arg(2)
local n = 0
if mode == 'all' then
  local h = redis.call('HGET', KEYIDX, key)
  if h then
    local m = load(h)
    if m and (m.s == 'q' or m.s == 's') then
      remove_pending(h, m)
      n = 1
    end
  end
end
local rr = redis.call('HGET', RERUNS, key)
if rr then
  redis.call('HDEL', RERUNS, key)
  forget(rr)
  n = n + 1
end
return {n, ready_count()}
`)

// Promote: now, batch, capacity, requeue ms. Returns {moved, requeued, ready}.
var scriptPromote = newScript("promote", `
local moved, requeued = promote(tonumber(arg(1)), tonumber(arg(2)), tonumber(arg(3)), tonumber(arg(4)))
return {moved, requeued, ready_count()}
`)

// Heartbeat: lease-until, then pairs of id and lease. Returns the IDs whose
// lease the caller no longer holds.
var scriptHeartbeat = newScript("heartbeat", `
local untl = tonumber(arg(1))
local lost = {}
local i = 2
while arg(i) do
  local id, tok = arg(i), arg(i + 1)
  if redis.call('HGET', LEASE, id) == tok then
    redis.call('ZADD', RUN, 'XX', untl, id)
  else
    table.insert(lost, id)
  end
  i = i + 2
end
return lost
`)

// Rescue: now, batch, default max attempts. Jobs whose lease expired go
// back to the head of their ready list (they were claimed before the jobs
// now in it; the earliest expired goes first), or to the dead set after
// their last attempt. Every process runs it (Store.rescueLoop): a lease
// is rescued once, by whichever call finds it expired first. Returns
// {ready, id, outcome, key, target, label, attempt, ...}.
var scriptRescue = newScript("rescue", `
local now, batch, defmax = tonumber(arg(1)), tonumber(arg(2)), tonumber(arg(3))
local out = {0}
local ids = redis.call('ZRANGEBYSCORE', RUN, '-inf', now, 'LIMIT', 0, batch)
for k = #ids, 1, -1 do
  local id = ids[k]
  redis.call('ZREM', RUN, id)
  redis.call('HDEL', LEASE, id)
  local m = load(id)
  if m then
    local max = defmax
    if m.m > 0 then max = m.m end
    local outcome = 'ready'
    if m.a >= max then
      outcome = 'dead'
      bury(id, m, now, 'lease expired')
    else
      push_ready(id, m, true)
      save(id, m)
    end
    for _, v in ipairs({id, outcome, m.k, m.t, m.p, m.a}) do table.insert(out, v) end
  end
end
out[1] = ready_count()
return out
`)

// Trim: cutoff (ms), max dead kept, batch. Deletes dead jobs older than
// cutoff or beyond max, oldest first. Returns how many it deleted.
var scriptTrim = newScript("trim", `
local cutoff, max, batch = tonumber(arg(1)), tonumber(arg(2)), tonumber(arg(3))
local ids = redis.call('ZRANGEBYSCORE', DEAD, '-inf', cutoff, 'LIMIT', 0, batch)
local over = redis.call('ZCARD', DEAD) - max
if #ids < batch and over > #ids then
  ids = redis.call('ZRANGE', DEAD, 0, math.min(over, batch) - 1)
end
for _, id in ipairs(ids) do
  redis.call('ZREM', DEAD, id)
  forget(id)
end
return #ids
`)

// Purge: batch. Removes up to batch queued jobs per ready list and batch
// scheduled jobs. Returns {removed, more (1/0), ready}.
var scriptPurge = newScript("purge", `
local batch = tonumber(arg(1))
local n, more = 0, 0
for i = 1, NL do
  local list = LIST[LABELS[i]]
  for _ = 1, batch do
    local id = redis.call('LPOP', list)
    if not id then break end
    local m = load(id)
    if m and m.s == 'q' then
      remove_pending(id, m)
      n = n + 1
    end
  end
  if redis.call('LLEN', list) > 0 then more = 1 end
end
for _, id in ipairs(redis.call('ZRANGE', SCHED, 0, batch - 1)) do
  local m = load(id)
  if m and m.s == 's' then
    remove_pending(id, m)
    n = n + 1
  else
    redis.call('ZREM', SCHED, id)
  end
end
if redis.call('ZCARD', SCHED) > 0 then more = 1 end
return {n, more, ready_count()}
`)

// Leader election: acquisition is a plain SET NX PX; these two
// compare the holder before extending or deleting. KEYS[1] is the leader key.
var (
	scriptLeaderRenew = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)
	scriptLeaderRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)
)

// script is a job script: luaHeader followed by its body (the add script:
// luaBase and its body).
type script struct {
	name string
	*redis.Script
	src  string
	hash any // Hash, boxed once for runArgv
}

func newScript(name, body string) script {
	return newRawScript(name, luaHeader+body)
}

func newRawScript(name, src string) script {
	sc := script{name: name, Script: redis.NewScript(src), src: src}
	sc.hash = sc.Hash()
	return sc
}

// runArgv runs the script with argv: "evalsha", sc.hash, the key count,
// the keys, then the arguments, boxed by the caller, who can keep the
// boxes of its keys (Script.Run boxes every key again and allocates to
// look for NOSCRIPT in every reply). A script Redis lacks (restarted or
// flushed) runs again with EVAL, as with Script.Run.
func (sc script) runArgv(ctx context.Context, c redis.UniversalClient, argv []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, argv...)
	cmd.SetFirstKeyPos(3)
	_ = c.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		argv[0], argv[1] = "eval", sc.src
		cmd = redis.NewCmd(ctx, argv...)
		cmd.SetFirstKeyPos(3)
		_ = c.Process(ctx, cmd)
	}
	return cmd
}

// Reserve: KEYS[1] the ID counter; ARGV: block size, the caller's last
// block. Raises the counter to the caller's last block if it is below
// (Redis lost it: see shard.reserve), then reserves a block and returns
// its last number.
var scriptReserve = newRawScript("reserve", `
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local last = tonumber(ARGV[2])
if cur < last then redis.call('SET', KEYS[1], ARGV[2]) end
return redis.call('INCRBY', KEYS[1], ARGV[1])
`)

// jobScripts lists the job scripts (all but reserve, add-ready and add-one use the
// shared key layout), for loading and for TestScriptsDeclareKeys.
var jobScripts = []script{scriptReserve, scriptAdd, scriptAddReady, scriptAddOne, scriptClaim, scriptSettle, scriptCancel,
	scriptPromote, scriptHeartbeat, scriptRescue, scriptTrim, scriptPurge}
