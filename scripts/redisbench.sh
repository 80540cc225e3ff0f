#!/usr/bin/env bash
# One producer's enqueue rate on Redis beside the physical limit, in one
# run: `redis-benchmark -c 1 PING` (one connection, one request at a time:
# a round trip and nothing else) interleaved with redisstore's
# BenchmarkEnqueueOne (queue: Queue.Enqueue of one ready job; store: the
# store's Add alone; many: EnqueueMany of BATCH jobs per call; ping: a
# go-redis PING) and, when the bench module builds, asynq's
# Client.Enqueue from bench's BenchmarkEnqueueOneProducer/asynq. Each
# round runs PING, queue, store, PING, many, asynq, PING; the PING rate
# of a round is the mean of its three runs, and the ratios are taken
# within the round. Median latencies (redis-benchmark's p50, the Go
# benchmarks' p50-µs/op) are printed too: on a loaded machine the rates
# swing with the scheduler, the medians much less. Targets (docs/benchmarks.md): queue ≥ 0.9× PING;
# many ≥ 5× asynq.
#
# Where a round's time goes: "script µs" is Redis's own time per EVALSHA
# during the store run (INFO commandstats, before and after: on a Redis
# that other clients use, their scripts are counted too, so give the
# benchmark a Redis of its own); "ceiling÷PING" is the best any client
# could do with that script, redis-benchmark's PING round trip plus the
# script's time (1 / (1 + PING/s × script s)); "asynq µs" is Redis's
# time per EVALSHA during the asynq run (its enqueue script), beside
# "script µs"; "queue÷asynq" is Queue.Enqueue's rate over asynq's in the
# round; "queue÷goPING" sets Queue.Enqueue beside go-redis's own PING,
# the floor of a Go client. "asynq÷PING" is asynq's rate over PING's, and
# "3cmd÷PING" is redis-benchmark's own rate (C client, one connection)
# for the smallest check-then-write enqueue script there is, EXISTS then
# HSET then LPUSH on a fresh key (asynq's shape, no capacity check), over
# PING's: what a server-side check costs any client.
#
#   scripts/redisbench.sh                 # 3 rounds of 20000 ops each
#   ROUNDS=5 N=50000 BATCH=100 scripts/redisbench.sh
#   REDISSTORE_TEST=/tmp/before.test BENCH_TEST=/tmp/bench.test scripts/redisbench.sh
#   MODE=against BASE=main ROUNDS=5 scripts/redisbench.sh
#
# MODE=against sets the working tree beside a base commit (BASE, default
# main; its tree exported with git archive, built beside this one) on two
# Redis servers of its own (free ports; persistence off: --save ""
# --appendonly no; AOF: --appendonly yes --appendfsync everysec), stopped
# by PID at the end. Per round and server it runs, new then base (the
# order swapped every other round): bench's
# BenchmarkEnqueueOneProducer/interleaved-lone (Queue.Enqueue of a lone
# producer and asynq's Client.Enqueue alternated op by op; x-asynq is
# their ratio, N ops each) and redisstore's BenchmarkBurnDown
# (BURN_JOBS, default 20000, jobs, 100 workers; BURN=0 skips it) and
# BenchmarkEnqueue/producers=10 (N jobs from ten producers, nothing
# claiming; MANY=0 skips it). It prints per run x-asynq, and per round
# new ÷ base of x-asynq, of the burn-down rate and of the ten producers'.
#
# Redis: QUEUE_REDIS_ADDR (default 127.0.0.1:6379); the benchmarks work
# under key prefixes of their own and delete them.
set -euo pipefail
cd "$(dirname "$0")/.."

addr="${QUEUE_REDIS_ADDR:-127.0.0.1:6379}"
host="${addr%:*}"
port="${addr##*:}"
rounds="${ROUNDS:-3}"
n="${N:-20000}"
batch="${BATCH:-100}"
export QUEUE_REDIS_ADDR="$addr" QUEUE_BENCH_BATCH="$batch"

for bin in redis-benchmark redis-cli go; do
  command -v "$bin" >/dev/null || { echo "redisbench: $bin not found (apt-get install redis-server)" >&2; exit 1; }
done
redis-cli -h "$host" -p "$port" ping >/dev/null || { echo "redisbench: no Redis at $addr" >&2; exit 1; }

# whole V prints V rounded to a whole number, or "-" as it is.
whole() { awk -v v="$1" 'BEGIN { if (v == "-" || v == "") print "-"; else printf "%.0f", v }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ "${MODE:-}" = against ]; then
  base="${BASE:-main}"
  burnjobs="${BURN_JOBS:-20000}"
  mkdir -p "$tmp/base" "$tmp/new" "$tmp/src"
  git archive "$base" | tar -x -C "$tmp/src"
  for side in new base; do
    dir=.
    [ "$side" = base ] && dir="$tmp/src"
    (cd "$dir/bench" && go test -tags redisstore -c -o "$tmp/$side/bench.test" .)
    (cd "$dir/redisstore" && go test -c -o "$tmp/$side/redisstore.test" .)
  done
  pids=()
  stop() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
  }
  trap stop EXIT
  ports=()
  for mode in off aof; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    mkdir -p "$tmp/redis-$mode"
    args=(--port "$port" --bind 127.0.0.1 --save "" --dir "$tmp/redis-$mode" --daemonize no)
    if [ "$mode" = aof ]; then args+=(--appendonly yes --appendfsync everysec); else args+=(--appendonly no); fi
    redis-server "${args[@]}" >"$tmp/redis-$mode.log" 2>&1 &
    pids+=($!)
    ports+=("$port")
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
  # lone BIN PORT prints x-asynq and Queue.Enqueue's µs a job.
  lone() {
    QUEUE_REDIS_ADDR="127.0.0.1:$2" "$1" -test.run '^$' -test.bench 'EnqueueOneProducer/interleaved-lone$' \
      -test.benchtime "${n}x" -test.count 1 2>/dev/null |
      awk '{ for (i = 2; i <= NF; i++) { if ($i == "x-asynq") x = $(i-1); if ($i == "redisstore-µs/job") q = $(i-1) } } END { printf "%s %s\n", x, q }'
  }
  # burn BIN PORT prints the burn-down's jobs/s.
  burn() {
    [ "${BURN:-1}" = 0 ] && { echo "-"; return; }
    QUEUE_REDIS_ADDR="127.0.0.1:$2" QUEUE_BENCH_JOBS="$burnjobs" QUEUE_BENCH_WORKERS=100 "$1" -test.run '^$' \
      -test.bench 'BurnDown$' -test.benchtime 1x -test.count 1 2>/dev/null |
      awk '{ for (i = 2; i <= NF; i++) if ($i == "jobs/s") v = $(i-1) } END { print v }'
  }
  # many BIN PORT prints redisstore's BenchmarkEnqueue/producers=10 jobs/s
  # (ten producers, nothing claiming; N jobs).
  many() {
    [ "${MANY:-1}" = 0 ] && { echo "-"; return; }
    QUEUE_REDIS_ADDR="127.0.0.1:$2" "$1" -test.run '^$' -test.bench 'BenchmarkEnqueue/producers=10$' \
      -test.benchtime "${n}x" -test.count 1 2>/dev/null |
      awk '{ for (i = 2; i <= NF; i++) if ($i == "jobs/s") v = $(i-1) } END { print v }'
  }
  echo "redisbench against $base ($(git rev-parse --short "$base")): $(redis-server --version | awk '{print $3}'), $rounds rounds, $n ops per lone run, burn-down $burnjobs jobs; load $(cut -d' ' -f1-3 /proc/loadavg)"
  printf '%-5s %-4s | %9s %9s %9s | %11s %11s %9s | %9s %9s %9s\n' round pers "new÷asynq" "base÷asynq" "new÷base" "new burn/s" "base burn/s" "new÷base" \
    "new 10p/s" "base 10p/s" "new÷base"
  for r in $(seq 1 "$rounds"); do
    for k in 0 1; do
      mode=off
      [ "$k" = 1 ] && mode=aof
      port="${ports[$k]}"
      order=(new base)
      [ $((r % 2)) = 0 ] && order=(base new)
      declare -A x b m
      for side in "${order[@]}"; do
        read -r xs _ < <(lone "$tmp/$side/bench.test" "$port")
        x[$side]=$xs
      done
      for side in "${order[@]}"; do
        b[$side]=$(burn "$tmp/$side/redisstore.test" "$port")
      done
      for side in "${order[@]}"; do
        m[$side]=$(many "$tmp/$side/redisstore.test" "$port")
      done
      # many prints "-" when MANY=0: the rates are printed as strings,
      # rounded by whole().
      printf '%-5s %-4s | %9s %9s %9s | %11s %11s %9s | %9s %9s %9s\n' "$r" "$mode" "${x[new]}" "${x[base]}" "$(ratio "${x[new]}" "${x[base]}")" \
        "${b[new]}" "${b[base]}" "$(ratio "${b[new]}" "${b[base]}")" "$(whole "${m[new]}")" "$(whole "${m[base]}")" "$(ratio "${m[new]}" "${m[base]}")"
    done
  done
  echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  exit 0
fi
# REDISSTORE_TEST and BENCH_TEST name test binaries built already (say,
# of two commits, to set them side by side); by default both are built
# from the working tree.
if [ -n "${REDISSTORE_TEST:-}" ]; then
  cp "$REDISSTORE_TEST" "$tmp/redisstore.test"
else
  (cd redisstore && go test -c -o "$tmp/redisstore.test" .)
fi
have_asynq=0
if [ -n "${BENCH_TEST:-}" ]; then
  cp "$BENCH_TEST" "$tmp/bench.test" && have_asynq=1
elif (cd bench && go test -tags redisstore -c -o "$tmp/bench.test" .) 2>/dev/null; then
  have_asynq=1
fi

# ping prints redis-benchmark's PING requests per second and its median
# latency in µs.
ping() {
  redis-benchmark -h "$host" -p "$port" -c 1 -n "$n" -q PING 2>/dev/null | tr '\r' '\n' |
    awk '/requests per second/ { for (i = 1; i <= NF; i++) { if ($(i+1) == "requests") v = $i; if ($i ~ /^p50=/) { sub(/^p50=/, "", $i); p = $i * 1000 } } }
      END { printf "%s %.0f\n", v, p }'
}

# gobench BIN PATTERN ITERATIONS prints the jobs/s and the p50-µs/op the
# benchmark reports.
gobench() {
  "$1" -test.run '^$' -test.bench "$2" -test.benchtime "$3x" -test.count 1 2>/dev/null |
    awk '{ for (i = 2; i <= NF; i++) { if ($i == "jobs/s") v = $(i-1); if ($i == "p50-µs/op") p = $(i-1) } } END { printf "%s %.0f\n", v, p }'
}

# asynqrate prints asynq's enqueues per second (from its µs/job).
asynqrate() {
  [ "$have_asynq" = 1 ] || { echo "-"; return; }
  "$tmp/bench.test" -test.run '^$' -test.bench 'EnqueueOneProducer/asynq$' -test.benchtime "$1x" -test.count 1 2>/dev/null |
    awk '{ for (i = 2; i <= NF; i++) if ($i == "µs/job") v = $(i-1) } END { if (v > 0) printf "%.0f\n", 1e6 / v }'
}

# evalsha prints Redis's count of EVALSHA calls and their total µs.
evalsha() {
  redis-cli -h "$host" -p "$port" info commandstats | tr -d '\r' |
    awk -F'[:=,]' '/^cmdstat_evalsha:/ { c = $3; u = $5 } END { printf "%d %d\n", c, u }'
}

# threecmd prints redis-benchmark's requests per second for a three-command
# enqueue script: EXISTS a fresh key, HSET it (a 100-byte value), LPUSH
# its name.
threecmd() {
  local sha
  sha=$(redis-cli -h "$host" -p "$port" script load "if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end redis.call('HSET', KEYS[1], 'msg', ARGV[1], 'state', 'pending') redis.call('LPUSH', KEYS[2], KEYS[1]) return 1")
  redis-benchmark -h "$host" -p "$port" -c 1 -n "$n" -r 1000000000 -q EVALSHA "$sha" 2 "redisbench:3cmd:__rand_int__" redisbench:3cmd:list \
    "$(printf '%0100d' 0)" 2>/dev/null | tr '\r' '\n' | awk '/requests per second/ { for (i = 1; i <= NF; i++) if ($(i+1) == "requests") v = $i } END { print v }'
  redis-cli -h "$host" -p "$port" eval "for _, k in ipairs(redis.call('KEYS', 'redisbench:3cmd:*')) do redis.call('DEL', k) end" 0 >/dev/null
}


echo "redisbench: $(redis-server --version | awk '{print $3}') at $addr, $rounds rounds, $n ops per run, batch $batch; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-5s %9s %9s %9s %9s %9s %9s | %8s %8s %8s | %10s %10s %10s %11s | %9s %9s %12s %12s | %10s %9s\n' round "PING/s" "goPING/s" "queue/s" "store/s" "many/s" "asynq/s" \
  "PING p50" "goPING" "queue" "queue÷PING" "store÷PING" "many÷asynq" "queue÷asynq" "script µs" "asynq µs" "ceiling÷PING" "queue÷goPING" "asynq÷PING" "3cmd÷PING"
for r in $(seq 1 "$rounds"); do
  read -r p1 l1 < <(ping)
  read -r q lq < <(gobench "$tmp/redisstore.test" 'EnqueueOne/queue$' "$n")
  read -r c0 u0 < <(evalsha)
  read -r s _ < <(gobench "$tmp/redisstore.test" 'EnqueueOne/store$' "$n")
  read -r c1 u1 < <(evalsha)
  read -r p2 l2 < <(ping)
  read -r m _ < <(gobench "$tmp/redisstore.test" 'EnqueueOne/many$' $(((n + batch - 1) / batch)))
  read -r c2 u2 < <(evalsha)
  a=$(asynqrate "$n")
  read -r c3 u3 < <(evalsha)
  read -r g lg < <(gobench "$tmp/redisstore.test" 'EnqueueOne/ping$' "$n")
  t=$(threecmd)
  read -r p3 l3 < <(ping)
  p=$(awk -v a="$p1" -v b="$p2" -v c="$p3" 'BEGIN { printf "%.0f", (a + b + c) / 3 }')
  l=$(awk -v a="$l1" -v b="$l2" -v c="$l3" 'BEGIN { printf "%.0f", (a + b + c) / 3 }')
  su=$(awk -v c="$((c1 - c0))" -v u="$((u1 - u0))" 'BEGIN { if (c > 0) printf "%.1f", u / c; else print "-" }')
  au=$(awk -v c="$((c3 - c2))" -v u="$((u3 - u2))" 'BEGIN { if (c > 0) printf "%.1f", u / c; else print "-" }')
  ceil=$(awk -v p="$p" -v u="$su" 'BEGIN { if (u == "-") print "-"; else printf "%.2f", 1 / (1 + p * u / 1e6) }')
  printf '%-5s %9.0f %9.0f %9.0f %9.0f %9.0f %9s | %8s %8s %8s | %10s %10s %10s %11s | %9s %9s %12s %12s | %10s %9s\n' "$r" "$p" "$g" "$q" "$s" "$m" "$a" \
    "${l}µs" "${lg}µs" "${lq}µs" "$(ratio "$q" "$p")" "$(ratio "$s" "$p")" "$(ratio "$m" "$a")" "$(ratio "$q" "$a")" "$su" "$au" "$ceil" "$(ratio "$q" "$g")" \
    "$(ratio "$a" "$p")" "$(ratio "$t" "$p")"
done
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
