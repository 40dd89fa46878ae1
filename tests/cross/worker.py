"""Python worker of the cross-language runs; the same command line as the Rust
worker (core/examples/issue_ids.rs):

    python worker.py segment URL TAG SECONDS OUT
    python worker.py snowflake REGISTRY_URL SECONDS OUT

and the same summary line and `LEAFID_START_BARRIER` handshake.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Callable

import leafid


def barrier(wait: bool) -> None:
    """`LEAFID_START_BARRIER`: reports this worker's claim as made, then (when it holds a
    generator) waits for the runner's go."""
    d = os.environ.get("LEAFID_START_BARRIER")
    if not d:
        return
    open(os.path.join(d, f"{os.getpid()}.ready"), "w").close()
    while wait and not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.002)


def main() -> int:
    args = sys.argv[1:]
    out = args[-1]
    worker_id: int | None = None
    try:
        next_id: Callable[[], int]
        if args[0] == "segment":
            url, tag, seconds, out = args[1], args[2], float(args[3]), args[4]
            gen = leafid.SegmentGenerator(url)
            next_id = gen.tag(tag).next_id
        else:
            registry, seconds, out = args[1], float(args[2]), args[3]
            sf = leafid.SnowflakeGenerator(
                registry=registry, cache_dir=os.environ.get("LEAFID_CACHE_DIR")
            )
            next_id = sf.next_id
            worker_id = sf.worker_id
    except leafid.LeafError as e:
        barrier(False)
        print(json.dumps({"ids": 0, "errors": 1, "first_error": f"{e.code}: {e}",
                          "worker_id": None, "out": out}))
        return 1
    barrier(True)
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
            lines = []
            for _ in range(64):
                try:
                    lines.append(str(next_id()))
                except leafid.LeafError as e:
                    errors += 1
                    # CLOCK_MONOTONIC, shared by every process on the host.
                    err_log.write(f"{int(time.monotonic() * 1000)} {e.code}\n")
                    first_error = first_error or f"{e.code}: {e}"
                    time.sleep(0.005)
                    break
            ids += len(lines)
            if lines:
                f.write("\n".join(lines) + "\n")
            f.flush()
            err_log.flush()
    print(json.dumps({"ids": ids, "errors": errors, "first_error": first_error,
                      "worker_id": worker_id, "out": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
