#!/usr/bin/env bash
# Rehearses a release of every module of the repository, as
# docs/RELEASING.md describes: scripts/releasecheck (its own module,
# outside go.work) zips each module of the work tree as if tagged v1.0.0
# into a local module proxy, then, outside the repository with GOWORK=off,
# go gets each store alone and runs a job on it (PostgreSQL at
# QUEUE_PG_URL, Redis at QUEUE_REDIS_ADDR), go installs queuectl and runs
# it, and builds the stores at v1.0.0 against a v1.1.0 of the core.
#
#   scripts/release-check.sh              the rehearsal
#   scripts/release-check.sh tidy [-w]    check (or, with -w, make) every
#                                         go.mod and go.sum tidy
#   scripts/release-check.sh api [-update]
#                                         the API check (scripts/api-check.sh)
#   scripts/release-check.sh reachable    exit 0 if both servers answer
#
# One PASS or FAIL line per step; the exit status is non-zero if any
# step failed.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

export QUEUE_PG_URL="${QUEUE_PG_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}"
export QUEUE_REDIS_ADDR="${QUEUE_REDIS_ADDR:-127.0.0.1:6379}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
(cd "$root/scripts/releasecheck" && GOWORK=off go build -o "$tmp/releasecheck" .) || {
  echo "FAIL release-check: could not build scripts/releasecheck"; exit 1; }
if [ $# = 0 ]; then set -- rehearse; fi
"$tmp/releasecheck" -repo "$root" "$@"
