package redisstore

import "github.com/redis/go-redis/v9"

// Rescue: now, batch, default max attempts, lease shift (ms; see
// lease_now). Jobs whose lease expired by the lease clock go
// back to the head of their ready list (they were claimed before the jobs
// now in it; the earliest expired goes first), or to the dead set after
// their last attempt, or, when an operator cancelled them (admin Cancel),
// end cancelled. Every process runs it (Store.rescueLoop): a lease
// is rescued once, by whichever call finds it expired first. Returns
// {ready, id, outcome, key, target, label, attempt, ...}.
var scriptRescue = newScript("rescue", `
local now, batch, defmax = tonumber(arg(1)), tonumber(arg(2)), tonumber(arg(3))
local out = {0}
local lnow = lease_now(tonumber(arg(4)))
-- A batch of the inboxes' jobs (see promote), after lease_now, which
-- precedes every write: every process runs this, so the inboxes of a
-- queue nobody claims from drain too.
drain(1000)
local ids = redis.call('ZRANGEBYSCORE', RUN, '-inf', lnow, 'LIMIT', 0, batch)
for k = #ids, 1, -1 do
  local id = ids[k]
  redis.call('ZREM', RUN, id)
  redis.call('HDEL', LEASE, id)
  local m = load(id)
  if m then
    local max = defmax
    if m.m > 0 then max = m.m end
    local outcome = 'ready'
    if m.x then
      -- An operator cancelled it while it ran (admin Cancel): it ends
      -- cancelled rather than running again.
      outcome = 'cancelled'
      uncancel(id, m)
      release_key(id, m, now)
      release_group(id, m)
      forget(id)
    elseif m.a >= max then
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

// Trim: cutoff (ms), max dead kept, batch, lease shift (ms; see
// lease_now). Deletes dead jobs older than cutoff or beyond max, oldest
// first, and unique-window marks whose windows ended by the lease clock,
// up to batch of each. Returns the larger of the two counts.
var scriptTrim = newScript("trim", `
local cutoff, max, batch = tonumber(arg(1)), tonumber(arg(2)), tonumber(arg(3))
local marks = redis.call('ZRANGEBYSCORE', UNIQUE, '-inf', lease_now(tonumber(arg(4))), 'LIMIT', 0, batch)
if #marks > 0 then redis.call('ZREM', UNIQUE, unpack(marks)) end
local ids = redis.call('ZRANGEBYSCORE', DEAD, '-inf', cutoff, 'LIMIT', 0, batch)
local over = redis.call('ZCARD', DEAD) - max
if #ids < batch and over > #ids then
  ids = redis.call('ZRANGE', DEAD, 0, math.min(over, batch) - 1)
end
for _, id in ipairs(ids) do
  local m = load(id)
  if m then unbury(id, m) else redis.call('ZREM', DEAD, id) end
  forget(id)
end
return math.max(#ids, #marks)
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
