package redisstore

// Add: now, capacity, coalesce (1/0), number of seen bitmaps ns, the
// caller's block token, the lease shift (ms; see lease_now), then per job:
// id, key, group, label, runAt,
// restore (1 ignores capacity and the group, for jobs written back from
// the fallback), index of its seen bitmap among the keys after the ready
// lists, seen offset, meta prefix, payload, index of its block
// registration hash among the keys after the seen bitmaps, its block, its
// unique window (ms, 0 for none), its enqueue time (ms: its score in the
// ready index, and c in the meta prefix). The meta
// prefix is the job's meta record as the client encodes it (metaPrefix),
// up to the value of s, which the script appends with the closing quote
// and brace: Add needs no cjson.encode. Jobs are added in order. Returns
// {ready, then per job 'ready', 'sched', 'rerun', 'dup', 'window' (its
// key is in a unique window), 'full', 'seen' (added before) or 'stale'
// (its ID block is not registered to the caller: see shard.reserve;
// nothing was done)}.
//
// Unique windows: a job with a key is refused while the key's mark in
// UNIQUE (a sorted set of keys by the end of their window, in lease time:
// Redis's TIME, so every process agrees) has not expired, before any other
// check, so a running key in its window is not coalesced; a job accepted
// with a window sets its key's mark. A job written back from the fallback
// (restore) was accepted already: it neither checks nor sets a mark.
// Expired marks are dropped by the rescue script's janitor pass.
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
local now, cap, coalesce, NS, TOK, SHIFT = tonumber(arg(1)), tonumber(arg(2)), arg(3) == '1', tonumber(arg(4)), arg(5), tonumber(arg(6))
-- Before any write: a window check reads TIME after this script's first
-- writes (see lease_now).
redis.replicate_commands()
ready_count()
-- unow is the lease clock, read once and only by a call that needs it.
local UNOW = nil
local function unow()
  if not UNOW then UNOW = lease_now(SHIFT) end
  return UNOW
end
local NEW, METAS, DATAS, PUSH, BLK, IDX = {}, {}, {}, {}, {}, {}
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
local function add(id, key, grp, label, at, restore, seen, off, pre, payload, bkey, blk, win, created)
  if not owned(bkey, blk) then return 'stale' end
  if redis.call('SETBIT', seen, off, 1) == 1 then return 'seen' end
  local state = 'q'
  if tonumber(at) > now then state = 's' end
  if key ~= '' and not restore then
    local u = redis.call('ZSCORE', UNIQUE, key)
    if u and tonumber(u) > unow() then
      redis.call('SETBIT', seen, off, 0)
      return 'window'
    end
  end
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
      IDX[#IDX + 1] = created
      IDX[#IDX + 1] = pad(id)
      RC = RC + 1
    end
  end
  if win > 0 and not restore then redis.call('ZADD', UNIQUE, unow() + win, key) end
  NEW[id] = meta
  METAS[#METAS + 1] = id
  METAS[#METAS + 1] = meta
  DATAS[#DATAS + 1] = id
  DATAS[#DATAS + 1] = payload
  return status
end
local out = {0}
local A, i = ARGV, 2 + NL + 7
while A[i] do
  -- Arguments that go back to Redis stay strings: Redis would format a
  -- number back.
  out[#out + 1] = add(A[i], A[i + 1], A[i + 2], A[i + 3], A[i + 4], A[i + 5] == '1',
    KEYS[18 + NL + tonumber(A[i + 6])], A[i + 7], A[i + 8], A[i + 9],
    KEYS[18 + NL + NS + tonumber(A[i + 10])], A[i + 11], tonumber(A[i + 12]), A[i + 13])
  i = i + 14
end
if #METAS > 0 then
  redis.call('HSET', META, unpack(METAS))
  redis.call('HSET', DATA, unpack(DATAS))
end
if #IDX > 0 then redis.call('ZADD', RIDX, unpack(IDX)) end
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
// meta, data, count, wake, the ready index, the ready lists the jobs go to, then their seen
// bitmaps, then their block registration hashes. ARGV: capacity, number of
// those lists m, number of the shard's ready counters nf, number of seen
// bitmaps ns, the caller's block token, the counters' fields, the counter
// field of each of the m lists, then per job: id, index of its list among
// the m, index of its seen bitmap, seen offset, meta record (complete:
// state q), payload, index of its block registration hash, its block, its
// enqueue time (ms, its score in the ready index).
// Returns {ready, then per job 'ready', 'full', 'seen' or 'stale'}, like
// Add, whose rules for these jobs it applies with about n + 6 commands and
// no cjson.
var scriptAddReady = newRawScript("add-ready", `
local META, DATA, COUNT, WAKE, RIDX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local A = ARGV
local cap, m, nf, ns, tok = tonumber(A[1]), tonumber(A[2]), tonumber(A[3]), tonumber(A[4]), A[5]
local fields = {}
for i = 1, nf do fields[i] = A[5 + i] end
local rc = 0
for _, v in ipairs(redis.call('HMGET', COUNT, unpack(fields))) do rc = rc + (tonumber(v) or 0) end
local out, metas, datas, push, blks, idx = {0}, {}, {}, {}, {}, {}
local i = 6 + nf + m
while A[i] do
  local id, seen, off = A[i], KEYS[5 + m + tonumber(A[i + 2])], A[i + 3]
  local blk = A[i + 7]
  local owned = blks[blk]
  if owned == nil then
    owned = redis.call('HGET', KEYS[5 + m + ns + tonumber(A[i + 6])], blk) == tok
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
    idx[#idx + 1] = A[i + 8]
    idx[#idx + 1] = string.rep('0', 20 - #id) .. id
    out[#out + 1] = 'ready'
  end
  i = i + 9
end
if #metas > 0 then
  redis.call('HSET', META, unpack(metas))
  redis.call('HSET', DATA, unpack(datas))
  redis.call('ZADD', RIDX, unpack(idx))
end
for li, ids in pairs(push) do
  local n = #ids
  local len = redis.call('RPUSH', KEYS[5 + li], unpack(ids))
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
// ready index, the job's ready list and its seen bitmap; ARGV: capacity,
// the list's counter field, id, seen offset, meta record (complete: state
// q), payload, the bit offset of its block's registration in the seen
// bitmap (regOffset), the caller's token as registered there (tokenN),
// its enqueue time (ms), then the shard's ready counters' fields. Returns
// {ready, 'ready', 'full', 'seen' or 'stale'}, as add-ready does. One
// BITFIELD reads the block's registration and sets the seen bit; a stale
// call clears the bit again only if it set it (a bit already set belongs
// to the job another process added under that number). A job among the
// first 64 of its list pushes a wake-up token, and the wake list is
// trimmed back to 64.
var scriptAddOne = newRawScript("add-one", `
local META, DATA, COUNT, WAKE, RIDX, LIST, SEEN = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local id, off = ARGV[3], ARGV[4]
local rc = 0
for _, v in ipairs(redis.call('HMGET', COUNT, unpack(ARGV, 10))) do rc = rc + (tonumber(v) or 0) end
local b = redis.call('BITFIELD', SEEN, 'GET', '`+regType+`', ARGV[7], 'SET', 'u1', off, 1)
if b[1] ~= tonumber(ARGV[8]) then
  if b[2] == 0 then redis.call('SETBIT', SEEN, off, 0) end
  return {rc, 'stale'}
end
if b[2] == 1 then return {rc, 'seen'} end
if rc >= tonumber(ARGV[1]) then
  redis.call('SETBIT', SEEN, off, 0)
  return {rc, 'full'}
end
redis.call('HSET', META, id, ARGV[5])
redis.call('HSET', DATA, id, ARGV[6])
redis.call('ZADD', RIDX, ARGV[9], string.rep('0', 20 - #id) .. id)
if redis.call('RPUSH', LIST, id) <= 64 and redis.call('RPUSH', WAKE, '1') > 64 then
  redis.call('LTRIM', WAKE, 0, 63)
end
redis.call('HINCRBY', COUNT, ARGV[2], 1)
return {rc + 1, 'ready'}
`)

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
