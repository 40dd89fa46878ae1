#!/usr/bin/env bash
# Runs every test of leafid on this machine: starts MariaDB and ZooKeeper on loopback
# (installing them from Debian first when missing), then the Rust core's unit and
# integration tests, the Python package's pytest suite, the Node package's node:test
# suite and the cross-language runs. Prints one closing line: "N passed, N failed".
#
#   scripts/test-all.sh            # everything
#   LEAFID_KEEP_SERVICES=1 ...     # leave the services running afterwards
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

passed=0
failed=0
failures=()
stage() {
    local name=$1
    shift
    echo
    echo "=== $name: $*"
    local start=$SECONDS
    if "$@"; then
        passed=$((passed + 1))
        echo "=== $name: ok ($((SECONDS - start)) s)"
    else
        failed=$((failed + 1))
        failures+=("$name")
        echo "=== $name: FAILED ($((SECONDS - start)) s)"
    fi
}

bash scripts/services.sh start || { echo "services failed to start"; echo "0 passed, 1 failed"; exit 1; }
# shellcheck disable=SC1091
source "${LEAFID_SERVICES_DIR:-$root/.services}/env"
if [ -z "${LEAFID_KEEP_SERVICES:-}" ]; then
    trap 'bash scripts/services.sh stop >/dev/null 2>&1 || true' EXIT
fi

# The core builds with each backend feature alone and with none (`memory:`, `fixed:`,
# `local:` only), without a warning. Cheap: `cargo check` of one crate.
rust_features() {
    local f out
    for f in "" sqlite mysql zookeeper; do
        out=$(cargo check -q -p leafid --no-default-features ${f:+--features "$f"} 2>&1) &&
            ! grep -q '^warning' <<<"$out" || { echo "features [$f]:"; echo "$out"; return 1; }
    done
}

# One target directory for cargo, maturin and napi, so the core compiles once.
export CARGO_TARGET_DIR="$root/target"

stage rust cargo test --workspace --all-targets --no-fail-fast
stage rust-features rust_features
stage rust-doc cargo test --workspace --doc

if [ -f pyproject.toml ]; then
    stage python bash scripts/test-python.sh
fi
if [ -f package.json ]; then
    stage node bash scripts/test-node.sh
fi
# Every release artifact into dist/, each installed and run without cargo on PATH.
stage dist bash scripts/dist.sh
if [ -f tests/cross/run.sh ]; then
    stage cross bash tests/cross/run.sh
fi

echo
if [ "$failed" -gt 0 ]; then
    echo "failed stages: ${failures[*]}"
fi
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
