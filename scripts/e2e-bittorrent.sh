#!/usr/bin/env bash
# End-to-end test of the tracker forwarder with real BitTorrent software.
#
#   two opentracker instances on 127.0.0.1 (one reached over HTTP, one over
#   UDP, BEP 15) are the upstreams; the forwarder (examples/forwarder) runs in
#   front of them; a torrent announces to the forwarder; one aria2c seeds it,
#   a second downloads it. It passes when the download completes with the
#   right content, both opentrackers list the seeder of the torrent, the
#   forwarder's own /scrape counts it, two more local peers each reach both
#   opentrackers (forwarded per peer), a stopped peer is no longer served by
#   the forwarder, and both opentrackers drop the seeder once it stops (its
#   event=stopped forwarded over each).
#
# Everything stays on 127.0.0.1, DHT, LPD and PEX are off (peers can only come
# from the tracker), the whole run is bounded (E2E_TIMEOUT, default 120 s), and
# every process it starts is stopped by its pid at the end.
#
# The tools come from Debian's packages (opentracker, aria2, mktorrent). With
# CI=true missing ones are installed with apt-get; elsewhere the script prints
# SKIP and exits 0 when one is missing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIMIT=${E2E_TIMEOUT:-120}
START=$SECONDS
NAME=e2e-bittorrent
# shellcheck source=lib/procs.sh
. "$(dirname "$0")/lib/procs.sh"

left() { echo $((LIMIT - (SECONDS - START))); }

# ---- tools
missing=()
for t in opentracker aria2c mktorrent curl; do
	command -v "$t" >/dev/null 2>&1 || missing+=("$t")
done
if [ "${#missing[@]}" -gt 0 ]; then
	if [ "${CI:-}" = "true" ]; then
		say "installing ${missing[*]} from Debian's packages"
		pkgs=()
		for t in "${missing[@]}"; do
			case $t in aria2c) pkgs+=(aria2) ;; *) pkgs+=("$t") ;; esac
		done
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq >/dev/null
		apt-get install -y -qq "${pkgs[@]}" >/dev/null
	else
		say "SKIP: ${missing[*]} not installed (apt-get install opentracker aria2 mktorrent curl; CI=true installs them)"
		exit 0
	fi
fi
command -v go >/dev/null 2>&1 || fail "go not found"

WORK=$(mktemp -d /tmp/e2e-bt.XXXXXX)
chmod 755 "$WORK"

# ---- ports: free TCP and UDP ports on 127.0.0.1
used=$(ss -Htuan 2>/dev/null | awk '{print $5}' | sed 's/.*://' | sort -u)
picked=
FWD_PORT=$(pick_port)
OT1_PORT=$(pick_port)
OT2_PORT=$(pick_port)
SEED_PORT=$(pick_port)
LEECH_PORT=$(pick_port)

# ---- build the forwarder
say "building the forwarder"
(cd "$ROOT/examples" && go build -o "$WORK/forwarder" ./forwarder) || fail "build failed"

# ---- the torrent: 3 MB of random data announcing to the forwarder
mkdir -p "$WORK/seed" "$WORK/leech"
head -c 3000000 /dev/urandom >"$WORK/seed/payload.bin"
mktorrent -a "http://127.0.0.1:$FWD_PORT/announce" -o "$WORK/t.torrent" "$WORK/seed/payload.bin" >"$WORK/mktorrent.log" 2>&1 ||
	fail "mktorrent failed"
HASH=$(aria2c -S "$WORK/t.torrent" | awk -F': ' '/Info Hash/ {print $2}' | tr -d '[:space:]')
[ "${#HASH}" -eq 40 ] || fail "could not read the info hash"
say "torrent $HASH"

# ---- two opentrackers, whitelist mode, as nobody in a chroot
#
# opentracker reads its whitelist in a thread of its own, after it has
# begun to answer: until then it refuses every torrent ("not authorized").
# A forwarded announce refused in that window is dead-lettered and the
# forwarder leaves the torrent alone on that upstream for 30 minutes, as it
# would in production, and aria2 would not announce again within the run. So each whitelist also holds a probe hash, and the
# script waits until each tracker accepts an announce for it, which it does
# only once the whole list is loaded.
PROBE=0000000000000000000000000000000000000001
urlhash() { sed 's/../%&/g' <<<"$1"; }
start_opentracker() {
	local name=$1 port=$2 dir="$WORK/$1"
	mkdir -p "$dir"
	printf '%s\n%s\n' "$HASH" "$PROBE" >"$dir/wl.txt"
	printf 'access.whitelist /wl.txt\naccess.stats 127.0.0.1\n' >"$dir/ot.conf"
	chmod 755 "$dir"
	chmod 644 "$dir/wl.txt" "$dir/ot.conf"
	opentracker -i 127.0.0.1 -p "$port" -P "$port" -f "$dir/ot.conf" -u nobody -d "$dir" >"$WORK/$name.log" 2>&1 &
	PIDS+=($!)
}
# whitelist_loaded PORT: the opentracker on PORT accepts the probe hash.
whitelist_loaded() {
	curl -sf "http://127.0.0.1:$1/announce?info_hash=$(urlhash "$PROBE")&peer_id=-QK0000-e2e-probe-01&port=1&uploaded=0&downloaded=0&left=1&numwant=0&compact=1" |
		grep -q '^d8:complete'
}
start_opentracker ot1 "$OT1_PORT"
start_opentracker ot2 "$OT2_PORT"
wait_for "opentracker ot1 to load its whitelist" 10 whitelist_loaded "$OT1_PORT"
wait_for "opentracker ot2 to load its whitelist" 10 whitelist_loaded "$OT2_PORT"

# ---- the forwarder: ot1 over HTTP, ot2 over UDP
"$WORK/forwarder" -listen "127.0.0.1:$FWD_PORT" \
	-upstream "ot1=http://127.0.0.1:$OT1_PORT/announce" \
	-upstream "ot2=udp://127.0.0.1:$OT2_PORT" \
	-interval 60s -upstream-timeout 5s -w 2 -W 4 >"$WORK/forwarder.log" 2>&1 &
PIDS+=($!)
wait_for "the forwarder" 10 curl -sf "http://127.0.0.1:$FWD_PORT/stats"

# seeded_at PORT: the opentracker on PORT lists a complete peer (the
# seeder) for the torrent: its scrape of our hash says complete >= 1. (The
# scrape of a torrent it has not seen has no entry at all.)
seeded_at() {
	curl -sf "http://127.0.0.1:$1/scrape?info_hash=$(urlhash "$HASH")" | grep -aq '8:completei[1-9]'
}
seen_by_both() {
	seeded_at "$OT1_PORT" && seeded_at "$OT2_PORT"
}

ARIA=(aria2c --enable-dht=false --enable-dht6=false --bt-enable-lpd=false --enable-peer-exchange=false
	--bt-max-peers=10 --summary-interval=0 --console-log-level=warn --file-allocation=none
	--check-certificate=false --allow-overwrite=true --auto-file-renaming=false)

# ---- seed
say "seeding"
"${ARIA[@]}" -V --seed-ratio=0.0 --seed-time=5 -d "$WORK/seed" --listen-port="$SEED_PORT" \
	--log="$WORK/seeder-aria2.log" --log-level=info "$WORK/t.torrent" >"$WORK/seeder.log" 2>&1 &
PIDS+=($!)
SEEDER=$!

# The seeder's announce reaches the forwarder, which forwards it to both
# upstreams: wait until both opentrackers list the seeder.
wait_for "both opentrackers to see the torrent" 30 seen_by_both
say "both opentrackers list the seeder"

# ---- leech
say "downloading"
"${ARIA[@]}" --seed-time=0 -d "$WORK/leech" --listen-port="$LEECH_PORT" \
	--log="$WORK/leecher-aria2.log" --log-level=info "$WORK/t.torrent" >"$WORK/leecher.log" 2>&1 &
LEECHER=$!
PIDS+=("$LEECHER")
wait_for "the download" "$(left)" test -f "$WORK/leech/payload.bin" -a ! -f "$WORK/leech/payload.bin.aria2"
end=$((SECONDS + 20))
while kill -0 "$LEECHER" 2>/dev/null; do
	[ "$SECONDS" -ge "$end" ] && fail "the leecher did not exit"
	sleep 0.2
done
wait "$LEECHER" || fail "aria2c (leecher) exited with an error"

cmp "$WORK/seed/payload.bin" "$WORK/leech/payload.bin" || fail "downloaded file differs"
sum=$(sha256sum <"$WORK/leech/payload.bin" | cut -c1-16)
kill -0 "$SEEDER" 2>/dev/null || fail "the seeder died"

# ---- BEGIN scrape checks (BEP 48 /scrape on the forwarder)
# The forwarder answers a scrape of the torrent from its own peers merged
# with the upstreams' counts: the seeder is still running (complete >= 1).
# (aria2c with --seed-time=0 sends no completed event, only stopped, so
# downloaded may be 0.) Two hashes get two entries; a bad info_hash gets a
# bencoded failure reason, not a 404.
fwd_scrape_ok() {
	curl -sf "http://127.0.0.1:$FWD_PORT/scrape?info_hash=$(urlhash "$HASH")" -o "$WORK/fwd-scrape" || return 1
	grep -aq '^d5:filesd20:' "$WORK/fwd-scrape" &&
		grep -aq '8:completei[1-9]' "$WORK/fwd-scrape" &&
		grep -aq '10:downloadedi' "$WORK/fwd-scrape"
}
wait_for "the forwarder's scrape to count the seeder" 10 fwd_scrape_ok
curl -sf "http://127.0.0.1:$FWD_PORT/scrape?info_hash=short" | grep -aq '14:failure reason' ||
	fail "a scrape with a bad info_hash got no failure reason"
n=$(curl -sf "http://127.0.0.1:$FWD_PORT/scrape?info_hash=$(urlhash "$HASH")&info_hash=$(urlhash "$PROBE")" |
	grep -ao '8:completei' | wc -l)
[ "$n" -eq 2 ] || fail "a scrape of two info hashes listed $n"
say "the forwarder's scrape counts the seeder"
# ---- END scrape checks
# ==== BEGIN per-peer forwarding and stopped peers (items 2 and 3) ====
# Two more local peers (announces sent with curl, as leechers at ports
# nobody listens on) join the torrent after the seeder. Forwarded per peer,
# each reaches both opentrackers although the torrent is not due there yet
# (per torrent, only the seeder would have). Then the first stops: the
# forwarder must not hand it out again, though it has kept ot1's reply to
# the second peer's announce, which listed it.
P1_PORT=$(pick_port)
P2_PORT=$(pick_port)
# fwd_announce PEER_ID PORT EVENT: announce a leecher of the torrent to the
# forwarder, asking for the dict form; the reply goes to $WORK/reply.PORT.
fwd_announce() {
	curl -sf "http://127.0.0.1:$FWD_PORT/announce?info_hash=$(urlhash "$HASH")&peer_id=$1&port=$2&uploaded=0&downloaded=0&left=1000&compact=0&numwant=200${3:+&event=$3}" \
		-o "$WORK/reply.$2"
}
# leechers_at PORT N: the opentracker on PORT counts N leechers of the torrent.
leechers_at() {
	curl -sf "http://127.0.0.1:$1/scrape?info_hash=$(urlhash "$HASH")" | grep -aq "10:incompletei$2e"
}
leechers_at_both() { leechers_at "$OT1_PORT" "$1" && leechers_at "$OT2_PORT" "$1"; }
# served PORT REPLY_PORT: the forwarder's reply to the peer on REPLY_PORT lists a peer on PORT.
served() { grep -aq "4:porti$1e" "$WORK/reply.$2"; }

say "two more peers join"
fwd_announce -QK0000-e2e-peer-001 "$P1_PORT" started || fail "peer 1's announce failed"
wait_for "both opentrackers to list peer 1" 20 leechers_at_both 1
fwd_announce -QK0000-e2e-peer-002 "$P2_PORT" started || fail "peer 2's announce failed"
wait_for "both opentrackers to list peers 1 and 2" 20 leechers_at_both 2
say "each peer reached both opentrackers"
fwd_announce -QK0000-e2e-peer-002 "$P2_PORT" "" || fail "peer 2's re-announce failed"
served "$P1_PORT" "$P2_PORT" || fail "peer 1 is not served to peer 2: $(cat "$WORK/reply.$P2_PORT")"

fwd_announce -QK0000-e2e-peer-001 "$P1_PORT" stopped || fail "peer 1's stop failed"
fwd_announce -QK0000-e2e-peer-002 "$P2_PORT" "" || fail "peer 2's re-announce failed"
! served "$P1_PORT" "$P2_PORT" || fail "the stopped peer 1 is still served: $(cat "$WORK/reply.$P2_PORT")"
wait_for "both opentrackers to drop peer 1" 20 leechers_at_both 1
fwd_announce -QK0000-e2e-peer-002 "$P2_PORT" "" || fail "peer 2's re-announce failed"
! served "$P1_PORT" "$P2_PORT" || fail "the stopped peer 1 is served again: $(cat "$WORK/reply.$P2_PORT")"
fwd_announce -QK0000-e2e-peer-002 "$P2_PORT" stopped || fail "peer 2's stop failed"
say "the stopped peer is no longer served"
# ==== END per-peer forwarding and stopped peers ====

# ---- stop: on SIGINT aria2c shuts down gracefully, announcing
# event=stopped (SIGTERM is its emergency shutdown, which announces
# nothing); the forwarder forwards the stop to both upstreams, HTTP and
# UDP, which then drop the seeder.
# unseeded_at PORT: the opentracker on PORT answers a scrape that lists no
# complete peer for the torrent.
unseeded_at() {
	curl -sf "http://127.0.0.1:$1/scrape?info_hash=$(urlhash "$HASH")" -o "$WORK/scrape.$1" || return 1
	! grep -aq '8:completei[1-9]' "$WORK/scrape.$1"
}
dropped_by_both() {
	unseeded_at "$OT1_PORT" && unseeded_at "$OT2_PORT"
}
say "stopping the seeder"
kill -INT "$SEEDER"
wait_for "both opentrackers to drop the stopped seeder" 20 dropped_by_both
say "both opentrackers dropped the seeder"

stats=$(curl -sf "http://127.0.0.1:$FWD_PORT/stats?format=json")
grep -q '"done": [1-9]' <<<"$stats" || fail "the forwarder completed no upstream announce: $stats"
say "PASS: 3000000 bytes downloaded through the forwarder (sha256 $sum…), both opentrackers listed the seeder of $HASH and dropped it when it stopped, each local peer reached both, a stopped one was no longer served, $((SECONDS - START)) s"
