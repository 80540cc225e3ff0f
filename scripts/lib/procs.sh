# Shared by scripts that start servers on 127.0.0.1 and must stop them:
# e2e-bittorrent.sh and loadbench.sh. The sourcing script sets NAME (the
# prefix of its messages), appends each PID it starts to PIDS, may set WORK
# (a temporary directory, removed on exit, whose *.log files are shown on
# failure), and, for pick_port, sets used (the ports in use, one a line).
# With START and LIMIT set, wait_for never waits past START + LIMIT.
PIDS=()
WORK=

say() { printf '%s: %s\n' "$NAME" "$*"; }

cleanup() {
	local rc=$?
	for pid in "${PIDS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		# Each was started by this script; wait up to 5 s, then force.
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	if [ "$rc" -ne 0 ] && [ -n "$WORK" ] && [ -d "$WORK" ]; then
		for f in "$WORK"/*.log; do
			[ -f "$f" ] || continue
			say "---- $(basename "$f") (last 30 lines)"
			tail -n 30 "$f" | sed 's/^/    /'
		done
	fi
	[ -n "$WORK" ] && rm -rf "$WORK"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
	say "FAIL: $*"
	exit 1
}

# wait_for DESCRIPTION SECONDS COMMAND...: run COMMAND every 0.2 s until
# it succeeds, or fail after SECONDS.
wait_for() {
	local what=$1 end=$((SECONDS + $2))
	shift 2
	if [ -n "${LIMIT:-}" ] && [ "$end" -gt $((START + LIMIT)) ]; then
		end=$((START + LIMIT))
	fi
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -ge "$end" ] && fail "timed out waiting for $what"
		sleep 0.2
	done
}

# pick_port: a port below the kernel's ephemeral range (so no outgoing
# connection of a busy machine takes it between the pick and the bind; a
# CI run once lost the forwarder's port that way), from 10000 up, not in
# $used and not picked before.
pick_port() {
	local p lo=32768 _hi
	read -r lo _hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || lo=32768
	[ "$lo" -gt 11000 ] || lo=32768
	for _ in $(seq 200); do
		p=$((10000 + RANDOM % (lo - 10000)))
		if ! grep -qx "$p" <<<"${used:-}" && ! grep -qx "$p" <<<"${picked:-}"; then
			picked="${picked:-}"$'\n'"$p"
			echo "$p"
			return
		fi
	done
	fail "no free port"
}
