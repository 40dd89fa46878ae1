"""SnowflakeGenerator on the networked worker registries (real ZooKeeper and MariaDB from
scripts/services.sh): each ip:port identity gets a worker id of its own and gets the same
one back; zookeeper-recycle gives every process a lease of its own and close() hands it
back, and ids never repeat across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import leafid


@pytest.fixture
def name() -> str:
    """A registry name (ZooKeeper path / identity) no other test run shares; `_`, not
    `-`, which `zookeeper://` refuses in a name (Java Leaf splits node names on it)."""
    return f"py_{os.getpid()}_{time.time_ns()}"


def test_zookeeper_gives_each_ip_port_its_own_forever_id(zk: str, name: str, tmp_path: Path) -> None:
    a = leafid.SnowflakeGenerator(f"zookeeper://{zk}/{name}?port=8001", cache_dir=tmp_path / "a")
    b = leafid.SnowflakeGenerator(f"zookeeper://{zk}/{name}?port=8002", cache_dir=tmp_path / "b")
    assert a.worker_id != b.worker_id
    first = a.worker_id
    ids = [a.next_id() for _ in range(1000)] + [b.next_id() for _ in range(1000)]
    assert len(set(ids)) == 2000
    assert {leafid.decode(i).worker_id for i in ids} == {a.worker_id, b.worker_id}
    a.close()
    b.close()
    # Leaf's forever node: the same ip:port comes back to the same worker id.
    again = leafid.SnowflakeGenerator(f"zookeeper://{zk}/{name}?port=8001", cache_dir=tmp_path / "a")
    assert again.worker_id == first
    again.close()


def test_mysql_registry_gives_each_ip_port_its_own_id(mysql_url: str, tmp_path: Path) -> None:
    # Fixed identities: a rerun takes the same rows back instead of filling the table.
    a_url = f"{mysql_url}?ip=10.250.80.1&port=8080"
    b_url = f"{mysql_url}?ip=10.250.80.2&port=8080"
    with leafid.SnowflakeGenerator(a_url, cache_dir=tmp_path / "a") as a, \
            leafid.SnowflakeGenerator(b_url, cache_dir=tmp_path / "b") as b:
        assert a.worker_id != b.worker_id
        first = a.worker_id
        ids = a.next_ids(5000) + b.next_ids(5000)
        assert len(set(ids)) == 10_000
    with leafid.SnowflakeGenerator(a_url, cache_dir=tmp_path / "a") as again:
        assert again.worker_id == first
WORKER = """
import sys, threading, leafid
sf = leafid.SnowflakeGenerator(sys.argv[1], cache_dir=sys.argv[2])
out = []
def work():
    out.append([sf.next_id() for _ in range(5000)])
ts = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
sf.close()
print(",".join(str(i) for ids in out for i in ids))
"""


def test_zookeeper_recycle_processes_never_share_an_id(zk: str, name: str, tmp_path: Path) -> None:
    registry = f"zookeeper-recycle://{zk}/{name}"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, registry, str(tmp_path / f"c{i}")],
                              stdout=subprocess.PIPE, text=True) for i in range(8)]
    ids: list[int] = []
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0
        ids += [int(x) for x in out.split(",")]
    assert len(ids) == len(set(ids)) == 8 * 4 * 5000


def test_zookeeper_recycle_close_hands_the_id_back(zk: str, name: str, tmp_path: Path) -> None:
    # A pool of two ids (one worker bit): two holders exhaust it until one closes.
    layout = leafid.Layout(timestamp_bits=41, worker_bits=1, sequence_bits=21)
    registry = f"zookeeper-recycle://{zk}/{name}"
    a = leafid.SnowflakeGenerator(registry, layout=layout, cache_dir=tmp_path / "a")
    b = leafid.SnowflakeGenerator(registry, layout=layout, cache_dir=tmp_path / "b")
    assert {a.worker_id, b.worker_id} == {0, 1}
    with pytest.raises(leafid.WorkerIdExhausted):
        leafid.SnowflakeGenerator(registry, layout=layout, cache_dir=tmp_path / "c")
    last_of_a = a.next_ids(1000)[-1]
    freed = a.worker_id
    a.close()
    c = leafid.SnowflakeGenerator(registry, layout=layout, cache_dir=tmp_path / "c")
    assert c.worker_id == freed
    assert c.next_id() > last_of_a, "the next holder starts after its last holder's time"
    b.close()
    c.close()
