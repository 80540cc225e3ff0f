package redisstore

// Claim: now, lease offset (ms after the lease clock, lease_now), owner,
// promote batch, capacity, requeue ms, n, prefs. Claims up to n jobs,
// highest priority first; under weighted dispatch byte i of prefs is the
// (1-based) ready list claim i tries first, "" for strict priorities.
// Returns {ready, requeued, next due (-1 for none), then per job: id, key,
// group, target, label, runAt, attempt, max, lease, payload, metadata
// (the record's md, empty for none)}; or, while
// the queue is paused (the admin API's flag), {ready, requeued, -1,
// 'paused'}.
var scriptClaim = newScript("claim", `
local now, untl, owner = tonumber(arg(1)), lease_now(tonumber(arg(2))), arg(3)
drain(1000)
local _, requeued = promote(now, tonumber(arg(4)), tonumber(arg(5)), tonumber(arg(6)))
-- Paused by the admin API: promotion goes on, claims do not.
if redis.call('EXISTS', PAUSED) == 1 then return {ready_count(), requeued, -1, 'paused'} end
local want = tonumber(arg(7))
local prefs = arg(8) or ''
UNIDX = {}
local out = {0, requeued, -1}
local got, skipped = 0, 0
local empty = {}
-- take claims list i's first live job; false when the list has none.
local function take(i)
  if empty[i] then return false end
  local list = LIST[LABELS[i]]
  while skipped < 100 do
    local id = redis.call('LPOP', list)
    if not id then
      empty[i] = true
      return false
    end
    local m = load(id)
    if m and m.s == 'q' then
      unready(id, m)
      m.a = m.a + 1
      m.s = 'x'
      m.u = now
      local tok = owner .. ':' .. m.a
      redis.call('HSET', LEASE, id, tok)
      redis.call('ZADD', RUN, untl, id)
      save(id, m)
      for _, v in ipairs({id, m.k, m.g, m.t, m.p, m.r, m.a, m.m, tok, redis.call('HGET', DATA, id) or '', m.md or ''}) do
        table.insert(out, v)
      end
      got = got + 1
      return true
    end
    -- A tombstone leaves the ready index too (scriptIndexReady indexes
    -- the ones it finds among a list's unindexed jobs).
    UNIDX[#UNIDX + 1] = pad(id)
    skipped = skipped + 1
  end
  return false
end
while got < want and skipped < 100 do
  local p = string.byte(prefs, got + 1)
  local ok = p ~= nil and p <= NL and take(p)
  if not ok then
    for i = 1, NL do
      if take(i) then
        ok = true
        break
      end
    end
  end
  if not ok then break end
end
unindex()
-- The jobs this call promoted pushed wake-up tokens; the ones it claimed
-- need none: take back as many of those tokens (the last pushed), before
-- any BLPOP is served, so that a promotion whose job the call claims
-- itself wakes no other Claim to find nothing.
local back = math.min(WOKE, got)
if back > 0 then redis.call('LTRIM', WAKE, 0, -back - 1) end
if got == 0 and skipped < 100 then
  -- Nothing live: the counters must say so for every empty list (they can
  -- only disagree after keys were edited by hand).
  for i = 1, NL do
    if redis.call('LLEN', LIST[LABELS[i]]) == 0 then redis.call('HSET', COUNT, 'r:' .. LABELS[i], 0) end
  end
  RC = nil
end
-- The next due time, also for a call that claimed all it wanted: its
-- process learns it (see due.go).
local nxt = redis.call('ZRANGE', SCHED, 0, 0, 'WITHSCORES')
if nxt[2] then out[3] = nxt[2] end
out[1] = ready_count()
return out
`)

// Heartbeat: lease offset (ms after the lease clock, lease_now), then
// pairs of id and lease. Returns the IDs whose lease the caller no longer
// holds, and 'c' followed by the ID for each job whose lease it holds
// (and extends) that an operator asked to cancel (the cancel set).
var scriptHeartbeat = newScript("heartbeat", `
local untl = lease_now(tonumber(arg(1)))
local lost = {}
local i = 2
while arg(i) do
  local id, tok = arg(i), arg(i + 1)
  if redis.call('HGET', LEASE, id) == tok then
    redis.call('ZADD', RUN, 'XX', untl, id)
    if redis.call('SISMEMBER', CANCEL, id) == 1 then table.insert(lost, 'c' .. id) end
  else
    table.insert(lost, id)
  end
  i = i + 2
end
return lost
`)
