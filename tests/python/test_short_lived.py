"""Short-lived processes (cron jobs, CLIs, serverless functions) on the registry
docs/registries.md recommends for them: `local:` on a directory of their own.

Each process starts, takes one id and exits; what makes its first id quick is that it
never waits for a floor (a registry without a record of the id's last holder waits
seconds). So the test asserts the absence of that wait, which the core logs at INFO
before it sleeps, rather than a time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import leafid

# One short-lived process: time from the constructor to the first id, and every
# `leafid` log record. It waits for "worker id held" (logged after any floor wait, and
# the log queue is in order) so that an absent "waiting" record is not merely unflushed.
CHILD = r"""
import json, logging, sys, time
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logger = logging.getLogger("leafid")
logger.setLevel(logging.INFO)
logger.addHandler(Keep())
import leafid
started = time.perf_counter()
with leafid.SnowflakeGenerator(sys.argv[1], cache_dir=sys.argv[2]) as gen:
    first = gen.next_id()
    ms = (time.perf_counter() - started) * 1000
deadline = time.monotonic() + 10
while not any("worker id held" in r for r in records) and time.monotonic() < deadline:
    time.sleep(0.01)
print(json.dumps({"ms": ms, "id": first, "log": records}))
"""


def test_twenty_fresh_processes_on_local_never_wait_for_a_floor(tmp_path: Path) -> None:
    registry = f"local://{tmp_path}/workers"
    runs = []
    for _ in range(20):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, registry, str(tmp_path)],
            capture_output=True, text=True, timeout=60, check=True,
        )
        runs.append(json.loads(out.stdout))
    print("first id after (ms):", ", ".join(f"{r['ms']:.1f}" for r in runs))
    for run in runs:
        assert any("worker id held" in r for r in run["log"]), run["log"]
        assert not any("waiting" in r for r in run["log"]), run["log"]
        # Not a speed check: a floor wait takes seconds, this only catches one the log
        # missed.
        assert run["ms"] < 1000, run
    ids = [r["id"] for r in runs]
    # Each run closed its generator, so the next takes the same worker id at once,
    # above every id the last one issued.
    assert ids == sorted(ids) and len(set(ids)) == 20, ids
    assert {leafid.decode(i).worker_id for i in ids} == {0}, ids
