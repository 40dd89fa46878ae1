"""HTTP worker of the cross-language runs: a caller of `leafid serve` as Java, Go and
PHP services call Leaf, one plain `GET` per id on a keep-alive connection, with only
the standard library (no leafid in this process):

    python worker_http.py segment BASE TAG SECONDS OUT
    python worker_http.py snowflake BASE SECONDS OUT

BASE is `http://127.0.0.1:PORT`. Writes the ids to OUT and the errors to OUT.err like
the other workers, and prints the same summary line. A non-200 answer is an error
(Leaf's `Result{id=-N, status=EXCEPTION}` as HTTP 500); its code is the `id=-N`.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import sys
import time
import urllib.parse


def main() -> int:
    args = sys.argv[1:]
    if args[0] == "segment":
        base, tag, seconds, out = args[1], args[2], float(args[3]), args[4]
        path = f"/api/segment/get/{urllib.parse.quote(tag)}"
    else:
        base, seconds, out = args[1], float(args[2]), args[3]
        path = "/api/snowflake/get/cross"
    host = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(host.hostname or "127.0.0.1", host.port, timeout=10)
    rate = float(os.environ.get("LEAFID_WORKER_RATE", "50000"))
    ids = errors = 0
    first_error = ""
    start = time.monotonic()
    deadline = start + seconds
    with open(out, "w") as f, open(out + ".err", "w") as err_log:
        while time.monotonic() < deadline:
            if ids > rate * (time.monotonic() - start):
                time.sleep(0.001)
                continue
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                body = resp.read().decode()
            except (OSError, http.client.HTTPException) as e:
                # A dropped connection: a fresh one on the next request.
                conn.close()
                body, status = f"{type(e).__name__}: {e}", 0
            else:
                status = resp.status
            if status == 200 and re.fullmatch(r"-?\d+\n?", body):
                f.write(body.strip() + "\n")
                ids += 1
                continue
            errors += 1
            code = re.search(r"id=(-\d+)", body)
            # CLOCK_MONOTONIC, shared by every process on the host.
            err_log.write(f"{int(time.monotonic() * 1000)} "
                          f"HTTP_{status}{code.group(1) if code else ''}\n")
            first_error = first_error or f"HTTP {status}: {body.strip()[:200]}"
            time.sleep(0.005)
    conn.close()
    print(json.dumps({"ids": ids, "errors": errors, "first_error": first_error,
                      "worker_id": None, "out": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
