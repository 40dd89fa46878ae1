#!/usr/bin/env bash
# Runs the Node package's node:test suite (tests/node), which also type-checks the
# README examples with tsc --strict. The native module comes from one of:
#   scripts/test-node.sh                         # `npm run build` (napi build, release)
#   LEAFID_NODE_MODULE=path.node scripts/...     # a module built already (test-all.sh
#                                                # passes the one of the npm tarball)
# The second goes through napi's loader override (NAPI_RS_NATIVE_LIBRARY_PATH), so the
# tests load exactly that file, not a stale build beside the loader.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
npm install --no-audit --no-fund
if [ -n "${LEAFID_NODE_MODULE:-}" ]; then
    export NAPI_RS_NATIVE_LIBRARY_PATH=$LEAFID_NODE_MODULE
else
    npm run build
fi
exec node --test tests/node/
