#!/usr/bin/env bash
# Runs the Node package's node:test suite (tests/node), which also type-checks the
# README examples with tsc --strict. The native module comes from one of:
#   scripts/test-node.sh                                   # `npm run build` (napi, release)
#   NAPI_RS_NATIVE_LIBRARY_PATH=path.node scripts/...      # one built already: test-all.sh
#                                                          # passes the npm tarball's
# The variable is napi's loader override (bindings-node/binding.js), so every process the
# tests start loads exactly that file, not a stale build beside the loader.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
npm install --no-audit --no-fund --loglevel=error
if [ -z "${NAPI_RS_NATIVE_LIBRARY_PATH:-}" ]; then
    npm run build
fi
# A hung test fails after 5 minutes instead of holding the run to CI's limit.
exec node --test --test-timeout=300000 tests/node/
