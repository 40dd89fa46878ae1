#!/usr/bin/env bash
# `wrk` against `leafid serve`, with each server thread taking ids in chunks (the default,
# --thread-chunk 64) and with every id from the tag's one cursor (--thread-chunk 0), in
# one run: 1, 4 and 16 connections, GET /api/segment/get/bench on a SQLite store whose
# step is large enough that no refill happens during a run. Prints a Markdown table.
#
#   bash benches/serve_wrk.sh            # 10 s per row
#   LEAFID_WRK_SECONDS=30 bash benches/serve_wrk.sh
#
# Needs wrk (Debian's `wrk` package) and a release build of the server (built here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${LEAFID_WRK_SECONDS:-10}
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
cargo build -q --release -p leafid-server
bin=${CARGO_TARGET_DIR:-$root/target}/release/leafid
work=$(mktemp -d)
trap 'kill "${pid:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
db="sqlite://$work/ids.db"
"$bin" init --url "$db" >/dev/null
"$bin" create-tag bench --step 100000000 --url "$db" >/dev/null

echo "| connections | --thread-chunk 0: requests/s | p99 | --thread-chunk 64: requests/s | p99 | 64 / 0 |"
echo "|---|---|---|---|---|---|"
port=18091
for c in 1 4 16; do
    row=()
    for chunk in 0 64; do
        "$bin" serve --url "$db" --listen "127.0.0.1:$port" --thread-chunk "$chunk" \
            >"$work/serve.log" 2>&1 &
        pid=$!
        for _ in $(seq 100); do
            curl -fs "http://127.0.0.1:$port/api/segment/get/bench" >/dev/null 2>&1 && break
            sleep 0.1
        done
        out=$(wrk -t "$((c < 2 ? 1 : 2))" -c "$c" -d "${seconds}s" --latency \
            "http://127.0.0.1:$port/api/segment/get/bench")
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        row+=("$rps" "$p99")
        port=$((port + 1))
    done
    ratio=$(awk -v a="${row[2]}" -v b="${row[0]}" 'BEGIN {printf "%.2f×", a / b}')
    echo "| $c | ${row[0]} | ${row[1]} | ${row[2]} | ${row[3]} | $ratio |"
done
