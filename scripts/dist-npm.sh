#!/usr/bin/env bash
# Proves the npm tarballs of DIR (scripts/build-npm.sh) work as a user gets them:
# `leafid` carries no binary and no install script, its types are right for CommonJS and
# ES modules (arethetypeswrong), and both tarballs install together into a fresh project
# offline (nothing fetched, nothing compiled: scripts/dist.sh runs this without cargo on
# PATH), where a CommonJS and an ES module consumer run, a `.ts` and an `.mts` consumer
# pass tsc --strict (tests/npm/), and the README's Node quick start runs twice.
#
#   scripts/dist-npm.sh DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dist=$(cd "$1" && pwd)
version=$(node -p "require('$root/package.json').version")
main=$dist/leafid-$version.tgz
platform=$dist/leafid-linux-x64-gnu-$version.tgz

if tar -tzf "$main" | grep '\.node$'; then
    echo "$main carries a binary: binaries belong in the platform packages" >&2
    exit 1
fi
scripts=$(tar -xzOf "$main" package/package.json | node -e 'const s = JSON.parse(require("fs").readFileSync(0)).scripts || {};
    console.log(["preinstall", "install", "postinstall"].filter((k) => k in s).join(" "))')
[ -z "$scripts" ] || { echo "$main has install scripts: $scripts" >&2; exit 1; }
"$root/node_modules/.bin/attw" --quiet "$main"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root"/tests/npm/* "$work/"
awk '/^```js/{on=1; next} /^```/{if (on) exit} on' "$root/README.md" >"$work/quickstart.mjs"
cd "$work"
# The installed platform package's binary, not one a test run points the loader at.
unset NAPI_RS_NATIVE_LIBRARY_PATH
echo '{ "name": "leafid-consumer", "private": true }' >package.json
start=$EPOCHREALTIME
npm install --offline --no-audit --no-fund --loglevel=error "$platform" "$main"
secs=$(awk "BEGIN { printf \"%.1f\", $EPOCHREALTIME - $start }")
node consumer.cjs
node consumer.mjs
node -e 'require("leafid");
    const native = Object.keys(require.cache).filter((f) => f.endsWith(".node"));
    if (native.length !== 1 || !native[0].includes("/node_modules/leafid-linux-x64-gnu/"))
        throw new Error(`loaded ${native}, not the platform package`);'

node "$root/node_modules/typescript/bin/tsc" -p tsconfig.json
for run in 1 2; do
    node quickstart.mjs >/dev/null
done
echo "dist: npm tarballs installed in ${secs} s without cargo; require, import, tsc and the quick start (twice) ran"
