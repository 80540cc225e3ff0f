#!/usr/bin/env bash
# Runs every check CI runs: gofmt, and go mod tidy, go vet, staticcheck and
# go test -race for each module of the repo (the dashboard's browser tests
# in headless Chromium among them), the API check, the release rehearsal
# (docs/RELEASING.md), then the BitTorrent e2e run.
#
# scripts/test.sh -short runs gofmt, then go vet, staticcheck and
# go test -race of the core module only: under two minutes on an idle
# machine. Store tests use the real PostgreSQL and
# Redis named by QUEUE_PG_URL and QUEUE_REDIS_ADDR (defaults:
# 127.0.0.1:5432 database test, 127.0.0.1:6379); without them they skip and
# say so, except under CI=true, where an unreachable server fails the run.
set -uo pipefail
cd "$(dirname "$0")/.."

short=false
case "${1:-}" in
  -short) short=true ;;
  "") ;;
  *) echo "usage: scripts/test.sh [-short]"; exit 2 ;;
esac

# -trimpath: builds, and so the build cache's entries and staticcheck's,
# do not depend on where the checkout is, so a second clone or worktree
# (CI's fresh clone among them) reuses what the first compiled; the
# release rehearsal builds with it too.
case " ${GOFLAGS:-} " in
  *" -trimpath "*) ;;
  *) export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath" ;;
esac

export QUEUE_PG_URL="${QUEUE_PG_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
export QUEUE_REDIS_ADDR="${QUEUE_REDIS_ADDR:-127.0.0.1:6379}"

# Under CI, start the local servers if they are installed but down.
# redisstore's tests also start servers of their own (a killed Redis, a
# three-master Redis Cluster joined with redis-cli --cluster create), so
# Debian's redis-server (which brings redis-cli) is installed when missing.
if [ "${CI:-}" = "true" ]; then
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    echo "test.sh: installing redis-server"
    { apt-get update -qq >/dev/null && apt-get install -y -qq redis-server >/dev/null; } ||
      echo "test.sh: could not install redis-server (the redisstore tests will fail)"
  fi
  if command -v pg_isready >/dev/null && ! pg_isready -q -h 127.0.0.1 -p 5432; then
    echo "test.sh: starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  fi
  if command -v redis-cli >/dev/null && ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "test.sh: starting Redis"
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
  fi
fi

modules=(. examples pgstore redisstore sqlitestore otelqueue queuectl bench browsertest)

# The dashboard's browser tests (browsertest) drive Debian's chromium.
# Under CI it is installed when missing; elsewhere those tests skip and
# say so.
if [ "${CI:-}" = "true" ] && ! command -v chromium >/dev/null; then
  echo "test.sh: installing chromium"
  { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; } ||
    echo "test.sh: could not install chromium (the browser tests will fail)"
fi

# staticcheck, pinned: v0.8.2 of honnef.co/go/tools is staticcheck
# 2026.2.2 (the module proxy serves the semver tag, not the year one).
# Installed with go install when missing or at another version.
staticcheck_version="2026.2.2 (0.8.2)"
staticcheck="$(go env GOPATH)/bin/staticcheck"
if [ "$("$staticcheck" -version 2>/dev/null)" != "staticcheck $staticcheck_version" ]; then
  echo "== installing staticcheck $staticcheck_version"
  GOBIN="$(dirname "$staticcheck")" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2 || {
    echo "test.sh: could not install staticcheck"; exit 1; }
fi

fail=0
passed=0
failed=0
skipped=0 # steps skipped (the e2e run with its tools missing, the rehearsal without servers): not passes
failed_pkgs=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go') 2>/dev/null || true)
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; fail=1
fi

# The checks that read the modules rather than run them (go mod tidy
# -diff, the API check, the module graph, scripts/releasecheck's own
# tests) run in the background beside go vet, staticcheck and the race
# tests: they spend most of their time in the go command waiting on files
# and the local proxy. Their output is shown, and their status counted,
# when the tests are done.
checks_pid=""
checks_log=$(mktemp)
if ! $short; then
  (
    st=0
    # go.work ties the modules together for development; each must still
    # be tidy on its own, as a user's go get sees it. Their go.mod files
    # require v1.0.0 of their siblings, which the public proxy does not
    # serve before the tag, so the check runs against the rehearsal's
    # local proxy (GOWORK=off); go.sum is compared without our own
    # modules' lines, whose hashes change with every commit
    # (scripts/releasecheck/tidy.go).
    echo "== go mod tidy -diff (every module, against the rehearsal proxy)"
    scripts/release-check.sh tidy || st=1
    echo "== API check (api/, docs/RELEASING.md)"
    scripts/release-check.sh api || st=1

    # The module graph a user gets: no go.mod holds a replace directive
    # or a v0.0.0 requirement of a sibling (go.work ties the modules
    # locally), and no module imports another module's internal/
    # packages (a store release would then build only beside the core
    # commit it was made with).
    echo "== module graph: no replace, no v0.0.0 sibling, no other module's internal/"
    for m in "${modules[@]}"; do
      [ -f "$m/go.mod" ] || continue
      if grep -nE '^[[:space:]]*replace\b|github\.com/queuekit/queue[^[:space:]]* v0\.0\.0' "$m/go.mod"; then
        echo "$m/go.mod: a replace directive or a v0.0.0 requirement of a sibling"; st=1
      fi
      mod=$(awk '$1 == "module" { print $2; exit }' "$m/go.mod")
      bad=$(cd "$m" && go list -f '{{.ImportPath}}: {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./... |
        awk -v mod="$mod" '{ for (i = 2; i <= NF; i++) if ($i ~ /^github\.com\/queuekit\/queue(\/.*)?\/internal(\/|$)/ && index($i, mod "/") != 1) print $1, "imports", $i }')
      if [ -n "$bad" ]; then
        echo "$bad"; echo "$m: imports another module's internal/ packages"; st=1
      fi
    done

    # scripts/releasecheck is a module of its own, outside go.work.
    echo "== scripts/releasecheck: go vet, staticcheck, go test"
    (cd scripts/releasecheck && GOWORK=off go vet ./... && GOWORK=off "$staticcheck" ./... &&
      GOWORK=off go test -race -count=1 ./...) || st=1
    exit $st
  ) >"$checks_log" 2>&1 &
  checks_pid=$!
  echo "== go mod tidy, the API check, the module graph and scripts/releasecheck: started beside the tests"
fi

# The release rehearsal (docs/RELEASING.md): every module as if tagged
# v1.0.0, got, run and installed from a local module proxy outside the
# workspace. It needs PostgreSQL and Redis: without them it is skipped
# (and counted so), except under CI=true, where it fails. It runs beside
# the modules' tests (much of their time is spent waiting on servers and
# timers), and its output is shown when they are done.
rehearsal_pid=""
rehearsal_log=$(mktemp)
if ! $short; then
  if ! why=$(scripts/release-check.sh reachable 2>&1) && [ "${CI:-}" != "true" ]; then
    echo "== release rehearsal: skipped: ${why##*releasecheck: }"
    skipped=$((skipped + 1))
  else
    echo "== release rehearsal: started beside the tests"
    scripts/release-check.sh rehearse >"$rehearsal_log" 2>&1 &
    rehearsal_pid=$!
  fi
fi

# go vet, staticcheck and go test -race of every module, each run once
# over all of them: go.work makes them one workspace, so the packages they
# share are loaded and built once (a run per module took minutes more).
# That each module builds on its own, as a user's go get sees it, is the
# tidy check's and the rehearsal's to prove.
patterns=()
for m in "${modules[@]}"; do
  [ -f "$m/go.mod" ] || continue
  # -short: the core module only.
  if $short && [ "$m" != . ]; then continue; fi
  patterns+=("./$m/...")
done
patterns=("${patterns[@]/#.\/.\//./}")
echo "== go vet (at ${SECONDS}s): ${patterns[*]}"
go vet "${patterns[@]}" || fail=1
# staticcheck runs beside the race tests, which spend much of their time
# waiting on the servers, on timers and on Chromium; its output is shown
# when they are done.
echo "== staticcheck (at ${SECONDS}s): started beside the tests"
staticcheck_log=$(mktemp)
"$staticcheck" "${patterns[@]}" >"$staticcheck_log" 2>&1 &
staticcheck_pid=$!
# -p 4: twice the packages the go command runs at once by default on
# two cores. The store packages spend most of their time waiting on
# PostgreSQL, Redis, SQLite's fsyncs and Chromium (pgstore: about 130 s
# of wall time for 60 s of CPU), so two of them side by side left the
# CPUs half idle while the CPU-bound packages queued behind them.
echo "== go test -race (at ${SECONDS}s)"
go test -race -count=1 -p 4 "${patterns[@]}" 2>&1 | tee "$log" || fail=1
echo "== go test done (at ${SECONDS}s)"
echo "== staticcheck"
if wait "$staticcheck_pid"; then
  cat "$staticcheck_log"; echo "staticcheck: no problems"
else
  cat "$staticcheck_log"; echo "staticcheck: FAIL"; fail=1
fi
rm -f "$staticcheck_log"
# sqlitestore's slowest conformance section, which -race leaves out (its
# main_test.go says why), runs here without the race detector.
if ! $short && [ -f sqlitestore/go.mod ]; then
  echo "== go test without -race: sqlitestore's ${sqlite_norace:=TestAdminConformance/BoundedFilter} (at ${SECONDS}s)"
  go test -count=1 -run "$sqlite_norace" ./sqlitestore/ 2>&1 | tee -a "$log" || fail=1
fi
# One result line per package: "ok<TAB>path<TAB>time" or
# "FAIL<TAB>path<TAB>time" (or "FAIL<TAB>path [build failed]"). The bare
# "FAIL" that ends the run and "--- FAIL: TestX" lines are not packages.
pkg_re="^(ok|FAIL)[[:space:]]+github\.com/queuekit/queue(/[^[:space:]]*)?([[:space:]]|\$)"
passed=$((passed + $(grep -E "$pkg_re" "$log" | grep -c '^ok' || true)))
while read -r pkg; do
  failed=$((failed + 1)); failed_pkgs+=("$pkg")
done < <(grep -E "$pkg_re" "$log" | grep '^FAIL' | awk '{print $2}' | sort -u)

if [ -n "$checks_pid" ]; then
  if wait "$checks_pid"; then
    cat "$checks_log"
  else
    cat "$checks_log"; fail=1
  fi
fi
rm -f "$checks_log"

if [ -n "$rehearsal_pid" ]; then
  echo "== release rehearsal"
  if wait "$rehearsal_pid"; then
    cat "$rehearsal_log"; passed=$((passed + 1))
  else
    cat "$rehearsal_log"; fail=1; failed=$((failed + 1)); failed_pkgs+=("release-rehearsal")
  fi
fi
rm -f "$rehearsal_log"

# shellcheck source=lib/e2e.sh
. scripts/lib/e2e.sh
if ! $short; then
  echo "== scripts: lib/e2e_test.sh"
  bash scripts/lib/e2e_test.sh || fail=1
fi
if ! $short && [ -x scripts/e2e-bittorrent.sh ]; then
  echo "== e2e: real BitTorrent software"
  run_e2e scripts/e2e-bittorrent.sh
  case $E2E_RESULT in
    passed) passed=$((passed + 1)) ;;
    skipped) skipped=$((skipped + 1)) ;;
    *) fail=1; failed=$((failed + 1)); failed_pkgs+=("e2e-bittorrent") ;;
  esac
fi

# One line a CI reader can count: test packages (and the release
# rehearsal and the e2e run); a skipped step is counted as skipped.
if [ "$failed" != 0 ]; then
  echo "failed packages: ${failed_pkgs[*]}"
fi
if [ "$skipped" != 0 ]; then
  echo "packages: $passed passed, $failed failed, $skipped skipped"
else
  echo "packages: $passed passed, $failed failed"
fi
if [ "$fail" != 0 ]; then
  exit 1
fi
