#!/usr/bin/env bash
# Runs every test of leafid on this machine: starts MariaDB, PostgreSQL and ZooKeeper on
# loopback (installing them from Debian first when missing), then the Rust core's unit and
# integration tests, loom model checks, the release artifacts (scripts/dist.sh), the
# code blocks of README.md and docs/ as pasted (scripts/test-docs.sh), the Python
# package's pytest suite and the Node package's node:test suite on those artifacts, and
# the cross-language runs. Prints one closing line: "N passed, N failed".
#
# Time: the CPU-bound builds that no test waits for right away (loom's, the release
# artifacts', the feature checks) start in the background, niced, once the debug build is
# done, and run while the Rust tests, which mostly wait (leases, sessions, timeouts), hold
# the foreground; their stage then waits for them and prints their output. Each stage
# prints its seconds (a background stage: the seconds it was waited for, and its own).
#
#   scripts/test-all.sh            # everything
#   LEAFID_KEEP_SERVICES=1 ...     # leave the services running afterwards
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

passed=0
failed=0
failures=()
logs=$(mktemp -d)
declare -A bg_pid bg_start
# Starts "$@" (a command or a function) in the background as job $1, niced, its output
# kept for bg_wait.
bg() {
    local name=$1
    shift
    bg_start[$name]=$SECONDS
    (
        renice -n 15 -p "$BASHPID" >/dev/null
        "$@"
    ) >"$logs/$name.log" 2>&1 &
    bg_pid[$name]=$!
}
# Runs "$@" once background job $1 has ended: two builds at a time at most (each cargo
# runs a job per core), so memory and the foreground's share stay as they were.
after() {
    local pid=${bg_pid[$1]}
    shift
    while kill -0 "$pid" 2>/dev/null; do sleep 1; done
    "$@"
}
# Sets process $1 and its descendants back to the foreground's priority (best effort:
# only root may lower a niceness); a cargo's later compilers inherit it.
unnice() {
    local p
    for p in $(pgrep -P "$1"); do unnice "$p"; done
    renice -n 0 -p "$1" >/dev/null 2>&1 || true
}
# Waits for background job $1, prints its output, and returns its status. Nothing runs
# in the foreground while a stage waits, so every background job gets its full share of
# the CPU from then on.
bg_wait() {
    local name=$1 rc=0 pid
    for pid in "${bg_pid[@]}"; do unnice "$pid"; done
    wait "${bg_pid[$name]}" || rc=$?
    cat "$logs/$name.log"
    echo "(in the background for $((SECONDS - bg_start[$name])) s)"
    return "$rc"
}
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
    for f in "" sqlite mysql postgres zookeeper; do
        out=$(cargo check -q -p leafid --no-default-features ${f:+--features "$f"} 2>&1) &&
            ! grep -q '^warning' <<<"$out" || { echo "features [$f]:"; echo "$out"; return 1; }
    done
}

# The doc tests (on the test build), and the crate's documentation as docs.rs builds it
# (every feature), with no broken or private link (beside the feature checks, whose
# dependency metadata it reuses).
rust_doc() { cargo test --workspace --doc; }
rust_docs_rs() {
    RUSTDOCFLAGS="-D warnings" CARGO_TARGET_DIR="$root/target/features" \
        cargo doc -q -p leafid --all-features --no-deps
}

# The lock-free code under loom: the segment ring (`--lib loom`) and the snowflake word
# (tests/loom_snowflake.rs), every interleaving up to the preemption bound. The cfg
# swaps in loom's atomics and changes every crate's flags, so it builds apart, in
# target/loom, and without the backends (the lock-free code needs none).
loom() {
    RUSTFLAGS="--cfg leafid_loom" LOOM_MAX_PREEMPTIONS=2 CARGO_TARGET_DIR="$root/target/loom" \
        bash -c 'cargo test -q -p leafid --no-default-features --release --lib loom &&
                 cargo test -q -p leafid --no-default-features --release --test loom_snowflake'
}

# One target directory for cargo, maturin and napi, so the core compiles once.
export CARGO_TARGET_DIR="$root/target"
# A clean build, once: line tables only (a failing test's backtrace keeps file:line; the
# full debug info of every test binary is most of the link time and disk), and no
# incremental state, which a build that runs once only pays for.
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}

# The feature checks in a target directory of their own: `cargo check` shares nothing
# with the test build, and a second directory keeps it off the lock of target/debug,
# which `cargo test` holds while its tests run.
rust_features_bg() { CARGO_TARGET_DIR="$root/target/features" rust_features; }

# server/tests/deploy.rs checks deploy/leafid.service with `systemd-analyze verify`
# (Debian's systemd package, installed when missing, as services.sh installs MariaDB).
if ! command -v systemd-analyze >/dev/null; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd </dev/null ||
        echo "systemd-analyze could not be installed: server/tests/deploy.rs will fail"
fi
# Every test binary first, the adversary matrix's too. `--workspace` for the matrix as
# for the rest: features are unified over the packages named, and `-p leafid` alone
# would build the core and tokio again with fewer features.
rust_build() {
    cargo test --workspace --all-targets --no-run &&
        cargo test --workspace --test adversary --test registry --test snowflake --no-run
}
stage rust-build rust_build
# Background builds (see the top): none touches target/debug but dist.sh's `cargo
# package`, which waits for cargo's lock when it must. Every release artifact goes into
# dist/, each installed and run without cargo on PATH (scripts/dist.sh).
bg dist bash scripts/dist.sh
bg loom loom
bg rust-features after loom rust_features_bg
bg rust-docs-rs after rust-features rust_docs_rs
stage rust cargo test --workspace --all-targets --no-fail-fast
# The registry adversary matrix (issue 20): leafid processes against the real services,
# one adversary per row, zero duplicates asserted; one `ADVERSARY` line per row. Kept
# out of --all-targets (test = false): its rows mostly wait for leases to expire, so it
# runs here with more threads than cores.
stage adversary cargo test --workspace --test adversary -- --test-threads=6
# The registry suite (test = false too): mostly waiting, as the matrix.
stage registry cargo test --workspace --test registry -- --test-threads=4
# The snowflake suite (test = false too): mostly waiting, as the matrix.
stage snowflake cargo test --workspace --test snowflake -- --test-threads=6
stage rust-doc rust_doc
stage loom bg_wait loom
stage rust-features bg_wait rust-features
stage rust-docs-rs bg_wait rust-docs-rs
stage dist bg_wait dist
# The Python, Node and cross stages test those artifacts instead of compiling the release
# core again (`pip install .`, `npm run build`); without them (dist failed) they build.
dist=${LEAFID_DIST_DIR:-$root/dist}
if wheel=$(ls "$dist"/leafid-*-manylinux*.whl 2>/dev/null); then
    export LEAFID_WHEEL=$wheel
fi
if tgz=$(ls "$dist"/leafid-linux-x64-gnu-*.tgz 2>/dev/null); then
    rm -rf "$CARGO_TARGET_DIR/dist-node" && mkdir -p "$CARGO_TARGET_DIR/dist-node"
    tar -xzf "$tgz" -C "$CARGO_TARGET_DIR/dist-node"
    export NAPI_RS_NATIVE_LIBRARY_PATH=$CARGO_TARGET_DIR/dist-node/package/leafid.linux-x64-gnu.node
fi
# The code blocks of README.md and docs/ marked runnable, as pasted, twice, as nobody,
# on those artifacts (Rust in a fresh edition-2024 `cargo new` project).
stage docs bash scripts/test-docs.sh
if [ -f pyproject.toml ]; then
    stage python bash scripts/test-python.sh
fi
if [ -f package.json ]; then
    stage node bash scripts/test-node.sh
fi
if [ -f tests/cross/run.sh ]; then
    stage cross bash tests/cross/run.sh
fi

echo
if [ "$failed" -gt 0 ]; then
    echo "failed stages: ${failures[*]}"
fi
echo "stages: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
