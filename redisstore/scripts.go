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
//	KEYS[1..18]  meta, data, lease, run, sched, keys, reruns, groups, dead,
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
//	             h while it is held)
//	KEYS[19..]   the shard's ready lists, highest priority first, then
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
// w coalesced rerun, d dead), e last error, d dead-at (ms), c enqueued-at
// (ms, the queue's clock), u claimed-at (ms, the claim's now), x cancel
// requested (admin Cancel of a running job), md the job's metadata
// (queue.Meta's JSON text as a string; absent when it has none, so a job
// without metadata costs nothing, and records written before Meta read as
// none). cjson rewrites md as the string it is, byte for byte.
//
// The ready index (readyidx) is a sorted set of every job in a ready
// list, scored by its enqueue time (c) with its ID zero-padded to 20
// digits as the member (pad), so that jobs enqueued in one millisecond
// sort by ID: the admin API pages ready jobs by keyset through it
// (scriptZPage) while claims pop the lists. Every script that pushes a job
// to a ready list adds it, and every one that takes a job out removes it,
// O(log n) each; a cancelled job's tombstone in its list is not indexed.
const luaBase = `
local META, DATA, LEASE, RUN, SCHED, KEYIDX, RERUNS, GROUPS, DEAD, COUNT, WAKE, SEEN, UNIQUE, RIDX, PAUSED, CANCEL, DEADKEYS, HELD =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13],
  KEYS[14], KEYS[15], KEYS[16], KEYS[17], KEYS[18]
local NL = tonumber(ARGV[1])
local DEFLABEL = ARGV[2]
local LABELS, LIST = {}, {}
for i = 1, NL do
  LABELS[i] = ARGV[2 + i]
  LIST[ARGV[2 + i]] = KEYS[18 + i]
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
  redis.call('ZADD', RIDX, m.c or 0, pad(id))
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
var jobScripts = []script{scriptReserve, scriptAdd, scriptAddReady, scriptAddOne, scriptClaim, scriptSettle, scriptCancel,
	scriptReleaseHeld, scriptPromote, scriptHeartbeat, scriptRescue, scriptTrim, scriptPurge, scriptAdmin, scriptZPage}
