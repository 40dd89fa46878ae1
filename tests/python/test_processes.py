"""8 processes x 4 threads issuing at once: not one duplicate (segment on MySQL and
SQLite, snowflake with the local registry)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import leafid

WORKER = """
import sys, threading, leafid
kind, target, cache = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == "segment":
    url, tag = target.rsplit("#", 1)
    gen = leafid.SegmentGenerator(url, wait_timeout=30.0)  # loaded CI machines refill slowly
    nxt = gen.tag(tag).next_id
else:
    gen = leafid.SnowflakeGenerator(target, cache_dir=cache)
    nxt = gen.next_id
out = []
def work():
    ids = [nxt() for _ in range(5000)]
    assert ids == sorted(ids)
    out.append(ids)
ts = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print(",".join(str(i) for ids in out for i in ids))
"""


def run_processes(kind: str, target: str, tmp_path: Path) -> list[int]:
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, kind, target, str(tmp_path / f"c{i}")],
                              stdout=subprocess.PIPE, text=True) for i in range(8)]
    ids: list[int] = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        ids += [int(x) for x in out.split(",")]
    return ids


@pytest.mark.parametrize("store", ["sqlite", "mysql"])
def test_segment_processes_never_share_an_id(store: str, sqlite_url: str, tag: str, tmp_path: Path,
                                            request: pytest.FixtureRequest) -> None:
    url = sqlite_url if store == "sqlite" else request.getfixturevalue("mysql_url")
    leafid.SegmentGenerator(url, create_table=True).create_tag(tag, step=200)
    ids = run_processes("segment", f"{url}#{tag}", tmp_path)
    assert len(ids) == len(set(ids)) == 8 * 4 * 5000


def test_snowflake_local_processes_never_share_an_id(tmp_path: Path) -> None:
    ids = run_processes("snowflake", f"local://{tmp_path}/locks", tmp_path)
    assert len(ids) == len(set(ids)) == 8 * 4 * 5000
    # A process that finishes early frees its id for a later one, so ids may repeat
    # across time; what may never repeat is an id.
    assert len({leafid.decode(i).worker_id for i in ids}) >= 2
