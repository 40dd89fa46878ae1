#!/usr/bin/env bash
# Builds the npm tarballs into DIR:
#   leafid-V.tgz                 what users install: napi's loader, index.js/.mjs, types
#   leafid-linux-x64-gnu-V.tgz   its optional dependency for Linux x64 (glibc): the binary
# scripts/dist.sh calls it with the wheel's build environment (zig as the linker, for
# glibc 2.17): the binary is built as the wheel is (release, x86_64-unknown-linux-gnu,
# one target dir), so cargo reuses every crate the wheel's build compiled.
#
#   scripts/build-npm.sh DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
dist=$1
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/target}
npm install --no-audit --no-fund --loglevel=error

out=$CARGO_TARGET_DIR/napi-dist
rm -rf "$out"
npx napi build --platform --release --target x86_64-unknown-linux-gnu \
    --manifest-path bindings-node/Cargo.toml --output-dir "$out" --js binding.js --dts binding.d.ts
# The loader is committed (a fresh clone packs without building); it must be the one
# napi generates from this source, or a new export would be missing from it.
cmp -s "$out/binding.js" bindings-node/binding.js || {
    echo "bindings-node/binding.js is stale: run \`npm run build\` and commit it" >&2
    exit 1
}

node=$out/leafid.linux-x64-gnu.node
# Stripped here, not with `napi build --strip`: that sets RUSTFLAGS for every crate, and
# cargo would compile the core again instead of reusing the wheel build's.
strip "$node"
sh scripts/zig/glibc-floor "$node"

stage=$CARGO_TARGET_DIR/npm-stage
rm -rf "$stage"
mkdir -p "$stage/leafid"
cp -r bindings-node/npm/linux-x64-gnu "$stage/"
cp "$node" "$stage/linux-x64-gnu/"
npm pack --silent --pack-destination "$dist" "$stage/linux-x64-gnu" >/dev/null

# `leafid` as packed: the files npm would pack from here, and a package.json naming the
# platform packages built beside it in $dist as optionalDependencies of this version;
# npm installs the one whose os/cpu/libc match. Only those built: a name no one has
# published yet could be taken by anyone, and their code would load (the release
# workflow's `napi pre-publish` names all seven, once all seven are built). Added here,
# not committed: before the first publish no registry has them and `npm install` here
# would fail on them.
npm pack --dry-run --json | node -e 'for (const f of JSON.parse(require("fs").readFileSync(0))[0].files) console.log(f.path)' |
    while read -r f; do
        mkdir -p "$stage/leafid/$(dirname "$f")"
        cp "$f" "$stage/leafid/$f"
    done
node -e '
    const fs = require("fs");
    const [out, dist] = process.argv.slice(1);
    const p = JSON.parse(fs.readFileSync("package.json", "utf8"));
    const platforms = fs.readdirSync("bindings-node/npm").sort()
        .filter((d) => fs.existsSync(`${dist}/leafid-${d}-${p.version}.tgz`));
    p.optionalDependencies = Object.fromEntries(platforms.map((d) => [`leafid-${d}`, p.version]));
    fs.writeFileSync(out, JSON.stringify(p, null, 2) + "\n");
' "$stage/leafid/package.json" "$dist"
npm pack --silent --pack-destination "$dist" "$stage/leafid" >/dev/null
