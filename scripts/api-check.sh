#!/usr/bin/env bash
# Compares the exported API of the core, pgstore, redisstore and otelqueue with the
# baselines in api/ and fails on an incompatible change that
# api/incompatible.txt does not record (docs/RELEASING.md).
#
#   scripts/api-check.sh            check
#   scripts/api-check.sh -update    rewrite api/ from the work tree
exec "$(dirname "$0")/release-check.sh" api "$@"
