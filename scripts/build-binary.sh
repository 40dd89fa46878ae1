#!/usr/bin/env bash
# Builds the prebuilt `leafid` binary (leafid serve and the table commands) into DIR:
#   leafid-V-x86_64-linux-gnu.tar.gz   leafid-V-x86_64-linux-gnu/{leafid, README.md,
#                                      leafid.service, LICENSE}
# for Linux x86_64 with glibc 2.17 as the floor, as the wheel and the npm binary are.
# scripts/dist.sh calls it with their build environment (zig as the linker): the same
# target, profile and target directory, so cargo reuses what those builds compiled with
# the same features. Built with the server's default features, as `cargo install --path
# server` builds it.
#
#   scripts/build-binary.sh DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dist=$1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
target=x86_64-unknown-linux-gnu

cargo build --release --locked -p leafid-server --target "$target"
version=$(cargo pkgid -p leafid-server | sed 's/.*[@#]//')
name=leafid-$version-x86_64-linux-gnu
stage=$CARGO_TARGET_DIR/binary-stage
rm -rf "$stage"
mkdir -p "$stage/$name"
cp "$CARGO_TARGET_DIR/$target/release/leafid" "$stage/$name/leafid"
# Stripped here, not with the profile's `strip`: cargo passes that to every crate, and
# would compile the core again instead of reusing the wheel build's.
strip "$stage/$name/leafid"
sh scripts/zig/glibc-floor "$stage/$name/leafid"
cp server/README.md "$stage/$name/README.md"
cp deploy/leafid.service LICENSE "$stage/$name/"
# Owner, group and times fixed, so the tarball's bytes depend only on its files.
tar -C "$stage" --owner=0 --group=0 --numeric-owner --mtime=@0 --sort=name \
    -czf "$dist/$name.tar.gz" "$name"
