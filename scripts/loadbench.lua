-- wrk script for scripts/loadbench.sh: BitTorrent announces over a fixed set
-- of torrents, each from a new random peer.
--
-- Torrent i (0 <= i < LOADBENCH_TORRENTS, default 10 000) has the info hash
-- LOADBENCH_PREFIX (32 hex digits) followed by i as 8 hex digits: the same
-- hashes loadbench.sh writes into opentracker's whitelist. Each request picks
-- a torrent, a peer id, a port and a left (seeder one time in four) at
-- random; compact=1, numwant 50 (the default of both trackers).
--
-- done() prints one line that loadbench.sh reads:
--   LOADBENCH requests=N p50_us=N p99_us=N max_us=N failures=N busy=N non200=N sockerr=N duration_us=N
-- where failures counts bencoded failure replies ("failure reason", e.g.
-- "tracker busy" or "not authorized"), busy those that say "busy", non200
-- the replies with another HTTP status and sockerr the socket errors.

local torrents = tonumber(os.getenv("LOADBENCH_TORRENTS") or "10000")
local prefix = os.getenv("LOADBENCH_PREFIX") or "6c6f616462656e63682d746f7272656e"
local hashes = {}
failures = 0 -- globals: done() reads them from each thread
busy = 0
local threads = {}

local function pct(hex)
  return (hex:gsub("..", "%%%0"))
end

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 100000)
  local p = pct(prefix)
  for i = 0, torrents - 1 do
    hashes[i] = p .. pct(string.format("%08x", i))
  end
end

local hexdigits = "0123456789abcdef"
local function randhex(n)
  local t = {}
  for i = 1, n do
    local k = math.random(1, 16)
    t[i] = hexdigits:sub(k, k)
  end
  return table.concat(t)
end

function request()
  local h = hashes[math.random(0, torrents - 1)]
  -- "-LB0001-" and 12 random bytes, percent-encoded
  local peer = "-LB0001-" .. pct(randhex(24))
  local left = 0
  if math.random(1, 4) ~= 1 then
    left = math.random(1, 1000000000)
  end
  local path = "/announce?info_hash=" .. h .. "&peer_id=" .. peer ..
    "&port=" .. math.random(1024, 65535) .. "&uploaded=0&downloaded=0&left=" .. left ..
    "&compact=1&numwant=50"
  return wrk.format("GET", path)
end

function response(status, headers, body)
  if status == 200 and body:find("failure reason", 1, true) then
    failures = failures + 1
    if body:find("busy", 1, true) then
      busy = busy + 1
    end
  end
end

function done(summary, latency, requests)
  local f, b = 0, 0
  for _, t in ipairs(threads) do
    f = f + (tonumber(t:get("failures")) or 0)
    b = b + (tonumber(t:get("busy")) or 0)
  end
  local e = summary.errors
  io.write(string.format("LOADBENCH requests=%d p50_us=%d p99_us=%d max_us=%d failures=%d busy=%d non200=%d sockerr=%d duration_us=%d\n",
    summary.requests, latency:percentile(50), latency:percentile(99), latency.max, f, b,
    e.status, e.connect + e.read + e.write + e.timeout, summary.duration))
end
