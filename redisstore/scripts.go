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
//	KEYS[1..19]  meta, data, lease, run, sched, keys, reruns, groups, dead,
//	             count, wake, seen (a placeholder, kept so that the
//	             layout stays fixed), unique (the unique-window marks: a
//	             sorted set of keys by the end of their window, in lease
//	             time; see lease_now), readyidx (the ready index, below),
//	             paused (the admin API's pause flag: the claim script
//	             claims nothing while it exists), cancel (the running jobs
//	             an operator asked to cancel: a set of IDs the heartbeat
//	             script reports), deadkeys (key -> the newest dead job
//	             with it, for the admin API's GetKey), held (the jobs
//	             held back for their target, queue.HoldStore: a sorted
//	             set of IDs by the end of their hold; the job's meta says
//	             h while it is held), inboxes (names the inbox; see
//	             inbox.go)
//	KEYS[20..]   the shard's ready lists, highest priority first, then
//	             (add only) the seen bitmaps and block registrations of
//	             the jobs being added, then the drain keys (the inbox and
//	             the seen bitmaps a drain reaches; see drain)
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
// w coalesced rerun, d dead), e last error, d dead-at (ms), c enqueued-at
// (ms, the queue's clock), u claimed-at (ms, the claim's now), x cancel
// requested (admin Cancel of a running job), md the job's metadata
// (queue.Meta's JSON text as a string; absent when it has none, so a job
// without metadata costs nothing, and records written before Meta read as
// none). cjson rewrites md as the string it is, byte for byte.
//
// The ready index (readyidx) is a sorted set of the jobs in the ready
// lists, scored by its enqueue time (c) with its ID zero-padded to 20
// digits as the member (pad), so that jobs enqueued in one millisecond
// sort by ID: the admin API pages ready jobs by keyset through it
// (scriptZPage) while claims pop the lists. It is brought up to date when
// it is read, not when a job is added: a job pushed to the tail of a list
// (every add, a promotion, a retry) is not indexed then, so that the
// enqueue path pays nothing for it; scriptIndexReady, which the admin API
// runs before it pages ready jobs, indexes each list's unindexed tail.
// Only a job put back at a list's head (a rescue) is indexed at once, so
// the unindexed jobs of a list are always its last ones (tombstones
// aside). Every script that takes a job out removes it, O(log n) (a no-op
// for a job not indexed yet); a cancelled job's tombstone in its list is
// not indexed.
const luaBase = `
local META, DATA, LEASE, RUN, SCHED, KEYIDX, RERUNS, GROUPS, DEAD, COUNT, WAKE, SEEN, UNIQUE, RIDX, PAUSED, CANCEL, DEADKEYS, HELD, INBOXES =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13],
  KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18], KEYS[19]
local NL = tonumber(ARGV[1])
local DEFLABEL = ARGV[2]
local LABELS, LIST = {}, {}
for i = 1, NL do
  LABELS[i] = ARGV[2 + i]
  LIST[ARGV[2 + i]] = KEYS[19 + i]
end
local function arg(i) return ARGV[2 + NL + i] end
-- pad is a job's member in the ready index: its ID zero-padded to 20
-- digits, so that members of one score sort by ID.
local function pad(id) return string.rep('0', 20 - #id) .. id end
-- lease_now returns the lease clock plus off ms: Redis's own clock (TIME,
-- in ms) shifted by how far the queue's clock moved beyond real time (see
-- lease.go), so that every process judges leases by one clock. Scripts
-- call it before they write: TIME is non-deterministic, which Redis 5 and
-- later allow by replicating a script's effects (replicate_commands turns
-- that on where a server's configuration turned it off; from Redis 7 it is
-- a no-op).
local function lease_now(off)
  redis.replicate_commands()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + off
end

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
-- The inbox (see inbox.go): INBOXES holds epoch, the name of the queue's
-- current inbox, the list TAG:inbox:<epoch>, whose first element is a
-- sentinel; none while no permits are out. The count hash's res holds the
-- permits granted and not used. The keys a drain reaches by name, the
-- inbox and the seen bitmaps of its entries, are declared at the end of
-- KEYS (the drain keys, which the client learns): a drain that would
-- touch a key not declared writes nothing and fails with the error
-- 'INBOXKEYS <key> ... INBOXEND' naming every key it needs, and the
-- client calls again with those declared (shard.run). Every script
-- drains before its first write, so such a failure leaves nothing half
-- done.
local TAG = string.sub(META, 1, -6)
local DK = nil
local function declared(k)
  if not DK then
    DK = {}
    for i = 1, #KEYS do DK[KEYS[i]] = true end
  end
  return DK[k]
end
-- RES is the count hash's res (read by used()).
local RES = nil
-- drain moves up to max jobs from the inbox to the tails of their ready
-- lists, in order, and returns how many entries it took. An entry is
-- 'id,seq,label length,meta length (8 digits),' then the label, the meta
-- record and the payload; the label names the ready list (a label this
-- process does not serve is reached by name, a drain key). An entry whose
-- seen bit is set already (a push repeated after a lost reply, or a job
-- written back through the add script) is dropped and uses no permit. It
-- reads every entry it takes before it writes; when a key it needs is not
-- declared it fails (see above), or with soft returns -1, having written
-- nothing.
local function drain(max, soft)
  local E = redis.call('HGET', INBOXES, 'epoch')
  if not E then return 0 end
  local key = TAG .. ':inbox:' .. E
  local need = {key}
  local missing = not declared(key)
  local es = {}
  if not missing then
    local n = math.min(redis.call('LLEN', key) - 1, max)
    if n <= 0 then return 0 end
    es = redis.call('LRANGE', key, 1, n)
    local seens = {}
    for _, e in ipairs(es) do
      local seq, ll, p = string.match(e, '^%d+,(%d+),(%d+),%d+,()')
      if seq then
        local sk = TAG .. ':seen:' .. math.floor(tonumber(seq) / 1048576)
        -- A label this process does not serve: its list, by name.
        local label = string.sub(e, p, p + tonumber(ll) - 1)
        local lk = TAG .. ':ready:' .. label
        if not LIST[label] and not seens[lk] then
          seens[lk] = true
          need[#need + 1] = lk
          if not declared(lk) then missing = true end
        end
        if not seens[sk] then
          seens[sk] = true
          need[#need + 1] = sk
          if not declared(sk) then missing = true end
        end
      end
    end
  end
  if missing then
    if soft then return -1 end
    error('INBOXKEYS ' .. table.concat(need, ' ') .. ' INBOXEND')
  end
  redis.call('LTRIM', key, #es, -1)
  redis.call('LSET', key, 0, '')
  local acc = 0
  local metas, datas, push = {}, {}, {}
  for _, e in ipairs(es) do
    local id, seq, ll, ml, p = string.match(e, '^(%d+),(%d+),(%d+),(%d+),()')
    if id then
      seq = tonumber(seq)
      if redis.call('SETBIT', TAG .. ':seen:' .. math.floor(seq / 1048576), seq % 1048576, 1) == 0 then
        ll, ml = tonumber(ll), tonumber(ml)
        -- The entry names its list (the priority's label), not a
        -- position: processes may list different priorities.
        local label = string.sub(e, p, p + ll - 1)
        p = p + ll
        metas[#metas + 1] = id
        metas[#metas + 1] = string.sub(e, p, p + ml - 1)
        datas[#datas + 1] = id
        datas[#datas + 1] = string.sub(e, p + ml)
        local ids = push[label]
        if not ids then
          ids = {}
          push[label] = ids
        end
        ids[#ids + 1] = id
        acc = acc + 1
      end
    end
  end
  if acc == 0 then return #es end
  redis.call('HINCRBY', COUNT, 'res', -acc)
  if RES then RES = RES - acc end
  redis.call('HSET', META, unpack(metas))
  redis.call('HSET', DATA, unpack(datas))
  for label, ids in pairs(push) do
    redis.call('RPUSH', LIST[label] or (TAG .. ':ready:' .. label), unpack(ids))
    redis.call('HINCRBY', COUNT, 'r:' .. label, #ids)
    if RC and LIST[label] then RC = RC + #ids end
  end
  return #es
end
-- drain_all drains the whole inbox: for a script about to put a job at a
-- ready list's tail, which must not pass the inbox's jobs.
local function drain_all()
  while drain(1000) > 0 do end
end
-- revoke drains the inbox, then deletes it, returning the permits not
-- used: a push on them finds no inbox and takes the add script, and the
-- next grant opens an inbox under a new epoch. With soft it reports
-- false, having deleted nothing, when a drain key is missing.
local function revoke(soft)
  while true do
    local n = drain(1000, soft)
    if n < 0 then return false end
    if n == 0 then break end
  end
  local E = redis.call('HGET', INBOXES, 'epoch')
  if E then
    redis.call('DEL', TAG .. ':inbox:' .. E)
    redis.call('HDEL', INBOXES, 'epoch')
  end
  redis.call('HDEL', COUNT, 'res')
  RES = nil
  return true
end
-- used is what counts against the capacity: the ready jobs and the
-- permits granted and not used.
local function used()
  if not RES then RES = tonumber(redis.call('HGET', COUNT, 'res') or '0') end
  return ready_count() + RES
end
-- room reports whether n more ready jobs fit, revoking the permits out
-- when they alone are in the way. It may run after a script's first
-- writes: the revoke is soft (a drain key missing, the permits stay out
-- and the jobs do not fit this time).
local function room(n, cap)
  if used() + n <= cap then return true end
  if RES > 0 and revoke(true) then
    return used() + n <= cap
  end
  return false
end
-- wake pushes up to n wake-up tokens, keeping at most 64 on the list;
-- WOKE counts the tokens the script pushed.
local WOKE = 0
local function wake(n)
  n = math.min(n or 1, 64 - redis.call('LLEN', WAKE))
  if n > 0 then WOKE = WOKE + n end
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
  -- The tail's jobs are indexed when the index is read (index_ready).
  if front then redis.call('ZADD', RIDX, m.c or 0, pad(id)) end
  redis.call('HINCRBY', COUNT, 'r:' .. m.p, 1)
  if RC then RC = RC + 1 end
end
-- unready accounts for a queued job leaving its list; a cancelled job's ID
-- stays in the list as a tombstone that Claim skips, so that no script has
-- to search a list.
-- A script that takes many jobs out (claim) sets UNIDX to a table and
-- removes them from the ready index with one ZREM at its end (unindex).
local UNIDX = nil
local function unindex()
  if UNIDX and #UNIDX > 0 then redis.call('ZREM', RIDX, unpack(UNIDX)) end
  UNIDX = nil
end
local function unready(id, m)
  if UNIDX then UNIDX[#UNIDX + 1] = pad(id) else redis.call('ZREM', RIDX, pad(id)) end
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
-- uncancel drops the cancel request of a job that leaves the running
-- state (see the admin script).
local function uncancel(id, m)
  if m.x then
    redis.call('SREM', CANCEL, id)
    m.x = nil
  end
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
  uncancel(id, m)
  release_key(id, m, now)
  release_group(id, m)
  m.s = 'd'
  m.e = err
  m.d = now
  save(id, m)
  redis.call('ZADD', DEAD, now, id)
  if m.k ~= '' then redis.call('HSET', DEADKEYS, m.k, id) end
end
-- unbury drops a dead job leaving the dead set from the dead keys.
local function unbury(id, m)
  redis.call('ZREM', DEAD, id)
  if m.k ~= '' and redis.call('HGET', DEADKEYS, m.k) == id then redis.call('HDEL', DEADKEYS, m.k) end
end
-- remove_pending deletes a queued or scheduled job and its marks.
local function remove_pending(id, m)
  if m.s == 'q' then unready(id, m) else redis.call('ZREM', SCHED, id) end
  release_group(id, m)
  if m.k ~= '' and redis.call('HGET', KEYIDX, m.k) == id then redis.call('HDEL', KEYIDX, m.k) end
  forget(id)
end
-- promote moves up to batch due jobs to their ready lists; a job that finds
-- the ready jobs at capacity is rescheduled requeue ms later. A due job
-- gives up its group either way: a group holds a job until it is due.
local function promote(now, batch, cap, requeue)
  local ids = redis.call('ZRANGEBYSCORE', SCHED, '-inf', now, 'LIMIT', 0, batch)
  -- Due jobs go after the inbox's (accepted before they became due):
  -- before promote's first write.
  if #ids > 0 then drain_all() end
  local moved, requeued = 0, {}
  for _, id in ipairs(ids) do
    redis.call('ZREM', SCHED, id)
    local m = load(id)
    if m and m.s == 's' then
      release_group(id, m)
      if not room(1, cap) then
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

// jobScripts lists the job scripts (all but reserve, add-ready and add-one use the
// shared key layout), for loading and for TestScriptsDeclareKeys.
var jobScripts = []script{scriptReserve, scriptAdd, scriptAddReady, scriptAddOne, scriptInbox, scriptClaim, scriptSettle, scriptCancel,
	scriptReleaseHeld, scriptPromote, scriptHeartbeat, scriptRescue, scriptTrim, scriptPurge, scriptAdmin, scriptZPage,
	scriptIndexReady}
