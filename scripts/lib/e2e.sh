# Shared by test.sh: run_e2e SCRIPT runs an end-to-end script, showing
# its output, and sets E2E_RESULT to passed, failed (a non-zero exit) or
# skipped: an exit 0 after the script said "NAME: SKIP: why" (its say
# line, as e2e-bittorrent.sh prints when its tools are missing), which
# ran nothing and so must not count as passed.
run_e2e() {
	local out rc
	out=$(mktemp)
	"$1" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	if [ "$rc" != 0 ]; then
		E2E_RESULT=failed
	elif grep -qE '^[A-Za-z0-9_.-]+: SKIP: ' "$out"; then
		E2E_RESULT=skipped
	else
		E2E_RESULT=passed
	fi
	rm -f "$out"
}
