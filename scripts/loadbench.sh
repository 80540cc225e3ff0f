#!/usr/bin/env bash
# Load benchmark of the tracker forwarder beside opentracker (a measurement,
# not a test: scripts/test.sh does not run it).
#
#   One opentracker on 127.0.0.1 (Debian's build, whitelist mode, the
#   benchmark's torrents listed); for each forwarder run a fresh forwarder
#   (examples/forwarder, its default queue settings) in front of it as its
#   one upstream. The load is announces over LOADBENCH_TORRENTS torrents,
#   each from a new random peer (examples/announceload, the same announces
#   as scripts/loadbench.lua), so that every announce the forwarder
#   answers is a peer to forward.
#
#   1. capacity: announceload unpaced (-c connections, closed loop) against
#      opentracker: its answers per second are its capacity C on this
#      machine now.
#   2. paced: for each percentage in LOADBENCH_PACED (default "50 90"),
#      announceload at that share of C, on a fixed schedule with latency
#      counted from each request's due time (wrk2-style), against
#      opentracker and then each forwarder variant, interleaved.
#   3. unpaced: wrk (-t1 -c50, scripts/loadbench.lua; announceload -rate 0
#      without wrk) against opentracker and each variant.
#
#   The last lines (SUMMARY) give, for each step and variant over all
#   rounds, the median of its p99 ratios to opentracker's and how many
#   rounds were within 2x (3x unpaced).
#
#   Each forwarder run prints the announces refused as busy, the forwards
#   done (announces sent upstream) per 1 000 client announces answered,
#   forwards shed by admission, and the CPU the forwarder spent: while
#   loaded, per client announce; and, after the load stops, while it
#   drains its queue, per forward (the cost of one forwarded announce, with
#   no client traffic beside it). Each opentracker run prints the CPU
#   opentracker spent per announce answered. Every run prints the load generator's
#   own CPU (user + system, in % of one CPU): wrk is one thread, and near
#   100 % the latencies it measures include its own queueing. Lines
#   starting RESULT compare each variant's p99 with opentracker's in the
#   same round.
#
# Settings (environment):
#   LOADBENCH_DURATION     each run, default 20s
#   LOADBENCH_CONNECTIONS  connections, default 50
#   LOADBENCH_TORRENTS     default 10000
#   LOADBENCH_PACED        percentages of capacity, default "50 90"
#   LOADBENCH_ROUNDS       rounds of paced and unpaced runs, default 1;
#                          even rounds run the variants in reverse order
#   LOADBENCH_UNPACED      0 skips the unpaced runs
#   LOADBENCH_FORWARDER_FLAGS  extra flags for every forwarder variant
#   LOADBENCH_FORWARDER_BIN    a forwarder binary to run instead of building
#                              this checkout's (variant "forwarder")
#   LOADBENCH_BASELINE_BIN     a second forwarder binary (variant "baseline"),
#                              run after "forwarder" (before it in even
#                              rounds) in every step: before
#                              and after a change, interleaved in one run
#   LOADBENCH_TORRENT_MODE     1 adds the variant "fwd-torrent": this
#                              checkout's forwarder with -forward torrent
#   LOADBENCH_UDP              1 adds the variant "fwd-udp": this checkout's
#                              forwarder announcing to opentracker over UDP
#                              (BEP 15) instead of HTTP
#   LOADBENCH_CLOSE            1 sends every announce on a connection of its
#                              own ("Connection: close", announceload
#                              -close), to the forwarder as to opentracker
#                              (which closes every connection anyway), and
#                              runs the unpaced step with announceload
#                              -rate 0 -close instead of wrk: both trackers
#                              then accept a connection per announce, and
#                              the generator does the same work for each
#   LOADBENCH_EXTRA            NAME=FLAGS adds the variant NAME: this
#                              checkout's forwarder with FLAGS (e.g.
#                              "w2=-w 2 -W 2"); with LOADBENCH_FORWARDER_BIN
#                              set, that binary's
#   LOADBENCH_CONTROL          1 adds the variant "ot-control": a second
#                              opentracker, started fresh for each run as
#                              the forwarders are, compared with the first
#                              like any variant. Its ratios are the
#                              measurement's own noise: how far one
#                              opentracker's p99 strays from another's
#                              in the same round on this machine now
#   LOADBENCH_PERF             1 prints, where perf can attach, each
#                              server's context switches and CPU
#                              migrations per announce answered
#   LOADBENCH_DRAIN_TRACE      1 prints, for each drain, the forwarding
#                              budget's limit and narrowed windows every
#                              0.2 s (from /metrics), and, where perf can
#                              attach, the forwarder's context switches
#                              over the drain
#
# Missing tools (wrk, opentracker, curl, jq) are installed with apt-get.
# Every process the script starts is stopped by its pid.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURATION=${LOADBENCH_DURATION:-20s}
CONNS=${LOADBENCH_CONNECTIONS:-50}
TORRENTS=${LOADBENCH_TORRENTS:-10000}
PACED=${LOADBENCH_PACED:-50 90}
ROUNDS=${LOADBENCH_ROUNDS:-1}
CLOSE=()
[ "${LOADBENCH_CLOSE:-0}" = 1 ] && CLOSE=(-close)
PREFIX=6c6f616462656e63682d746f7272656e # "loadbench-torren"
NAME=loadbench
# shellcheck source=lib/procs.sh
. "$(dirname "$0")/lib/procs.sh"

# ---- tools
missing=()
for t in wrk opentracker curl jq; do
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
CTL_PORT=$(pick_port)

say "building announceload${LOADBENCH_FORWARDER_BIN:+ (the forwarder is $LOADBENCH_FORWARDER_BIN)}"
(cd "$ROOT/examples" && go build -o "$WORK/announceload" ./announceload) || fail "build failed"
if [ -n "${LOADBENCH_FORWARDER_BIN:-}" ]; then
	cp "$LOADBENCH_FORWARDER_BIN" "$WORK/forwarder"
else
	(cd "$ROOT/examples" && go build -o "$WORK/forwarder" ./forwarder) || fail "build failed"
fi
VARIANTS=(forwarder)
declare -A VBIN=([forwarder]="$WORK/forwarder") VFLAGS=([forwarder]="") VUDP=()
if [ -n "${LOADBENCH_BASELINE_BIN:-}" ]; then
	cp "$LOADBENCH_BASELINE_BIN" "$WORK/baseline"
	VARIANTS+=(baseline)
	VBIN[baseline]="$WORK/baseline" VFLAGS[baseline]=""
fi
if [ "${LOADBENCH_TORRENT_MODE:-0}" = 1 ]; then
	VARIANTS+=(fwd-torrent)
	VBIN[fwd-torrent]="$WORK/forwarder" VFLAGS[fwd-torrent]="-forward torrent"
fi
if [ "${LOADBENCH_UDP:-0}" = 1 ]; then
	VARIANTS+=(fwd-udp)
	VBIN[fwd-udp]="$WORK/forwarder" VFLAGS[fwd-udp]="" VUDP[fwd-udp]=1
fi
if [ "${LOADBENCH_CONTROL:-0}" = 1 ]; then
	VARIANTS+=(ot-control)
fi
if [ -n "${LOADBENCH_EXTRA:-}" ]; then
	x=${LOADBENCH_EXTRA%%=*}
	VARIANTS+=("$x")
	VBIN[$x]="$WORK/forwarder" VFLAGS[$x]="${LOADBENCH_EXTRA#*=}"
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
OT_USER=
[ "$(id -u)" -eq 0 ] && OT_USER=nobody
OT_ARGS+=(${OT_USER:+-u "$OT_USER"})
opentracker "${OT_ARGS[@]}" >"$WORK/opentracker.log" 2>&1 &
OT_PID=$!
PIDS+=("$OT_PID")

# opentracker loads its whitelist after it starts answering; until then it
# refuses every torrent. Wait until it accepts the last one listed.
LAST=$(printf '%s%08x' "$PREFIX" $((TORRENTS - 1)) | sed 's/../%&/g')
accepts_last() { # accepts_last [PORT]
	curl -sf "http://127.0.0.1:${1:-$OT_PORT}/announce?info_hash=$LAST&peer_id=-LB0001-probeprobe01&port=1&uploaded=0&downloaded=0&left=1&numwant=0&compact=1" |
		grep -q '^d8:complete'
}
wait_for "opentracker to load its whitelist" 20 accepts_last

# cpu_ms PID: the process's user + system CPU time so far, in ms.
cpu_ms() {
	awk -v hz="$(getconf CLK_TCK)" '{ print int(($14 + $15) * 1000 / hz) }' "/proc/$1/stat"
}

FWD_PID=
start_forwarder() { # start_forwarder VARIANT
	local up="ot=http://127.0.0.1:$OT_PORT/announce"
	[ -n "${VUDP[$1]:-}" ] && up="ot=udp://127.0.0.1:$OT_PORT"
	# shellcheck disable=SC2086 # the flags are lists of flags
	"${VBIN[$1]}" -listen "127.0.0.1:$FWD_PORT" -upstream "$up" \
		${VFLAGS[$1]} ${LOADBENCH_FORWARDER_FLAGS:-} >>"$WORK/forwarder.log" 2>&1 &
	FWD_PID=$!
	PIDS+=("$FWD_PID")
	wait_for "the forwarder" 20 curl -sf "http://127.0.0.1:$FWD_PORT/stats"
}
stop_forwarder() {
	kill "$FWD_PID" 2>/dev/null || true
	wait "$FWD_PID" 2>/dev/null || true
	FWD_PID=
}
fstats() { curl -sf "http://127.0.0.1:$FWD_PORT/stats?format=json"; }
# budget_trace: the forwarding budget's limit/narrowed windows, "-" without
# a budget.
budget_trace() {
	curl -sf "http://127.0.0.1:$FWD_PORT/metrics" | awk '
		/^forwarder_forward_budget_limit / { l = $2 } /^forwarder_forward_budget_narrowed_total / { n = $2 }
		END { if (l == "") print "-"; else printf "%d/%d", l, n }'
}

# load NAME PORT RATE: one run (RATE 0: unpaced); sets REQ P50 P99 BUSY
# FAIL and prints a line.
load() {
	local name=$1 port=$2 rate=$3 tool=announceload out line
	if [ "$rate" = 0 ] && [ "${USE_WRK:-0}" = 1 ]; then
		tool=wrk
		# times, in the same subshell: the generator's own CPU time.
		out=$(LOADBENCH_TORRENTS=$TORRENTS LOADBENCH_PREFIX=$PREFIX \
			wrk -t1 -c"$CONNS" -d"$DURATION" --latency -s "$ROOT/scripts/loadbench.lua" \
			"http://127.0.0.1:$port/announce" 2>&1
			rc=$?
			echo GENCPU
			times
			exit $rc) || fail "wrk against $name: $out"
	else
		out=$("$WORK/announceload" -url "http://127.0.0.1:$port/announce" -rate "$rate" -c "$CONNS" \
			-d "$DURATION" -torrents "$TORRENTS" -prefix "$PREFIX" "${CLOSE[@]}" 2>&1
			rc=$?
			echo GENCPU
			times
			exit $rc) || fail "announceload against $name: $out"
	fi
	# The generator's user and system CPU, "XmY.YYYs XmY.YYYs", in ms.
	local gen_ms
	gen_ms=$(grep -A2 '^GENCPU' <<<"$out" | tail -n1 | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] } printf "%d", t * 1000 }')
	line=$(grep '^LOADBENCH ' <<<"$out") || fail "no summary from $tool against $name: $out"
	local requests=0 p50_us=0 p99_us=0 max_us=0 failures=0 busy=0 non200=0 sockerr=0 duration_us=1 late_us=0
	eval "$(sed 's/^LOADBENCH //; s/ /;/g' <<<"$line")"
	[ "$requests" -gt 0 ] || fail "no requests completed against $name"
	REQ=$requests P50=$p50_us P99=$p99_us FAIL=$failures BUSY=$busy DUR=$duration_us
	awk -v n="$name" -v r="$requests" -v d="$duration_us" -v a="$p50_us" -v b="$p99_us" -v m="$max_us" \
		-v f="$failures" -v e="$non200" -v k="$sockerr" -v l="$late_us" -v t="$tool" -v g="${gen_ms:-0}" \
		'BEGIN { printf "  %-12s %-12s %7d answered (%6.0f/s)  p50 %7.2f ms  p99 %7.2f ms  max %7.2f ms  failures %d  non-200 %d  socket errors %d  generator CPU %.0f %%%s\n",
			n, t, r, r * 1e6 / d, a / 1e3, b / 1e3, m / 1e3, f, e, k, 100 * g * 1000 / d, (l > 20000 ? sprintf("  (generator %.0f ms behind schedule)", l / 1e3) : "") }'
}

# run_forwarder VARIANT RATE: a fresh forwarder, one load run, its costs,
# then its drain.
run_forwarder() {
	local v=$1 rate=$2 s0 s1 c0 c1 c2 d1 d2 dn cpu shed done_n
	start_forwarder "$v"
	c0=$(cpu_ms "$FWD_PID")
	perf_start "$FWD_PID"
	load "$v" "$FWD_PORT" "$rate"
	perf_stop "$v"
	c1=$(cpu_ms "$FWD_PID")
	s1=$(fstats)
	d1=$(jq '.done + .dead + .retried' <<<"$s1")
	shed=$(jq '.rate_limited' <<<"$s1")
	# Drain: no more client announces; the workers forward the backlog.
	local end=$((SECONDS + 15)) t0 t1 trace="" perf_pid=""
	if [ "${LOADBENCH_DRAIN_TRACE:-0}" = 1 ] && command -v perf >/dev/null 2>&1; then
		perf stat -e context-switches,task-clock -p "$FWD_PID" -o "$WORK/perf.$v" 2>/dev/null &
		perf_pid=$!
	fi
	t0=$(date +%s%N)
	while [ "$SECONDS" -lt "$end" ] && [ "$(fstats | jq '.depth + .running')" -gt 0 ]; do
		[ "${LOADBENCH_DRAIN_TRACE:-0}" = 1 ] && trace+=" $(budget_trace)"
		sleep 0.2
	done
	t1=$(date +%s%N)
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid" 2>/dev/null || true
		wait "$perf_pid" 2>/dev/null || true
	fi
	c2=$(cpu_ms "$FWD_PID")
	s0=$(fstats)
	d2=$(jq '.done + .dead + .retried' <<<"$s0")
	dn=$((d2 - d1))
	done_n=$d1
	awk -v v="$v" -v r="$REQ" -v c="$((c1 - c0))" -v d="$done_n" -v s="$shed" -v b="$BUSY" -v dc="$((c2 - c1))" -v dn="$dn" -v ds="$((t1 - t0))" -v q="$(jq '.enqueued' <<<"$s0")" \
		'BEGIN { printf "  %-12s refused as busy %d (%.1f %%); forwards enqueued %d, done %d during the run (%.0f per 1000 answered), shed by admission %d; CPU %.0f µs per announce answered (forwarding included)%s\n",
			v, b, 100 * b / r, q, d, 1000 * d / r, s, 1000 * c / r,
			(dn >= 500 ? sprintf("; draining: %d forwards in %.1f s, %.0f µs CPU each", dn, ds / 1e9, 1000 * dc / dn) : "") }'
	if [ -n "$trace" ]; then
		echo "  $v drain trace (limit/narrowed every 0.2 s):$trace"
	fi
	if [ -n "$perf_pid" ] && [ -s "$WORK/perf.$v" ]; then
		awk -v v="$v" -v dn="$dn" '/context-switches/ { cs = $1 } /task-clock/ { tc = $1 }
			END { gsub(",", "", cs); gsub(",", "", tc); if (dn > 0) printf "  %s drain: %s context switches (%.1f per forward), task-clock %s ms\n", v, cs, cs / dn, tc }' "$WORK/perf.$v"
	fi
	stop_forwarder
}

# perf_start PID / perf_stop NAME: with LOADBENCH_PERF=1 and perf, count
# the process's context switches over a load run and print them per
# announce answered (REQ).
PERF_PID=
perf_start() {
	if [ "${LOADBENCH_PERF:-0}" = 1 ] && command -v perf >/dev/null 2>&1; then
		perf stat -e context-switches,cpu-migrations -p "$1" -o "$WORK/perf.load" 2>/dev/null &
		PERF_PID=$!
	fi
}
perf_stop() {
	[ -n "$PERF_PID" ] || return 0
	kill -INT "$PERF_PID" 2>/dev/null || true
	wait "$PERF_PID" 2>/dev/null || true
	PERF_PID=
	awk -v n="$1" -v r="$REQ" '/context-switches/ { cs = $1 } /cpu-migrations/ { mg = $1 }
		END { gsub(",", "", cs); gsub(",", "", mg); if (cs != "") printf "  %-12s %.2f context switches, %.2f CPU migrations per announce answered\n", n, cs / r, mg / r }' "$WORK/perf.load"
}

# run_opentracker RATE: one load run against opentracker, and the CPU it
# spent per announce answered (the forwarder's own CPU figure beside it
# is the cost of the same answers, like for like with LOADBENCH_CLOSE=1).
run_opentracker() {
	measure_ot opentracker "$OT_PID" "$OT_PORT" "$1"
}

# measure_ot NAME PID PORT RATE: one load run against the opentracker PID
# listening on PORT, and its CPU per announce answered.
measure_ot() {
	local c0 c1
	c0=$(cpu_ms "$2")
	perf_start "$2"
	load "$1" "$3" "$4"
	perf_stop "$1"
	c1=$(cpu_ms "$2")
	awk -v n="$1" -v r="$REQ" -v c="$((c1 - c0))" 'BEGIN { printf "  %-12s CPU %.0f µs per announce answered\n", n, 1000 * c / r }'
}

# run_control RATE: one load run against a fresh second opentracker (the
# variant ot-control), and the CPU it spent per announce answered.
run_control() {
	local pid
	opentracker -i 127.0.0.1 -p "$CTL_PORT" -P "$CTL_PORT" -f "$OTDIR/ot.conf" -d "$OTDIR" \
		${OT_USER:+-u "$OT_USER"} >>"$WORK/ot-control.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	wait_for "the control opentracker to load its whitelist" 20 accepts_last "$CTL_PORT"
	measure_ot ot-control "$pid" "$CTL_PORT" "$1"
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# run_variant VARIANT RATE: one run of a variant.
run_variant() {
	if [ "$1" = ot-control ]; then
		run_control "$2"
	else
		run_forwarder "$1" "$2"
	fi
}

result() { # result LABEL VARIANT P99 OT_P99
	awk -v l="$1" -v v="$2" -v a="$3" -v b="$4" 'BEGIN { printf "RESULT %-14s %-12s p99 %7.2f ms vs opentracker %7.2f ms: ratio %.2f\n", l, v, a / 1e3, b / 1e3, a / b }'
	awk -v r="$round" -v l="$1" -v v="$2" -v a="$3" -v b="$4" 'BEGIN { printf "%d %s %s %.4f\n", r, l, v, a / b }' >>"$WORK/results"
}

# summary: for each step and variant, the median p99 ratio over the rounds
# and the rounds within the target (2x paced, 3x unpaced); with the
# control, also the rounds in which a variant missed while the control,
# in the same round and step, was within it.
summary() {
	[ -s "$WORK/results" ] || return 0
	sort -k2,2 -k3,3 -k4,4n "$WORK/results" | awk '
		function flush() {
			if (n == 0) return
			med = (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
			printf "SUMMARY %-14s %-12s median ratio %.2f over %d rounds (%.2f-%.2f); within %dx in %d of %d", key1, key2, med, n, r[1], r[n], lim, ok, n
			if (key2 != "ot-control" && (key1, "ot-control") in ctlseen)
				printf "; missed where ot-control was within it: %d", alone
			printf "\n"
			n = 0; ok = 0; alone = 0
		}
		FNR == NR { if ($3 == "ot-control") { ctlseen[$2, "ot-control"] = 1; ctl[$1, $2] = $4 }; next }
		{ if ($2 != key1 || $3 != key2) { flush(); key1 = $2; key2 = $3; lim = ($2 == "unpaced") ? 3 : 2 }
		  x = $4 + 0; r[++n] = x; if (x <= lim) ok++
		  else if (($1, $2) in ctl && ctl[$1, $2] <= lim) alone++ }
		END { flush() }' "$WORK/results" -
}

say "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs; $CONNS connections, $DURATION per run, $TORRENTS torrents, a new random peer per announce${CLOSE[0]:+, a connection per announce (-close)}; variants: ${VARIANTS[*]}"
say "capacity: opentracker, unpaced"
run_opentracker 0
CAP=$(awk -v r="$REQ" -v d="$DUR" 'BEGIN { printf "%.0f", r * 1e6 / d }')
say "opentracker's capacity: $CAP announces/s"

for ((round = 1; round <= ROUNDS; round++)); do
	# Every other round runs the variants in reverse order: the first run
	# after opentracker's has measured worse, whichever binary it was.
	ORDER=("${VARIANTS[@]}")
	if ((round % 2 == 0)); then
		ORDER=()
		for ((i = ${#VARIANTS[@]} - 1; i >= 0; i--)); do ORDER+=("${VARIANTS[i]}"); done
	fi
	for pct in $PACED; do
		rate=$((CAP * pct / 100))
		say "round $round: paced at $pct % of capacity, $rate announces/s"
		run_opentracker "$rate"
		OT_P99=$P99
		for v in "${ORDER[@]}"; do
			run_variant "$v" "$rate"
			result "paced-$pct%" "$v" "$P99" "$OT_P99"
		done
	done
	if [ "${LOADBENCH_UNPACED:-1}" != 0 ]; then
		if [ "${#CLOSE[@]}" = 0 ]; then
			USE_WRK=1
			say "round $round: unpaced (wrk -t1 -c$CONNS)"
		else
			say "round $round: unpaced (announceload -rate 0 -c$CONNS -close)"
		fi
		run_opentracker 0
		OT_P99=$P99
		for v in "${ORDER[@]}"; do
			run_variant "$v" 0
			result "unpaced" "$v" "$P99" "$OT_P99"
		done
		USE_WRK=0
	fi
done
summary
say "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
