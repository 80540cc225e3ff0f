package redisstore

// Add: now, capacity, coalesce (1/0), number of seen bitmaps ns, the
// caller's block token, the lease shift (ms; see lease_now), then per job:
// id, key, group, label, runAt,
// restore (1 ignores capacity and the group, for jobs written back from
// the fallback), index of its seen bitmap among the keys after the ready
// lists, seen offset, meta prefix, payload, index of its block
// registration hash among the keys after the seen bitmaps, its block, its
// unique window (ms, 0 for none), its enqueue time (ms, c in the meta
// prefix; unused by the script). A job it makes ready is not put in the
// ready index (see scriptIndexReady). The meta
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
-- Jobs in the inboxes were accepted before this call's: they go first.
while drain(1000) > 0 do end
ready_count()
-- unow is the lease clock, read once and only by a call that needs it.
local UNOW = nil
local function unow()
  if not UNOW then UNOW = lease_now(SHIFT) end
  return UNOW
end
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
    elseif not room(1, cap) then
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
    KEYS[19 + NL + tonumber(A[i + 6])], A[i + 7], A[i + 8], A[i + 9],
    KEYS[19 + NL + NS + tonumber(A[i + 10])], A[i + 11], tonumber(A[i + 12]), A[i + 13])
  i = i + 14
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
// meta, data, count, wake, the ready index (declared, unused: see
// scriptIndexReady), the ready lists the jobs go to, then their seen
// bitmaps, then their block registration hashes, then the inboxes hash
// and the inbox the caller believes current (see inbox.go). ARGV: capacity, number of
// those lists m, number of the shard's ready counters nf, number of seen
// bitmaps ns, the caller's block token, the counters' fields, the counter
// field of each of the m lists, then per job: id, index of its list among
// the m, index of its seen bitmap, seen offset, meta record (complete:
// state q), payload, index of its block registration hash, its block, its
// enqueue time (ms; unused).
// Returns {ready, then per job 'ready', 'full', 'seen' or 'stale'}, like
// Add, whose rules for these jobs it applies with about n + 6 commands and
// no cjson; or {ready, 'drain', the current inbox's epoch or empty},
// having written nothing, when the inbox holds jobs (they go first) or is
// not the one named, or permits out may be in the way of the capacity:
// the add script then adds the jobs, and the caller learns the inbox's
// name (see shard.learnInbox).
var scriptAddReady = newRawScript("add-ready", `
local META, DATA, COUNT, WAKE = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local A = ARGV
local cap, m, nf, ns, tok = tonumber(A[1]), tonumber(A[2]), tonumber(A[3]), tonumber(A[4]), A[5]
local fields = {}
for i = 1, nf do fields[i] = A[5 + i] end
local rc = 0
local v = redis.call('HMGET', COUNT, 'res', unpack(fields))
local res = tonumber(v[1]) or 0
for i = 2, #v do rc = rc + (tonumber(v[i]) or 0) end
-- The inbox's jobs (see inbox.go) were accepted before: they go first,
-- and permits out make the capacity check inexact. The add script
-- handles both (Store.runAdd): the inbox's entries are not this
-- script's to move, and a revoke drains them.
-- res counts the inbox's entries not yet drained too: with none out,
-- the inbox is empty and the capacity check exact.
if res > 0 then
  local E = redis.call('HGET', KEYS[#KEYS - 1], 'epoch')
  if E and (string.sub(META, 1, -6) .. ':inbox:' .. E ~= KEYS[#KEYS] or redis.call('LLEN', KEYS[#KEYS]) > 1) then
    return {rc, 'drain', E}
  end
  if rc + res + (#A - 5 - nf - m) / 9 > cap then return {rc, 'drain', E or ''} end
end
local out, metas, datas, push, blks = {0}, {}, {}, {}, {}
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
    out[#out + 1] = 'ready'
  end
  i = i + 9
end
if #metas > 0 then
  redis.call('HSET', META, unpack(metas))
  redis.call('HSET', DATA, unpack(datas))
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
// job's ready list, its seen bitmap, the inboxes hash, the inbox the
// caller believes current and the inbox it would open (see inbox.go);
// ARGV: capacity, the list's counter field, id, seen offset, meta record
// (complete: state q), payload, the bit offset of its block's
// registration in the seen bitmap (regOffset), the caller's token as
// registered there (tokenN), the inbox permits it asks for, the epoch of
// the inbox it would open, the job's sequence number and label (for
// an inbox entry), 'res', then the shard's ready counters' fields. Like
// every push to a ready list's tail, it leaves the job out of the ready
// index (see scriptIndexReady). Returns {ready, status, permits granted,
// the current inbox's epoch or empty}, status 'ready', 'full', 'seen' or
// 'stale' as add-ready's, 'revoke' (nothing written: permits out are in
// the way of the capacity; the add script revokes them) or 'inbox'
// (nothing written: the current inbox is another than named). When the
// inbox holds jobs the job goes to its tail, after them, on a permit
// granted and used at once. One
// BITFIELD reads the block's registration and sets the seen bit; a stale
// call clears the bit again only if it set it (a bit already set belongs
// to the job another process added under that number). A job among the
// first 64 of its list pushes a wake-up token, and the wake list is
// trimmed back to 64.
var scriptAddOne = newRawScript("add-one", `
local META, DATA, COUNT, WAKE, LIST, SEEN, INBOXES, INBOX, NEWINBOX = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local id, off, cap, nonce = ARGV[3], ARGV[4], tonumber(ARGV[1]), ARGV[10]
local v = redis.call('HMGET', COUNT, unpack(ARGV, 13))
local res = tonumber(v[1]) or 0
local rc = 0
for i = 2, #v do rc = rc + (tonumber(v[i]) or 0) end
-- The caller names the inbox it believes current; told otherwise, it
-- calls again (nothing written).
local E = redis.call('HGET', INBOXES, 'epoch')
if E and string.sub(META, 1, -6) .. ':inbox:' .. E ~= INBOX then return {rc, 'inbox', 0, E} end
-- The inbox holds jobs accepted before: this one goes after them.
local queued = E and redis.call('LLEN', INBOX) > 1
local b
if queued then
  b = redis.call('BITFIELD', SEEN, 'GET', '`+regType+`', ARGV[7], 'GET', 'u1', off)
else
  b = redis.call('BITFIELD', SEEN, 'GET', '`+regType+`', ARGV[7], 'SET', 'u1', off, 1)
end
if b[1] ~= tonumber(ARGV[8]) then
  if b[2] == 0 and not queued then redis.call('SETBIT', SEEN, off, 0) end
  return {rc, 'stale'}
end
if b[2] == 1 then return {rc, 'seen'} end
if rc + res >= cap then
  if not queued then redis.call('SETBIT', SEEN, off, 0) end
  if res > 0 then return {rc, 'revoke'} end
  return {rc, 'full'}
end
if queued then
  -- Into the inbox, on a permit granted and used at once.
  redis.call('RPUSH', INBOX, id .. ',' .. ARGV[11] .. ',' .. #ARGV[12] .. ',' .. string.format('%08d', #ARGV[5]) .. ',' .. ARGV[12] .. ARGV[5] .. ARGV[6])
  res = res + 1
  redis.call('RPUSH', WAKE, '1')
  redis.call('LTRIM', WAKE, 0, 63)
else
  redis.call('HSET', META, id, ARGV[5])
  redis.call('HSET', DATA, id, ARGV[6])
  if redis.call('RPUSH', LIST, id) <= 64 and redis.call('RPUSH', WAKE, '1') > 64 then
    redis.call('LTRIM', WAKE, 0, 63)
  end
  redis.call('HINCRBY', COUNT, ARGV[2], 1)
  rc = rc + 1
end
local want, k = tonumber(ARGV[9]), 0
if want > 0 then
  k = math.min(want, math.floor((cap - rc - res) / 8))
  if k >= 16 then
    if not E then
      -- A new inbox, under the caller's fresh epoch: permits granted for
      -- an inbox revoked or lost never reach this one.
      E = nonce
      redis.call('HSET', INBOXES, 'epoch', E)
      redis.call('RPUSH', NEWINBOX, '')
    end
  else
    k = 0
  end
end
local add = k
if queued then add = add + 1 end
if add > 0 then redis.call('HINCRBY', COUNT, 'res', add) end
return {rc, 'ready', k, E or ''}
`)

// Inbox: arg(1) 'drain' or 'revoke'. Drains the inbox (see inbox.go)
// into the ready lists, and with 'revoke' deletes it too, returning the
// permits not used. Returns the ready count.
var scriptInbox = newScript("inbox", `
if arg(1) == 'revoke' then
  revoke()
else
  while drain(1000) > 0 do end
end
return ready_count()
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
