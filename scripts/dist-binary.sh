#!/usr/bin/env bash
# Proves the `leafid` binary tarball of DIR (scripts/build-binary.sh) works as an
# operator gets it, with nothing but the tarball (scripts/dist.sh runs this without
# cargo on PATH): it holds the binary, its README, the systemd unit and the licence; the
# binary, installed as server/README.md says, reports the tarball's version, runs the
# table commands on a SQLite file, and `leafid serve` on that file and a `local:`
# registry answers one segment id and one snowflake id over HTTP, then stops cleanly on
# SIGTERM.
#
#   scripts/dist-binary.sh DIR
set -euo pipefail
dist=$(cd "$1" && pwd)
tarball=$(ls "$dist"/leafid-*-x86_64-linux-gnu.tar.gz)
name=$(basename "$tarball" .tar.gz)
version=${name#leafid-}
version=${version%-x86_64-linux-gnu}

want="$name/
$name/LICENSE
$name/README.md
$name/leafid
$name/leafid.service"
got=$(tar -tzf "$tarball" | LC_ALL=C sort)
[ "$got" = "$want" ] || { printf '%s holds\n%s\nnot\n%s\n' "$tarball" "$got" "$want" >&2; exit 1; }

work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
cd "$work"
tar -xzf "$tarball"
mkdir bin
install -m 755 "$name/leafid" bin/leafid
leafid=$work/bin/leafid

[ "$("$leafid" --version)" = "leafid $version" ] || { echo "leafid --version: $("$leafid" --version)" >&2; exit 1; }
export LEAFID_URL=sqlite://$work/ids.db
"$leafid" init >/dev/null
"$leafid" create-tag order --start 1 --step 1000 --exist-ok >/dev/null
[ "$("$leafid" next order -n 3 | tr '\n' ' ')" = "1 2 3 " ] || { echo "leafid next: not 1 2 3" >&2; exit 1; }

get() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$leafid" serve --listen "127.0.0.1:$port" --snowflake "local://$work/workers" 2>serve.log &
server=$!
for _ in $(seq 100); do
    get "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$server" 2>/dev/null || { cat serve.log >&2; exit 1; }
    sleep 0.2
done
get "http://127.0.0.1:$port/health" >/dev/null || { echo "leafid serve: not healthy after 20 s" >&2; cat serve.log >&2; exit 1; }
segment=$(get "http://127.0.0.1:$port/api/segment/get/order")
snowflake=$(get "http://127.0.0.1:$port/api/snowflake/get/any")
# The segment id comes after the 3 the table command reserved; a snowflake id is a
# positive 63-bit integer (Leaf answers errors as negative numbers).
[ "$segment" -gt 3 ] && [ "$snowflake" -gt 0 ] || { echo "ids: $segment $snowflake" >&2; cat serve.log >&2; exit 1; }
kill -TERM "$server"
wait "$server" || { echo "leafid serve exited with $? on SIGTERM" >&2; cat serve.log >&2; exit 1; }
server=
echo "dist: $name: installed without cargo; table commands, segment id $segment and snowflake id $snowflake over HTTP"
