#!/usr/bin/env bash
# Builds every release artifact of leafid into dist/, then proves each installs and runs
# without Rust:
#   leafid-V-cp39-abi3-manylinux2014_x86_64.whl  one wheel for CPython 3.9+, glibc 2.17+
#   leafid-V.tar.gz                               the sdist (builds with maturin)
#   leafid-V.crate                                the Rust crate, as `cargo publish` sends it
#   leafid-V.tgz                                  the npm package: loader and types, no binary
#   leafid-linux-x64-gnu-V.tgz                    its binary for Linux x64, glibc 2.17+
#   leafid-V-x86_64-linux-gnu.tar.gz              the `leafid` binary (serve, the table
#                                                 commands), glibc 2.17+
# The wheel is installed into a fresh venv for every CPython >= 3.9 in /usr/bin, with no
# `cargo` on PATH and no index (so nothing can be compiled or fetched), and the Python
# quick start of bindings-python/README.md (the README PyPI shows) runs from it twice.
# The npm tarballs are installed together into a fresh project, offline and without
# cargo (scripts/dist-npm.sh): require, import, tsc --strict, the README's Node quick
# start twice. The `leafid` binary is unpacked and run as an operator would, without
# cargo: the table commands and `leafid serve` on SQLite and `local:`, one id from each
# mode over HTTP.
#
#   scripts/dist.sh                  # into dist/
#   LEAFID_DIST_DIR=/tmp/d ...       # elsewhere
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dist=${LEAFID_DIST_DIR:-$root/dist}
rm -rf "$dist"
mkdir -p "$dist"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}

# maturin, zig and cargo-zigbuild from PyPI, in a venv of their own kept between runs.
# zig is the linker that lets this machine's glibc build for glibc 2.17 (manylinux2014);
# the wheel's tag and stripping come from [tool.maturin] in pyproject.toml.
tools=$root/.venv-dist
[ -x "$tools/bin/maturin" ] || python3 -m venv "$tools"
"$tools/bin/pip" install -q 'maturin>=1.13,<2' 'ziglang>=0.13' 'cargo-zigbuild>=0.24,<0.25'
# The wheel and the npm binary: one target, profile and linker (scripts/zig/cc), so the
# second build reuses every crate the first compiled, the core included. Not maturin's
# --zig nor napi's --cross-compile: each writes a zig wrapper of its own, and cargo
# recompiles every crate when the linker's path changes.
release=(env "PATH=$tools/bin:$PATH"
    "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=$root/scripts/zig/cc"
    "CC_x86_64_unknown_linux_gnu=$root/scripts/zig/cc")
"${release[@]}" maturin build --release --target x86_64-unknown-linux-gnu --out "$dist"
"${release[@]}" bash scripts/build-npm.sh "$dist"
"${release[@]}" bash scripts/build-binary.sh "$dist"
"${release[@]}" maturin sdist --out "$dist"
# --allow-dirty: a working copy with uncommitted changes packages too (a clean clone
# has none). The package is verified: it is built from the extracted .crate.
cargo package -p leafid --allow-dirty
cp "$CARGO_TARGET_DIR/package/leafid-$(cargo pkgid -p leafid | sed 's/.*[@#]//').crate" "$dist/"

wheel=$(ls "$dist"/leafid-*-manylinux*.whl)
case $wheel in
*-cp39-abi3-manylinux2014_x86_64*.whl) ;;
*) echo "unexpected wheel tag: $wheel" >&2; exit 1 ;;
esac

# PATH without any directory holding cargo or rustc: the install must not compile.
nocargo=$(tr ':' '\n' <<<"$PATH" | while read -r d; do
    [ -n "$d" ] && [ ! -e "$d/cargo" ] && [ ! -e "$d/rustc" ] && printf '%s:' "$d"
done)
nocargo=${nocargo%:}

# The README's first python block, run as pasted, twice (create_tag(…, exist_ok=True)).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
awk '/^```python/{on=1; next} /^```/{if (on) exit} on' bindings-python/README.md >"$work/quickstart.py"

tried=0
for py in /usr/bin/python3.[0-9]*; do
    [[ $py =~ /python3\.[0-9]+$ ]] || continue
    "$py" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || continue
    v=${py##*/}
    env=$work/venv-$v
    "$py" -m venv "$env"
    start=$EPOCHREALTIME
    PATH=$nocargo "$env/bin/pip" install -q --no-index "$wheel"
    secs=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $start }")
    (
        cd "$work" && mkdir -p "run-$v" && cd "run-$v"
        for run in 1 2; do
            PATH=$nocargo "$env/bin/python" ../quickstart.py >/dev/null
        done
        PATH=$nocargo "$env/bin/python" -c 'import leafid; print(leafid.__version__)' >/dev/null
    )
    echo "dist: $v: wheel installed in ${secs} s without cargo; quick start ran twice"
    tried=$((tried + 1))
done
[ "$tried" -gt 0 ] || { echo "no CPython >= 3.9 in /usr/bin" >&2; exit 1; }

PATH=$nocargo bash scripts/dist-npm.sh "$dist"
PATH=$nocargo bash scripts/dist-binary.sh "$dist"

ls -l "$dist"
