#!/usr/bin/env bash
# Load benchmark of the tracker forwarder beside opentracker (a measurement,
# not a test: scripts/test.sh does not run it).
#
#   one opentracker on 127.0.0.1 (Debian's build, whitelist mode, the
#   benchmark's torrents listed) and the forwarder (examples/forwarder, its
#   default queue settings) in front of it as its one upstream. wrk runs the
#   same load (scripts/loadbench.lua: announces over LOADBENCH_TORRENTS
#   torrents, each from a new random peer) first against opentracker
#   directly, then against the forwarder, and the script prints both p50 and
#   p99 latencies and the forwarder's p99 over opentracker's.
#
# Settings (environment):
#   LOADBENCH_DURATION     each wrk run, default 30s
#   LOADBENCH_THREADS      wrk -t, default 1
#   LOADBENCH_CONNECTIONS  wrk -c, default 50
#   LOADBENCH_TORRENTS     default 10000
#   LOADBENCH_FORWARDER_FLAGS  extra flags for the forwarder
#   LOADBENCH_FORWARDER_BIN    a forwarder binary to run instead of building
#                              this checkout's (to compare two versions)
#
# Missing tools (wrk, opentracker, curl) are installed with apt-get. Every
# process the script starts is stopped by its pid when it exits.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${LOADBENCH_DURATION:-30s}
THREADS=${LOADBENCH_THREADS:-1}
CONNS=${LOADBENCH_CONNECTIONS:-50}
TORRENTS=${LOADBENCH_TORRENTS:-10000}
PREFIX=6c6f616462656e63682d746f7272656e # "loadbench-torren"
NAME=loadbench
# shellcheck source=lib/procs.sh
. "$(dirname "$0")/lib/procs.sh"

# ---- tools
missing=()
for t in wrk opentracker curl; do
	command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ "${#missing[@]}" -gt 0 ]; then
	say "installing ${missing[*]} from Debian's packages"
	SUDO=
	[ "$(id -u)" -ne 0 ] && SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq >/dev/null
	$SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v go >/dev/null 2>&1 || fail "go not found"

WORK=$(mktemp -d /tmp/loadbench.XXXXXX)
chmod 755 "$WORK"

# ---- ports: free TCP and UDP ports on 127.0.0.1
used=$(ss -Htuan 2>/dev/null | awk '{print $5}' | sed 's/.*://' | sort -u)
picked=
OT_PORT=$(pick_port)
FWD_PORT=$(pick_port)

if [ -n "${LOADBENCH_FORWARDER_BIN:-}" ]; then
	cp "$LOADBENCH_FORWARDER_BIN" "$WORK/forwarder"
else
	say "building the forwarder"
	(cd "$ROOT/examples" && go build -o "$WORK/forwarder" ./forwarder) || fail "build failed"
fi

# ---- opentracker. Debian builds it in whitelist mode: list every torrent
# of the benchmark. It drops root (-u nobody) and chroots into its
# directory, so the config names the whitelist relative to it.
OTDIR="$WORK/ot"
mkdir -p "$OTDIR"
for ((i = 0; i < TORRENTS; i++)); do
	printf '%s%08x\n' "$PREFIX" "$i"
done >"$OTDIR/wl.txt"
printf 'access.whitelist /wl.txt\naccess.stats 127.0.0.1\n' >"$OTDIR/ot.conf"
chmod 755 "$OTDIR"
chmod 644 "$OTDIR/wl.txt" "$OTDIR/ot.conf"
OT_ARGS=(-i 127.0.0.1 -p "$OT_PORT" -P "$OT_PORT" -f "$OTDIR/ot.conf" -d "$OTDIR")
[ "$(id -u)" -eq 0 ] && OT_ARGS+=(-u nobody)
opentracker "${OT_ARGS[@]}" >"$WORK/opentracker.log" 2>&1 &
PIDS+=($!)

# opentracker loads its whitelist after it starts answering; until then it
# refuses every torrent. Wait until it accepts the last one listed.
LAST=$(printf '%s%08x' "$PREFIX" $((TORRENTS - 1)) | sed 's/../%&/g')
accepts_last() {
	curl -sf "http://127.0.0.1:$OT_PORT/announce?info_hash=$LAST&peer_id=-LB0001-probeprobe01&port=1&uploaded=0&downloaded=0&left=1&numwant=0&compact=1" |
		grep -q '^d8:complete'
}
wait_for "opentracker to load its whitelist" 20 accepts_last

# ---- the forwarder, its default queue settings
# shellcheck disable=SC2086 # LOADBENCH_FORWARDER_FLAGS is a list of flags
"$WORK/forwarder" -listen "127.0.0.1:$FWD_PORT" -upstream "ot=http://127.0.0.1:$OT_PORT/announce" \
	${LOADBENCH_FORWARDER_FLAGS:-} >"$WORK/forwarder.log" 2>&1 &
PIDS+=($!)
wait_for "the forwarder" 20 curl -sf "http://127.0.0.1:$FWD_PORT/stats"

metric() { # metric NAME: the forwarder's /metrics value of NAME (no labels)
	curl -sf "http://127.0.0.1:$FWD_PORT/metrics" | awk -v n="$1" '$1 == n {print $2}'
}

# run NAME PORT: one wrk run; sets p50, p99 (µs) and prints the details.
run() {
	local name=$1 port=$2 out
	out=$(LOADBENCH_TORRENTS=$TORRENTS LOADBENCH_PREFIX=$PREFIX \
		wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/scripts/loadbench.lua" \
		"http://127.0.0.1:$port/announce" 2>&1) || fail "wrk against $name: $out"
	local line
	line=$(grep '^LOADBENCH ' <<<"$out") || fail "no summary from wrk against $name: $out"
	local requests p50_us p99_us max_us failures non200 sockerr duration_us
	eval "$(sed 's/^LOADBENCH //; s/ /;/g' <<<"$line")"
	[ "$requests" -gt 0 ] || fail "no requests completed against $name"
	awk -v n="$name" -v r="$requests" -v d="$duration_us" -v a="$p50_us" -v b="$p99_us" -v m="$max_us" -v f="$failures" -v e="$non200" -v k="$sockerr" \
		'BEGIN { printf "%-12s %8d req (%6.0f/s)  p50 %6.2f ms  p99 %6.2f ms  max %7.2f ms  failure replies %d  non-200 %d  socket errors %d\n", n, r, r * 1e6 / d, a / 1e3, b / 1e3, m / 1e3, f, e, k }' 
	RES_P50=$p50_us RES_P99=$p99_us
}

say "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs; wrk -t$THREADS -c$CONNS -d$DURATION, $TORRENTS torrents, a new random peer per announce"
run opentracker "$OT_PORT"
OT_P50=$RES_P50 OT_P99=$RES_P99
gc0=$(metric go_gc_duration_seconds_count)
run forwarder "$FWD_PORT"
FWD_P50=$RES_P50 FWD_P99=$RES_P99
gc1=$(metric go_gc_duration_seconds_count)
heap=$(metric go_memstats_heap_inuse_bytes)
peers=$(metric forwarder_peers)
limited=$(curl -sf "http://127.0.0.1:$FWD_PORT/metrics" | awk '$1 == "forwarder_announces_total{result=\"rate_limited\"}" {print $2}')
say "forwarder: $(awk -v a="${gc0:-0}" -v b="${gc1:-0}" 'BEGIN { printf "%.0f", b - a }') GCs during its run, heap in use $(awk -v h="${heap:-0}" 'BEGIN { printf "%.0f", h / 1048576 }') MiB, ${peers:-?} peers held, ${limited:-0} announces refused (tracker busy)"
say "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
awk -v a="$OT_P50" -v b="$FWD_P50" -v c="$OT_P99" -v d="$FWD_P99" \
	'BEGIN { printf "RESULT p50 opentracker %.2f ms, forwarder %.2f ms; p99 opentracker %.2f ms, forwarder %.2f ms; p99 ratio %.2f\n", a / 1e3, b / 1e3, c / 1e3, d / 1e3, d / c }'
