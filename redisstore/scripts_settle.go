package redisstore

// Settle ends claimed jobs: now, whether to drain the inbox first (1 or
// 0), then per job: id, lease, mode, at, error.
// Modes: done, dead (to the dead set with error), retry (scheduled at at
// with error), defer (at at, giving the attempt back), hold (a defer held
// for the job's target: see scriptReleaseHeld). A retry or defer of
// a job whose key has a coalesced rerun waiting is dropped in favour of
// the rerun, which becomes the key's job ('superseded'), as in the
// in-memory store. Returns {ready, then per job 'ok', 'superseded', 'gone'
// (already settled: a repeated call) or 'lost' (the lease is no longer the
// caller's)}.
var scriptSettle = newScript("settle", `
local now = tonumber(arg(1))
-- A retry due now, or a rerun a job with a key releases, goes to a ready
-- list's tail: after the inbox's jobs, moved first (before any write).
-- The caller says whether any job may (runSettle).
if arg(2) == '1' then drain_all() end
local function settle(id, tok, mode, at, err)
  local bad = check_lease(id, tok)
  if bad then return bad end
  redis.call('HDEL', LEASE, id)
  redis.call('ZREM', RUN, id)
  local m = load(id)
  if not m then return 'gone' end
  uncancel(id, m)
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
  if mode == 'defer' or mode == 'hold' then
    if m.a > 0 then m.a = m.a - 1 end
    if err ~= '' then m.e = err end
  else
    m.e = err
  end
  m.h = nil
  if at > now then
    schedule(id, m, at)
    if mode == 'hold' then
      m.h = 1
      redis.call('ZADD', HELD, at, id)
      redis.call('ZREMRANGEBYSCORE', HELD, '-inf', now) -- holds that have ended
    end
  else
    m.r = at
    push_ready(id, m)
  end
  save(id, m)
  return 'ok'
end
local out = {0}
local i = 3
while arg(i) do
  table.insert(out, settle(arg(i), arg(i + 1), arg(i + 2), tonumber(arg(i + 3)), arg(i + 4)))
  i = i + 5
end
out[1] = ready_count()
return out
`)

// ReleaseHeld: now, target. The jobs held for target (settled with mode
// hold) that are still scheduled and not yet due become due now; holds
// that have ended leave the held set. Returns the number released. It
// reads every job held now, of every target: a Resume is rare, and the
// held set holds only jobs whose hold has not ended.
var scriptReleaseHeld = newScript("release-held", `
local now, target = tonumber(arg(1)), arg(2)
redis.call('ZREMRANGEBYSCORE', HELD, '-inf', now)
local n = 0
for _, id in ipairs(redis.call('ZRANGE', HELD, 0, -1)) do
  local m = load(id)
  if not m or not m.h or m.s ~= 's' then
    redis.call('ZREM', HELD, id)
  elseif m.t == target then
    redis.call('ZREM', HELD, id)
    m.h = nil
    schedule(id, m, now)
    save(id, m)
    n = n + 1
  end
end
return n
`)
