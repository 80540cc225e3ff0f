#!/usr/bin/env bash
# Tests run_e2e (scripts/lib/e2e.sh) with stub scripts: one that passes,
# one that fails, one that prints SKIP and exits 0 as e2e-bittorrent.sh
# does when its tools are missing. Run: bash scripts/lib/e2e_test.sh
set -uo pipefail
. "$(dirname "$0")/e2e.sh"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '#!/bin/sh\necho "e2e: all good"\n' >"$dir/pass"
printf '#!/bin/sh\necho "e2e: broke"\nexit 1\n' >"$dir/fail"
printf '#!/bin/sh\necho "e2e: SKIP: opentracker not installed"\n' >"$dir/skip"
printf '#!/bin/sh\necho "e2e: a peer said SKIP: nothing"\n' >"$dir/passquote"
chmod +x "$dir"/*
bad=0
for tc in pass:passed fail:failed skip:skipped passquote:passed; do
	run_e2e "$dir/${tc%%:*}" >/dev/null
	if [ "$E2E_RESULT" != "${tc#*:}" ]; then
		echo "FAIL: ${tc%%:*} stub: E2E_RESULT=$E2E_RESULT, want ${tc#*:}"
		bad=1
	fi
done
[ "$bad" = 0 ] && echo "ok: run_e2e"
exit "$bad"
