#!/usr/bin/env bash
# Builds the Node package the way a user would (`npm install` at the repository root
# compiles the native module), then runs the node:test suite (tests/node), which also
# type-checks the README examples with tsc --strict.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
npm install --no-audit --no-fund
exec node --test tests/node/
