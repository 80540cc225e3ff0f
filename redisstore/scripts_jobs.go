package redisstore

// Cancel: key, mode ('all' cancels the queued or scheduled holder of key
// and its rerun; 'rerun' only the rerun). Returns {n, ready}, n the number
// of jobs cancelled: a rerun waits behind a running job, or behind a queued
// one that a lease rescue put back, so 'all' may cancel two.
var scriptCancel = newScript("cancel", `
local key, mode = arg(1), arg(2)
-- The inboxes' jobs were accepted before this call: drained first.
while drain(1000) > 0 do end
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

// Promote: now, batch, capacity, requeue ms. Returns {moved, requeued,
// ready, next due (-1 for none)}.
var scriptPromote = newScript("promote", `
-- The inboxes' jobs were accepted before this call: drained first (a
-- batch, as a claim does), so that Len counts them by the next poll.
drain(1000)
local moved, requeued = promote(tonumber(arg(1)), tonumber(arg(2)), tonumber(arg(3)), tonumber(arg(4)))
local nxt = redis.call('ZRANGE', SCHED, 0, 0, 'WITHSCORES')
return {moved, requeued, ready_count(), nxt[2] or -1}
`)

// Purge: batch. Removes up to batch queued jobs per ready list and batch
// scheduled jobs. Returns {removed, more (1/0), ready}.
var scriptPurge = newScript("purge", `
local batch = tonumber(arg(1))
-- The inboxes' jobs were accepted before this call: drained first.
while drain(1000) > 0 do end
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
    else
      redis.call('ZREM', RIDX, pad(id)) -- a tombstone (see scriptIndexReady)
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
