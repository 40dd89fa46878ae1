"""SnowflakeGenerator, Layout and decode from Python."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

import leafid


def test_ids_increase_and_decode_to_this_worker(tmp_path: Path) -> None:
    with leafid.SnowflakeGenerator(f"local://{tmp_path}/locks", cache_dir=tmp_path) as sf:
        ids = sf.next_ids(5000) + [sf.next_id(), next(sf)]
        assert ids == sorted(set(ids))
        d = leafid.decode(ids[-1])
        assert isinstance(d, leafid.DecodedId)
        assert d.worker_id == sf.worker_id
        assert 0 <= d.sequence < 4096
        assert d.datetime.year >= 2026
        assert sf.layout == leafid.Layout()


def test_fixed_worker_and_custom_layout(tmp_path: Path) -> None:
    layout = leafid.Layout(timestamp_bits=41, worker_bits=5, sequence_bits=17, epoch_ms=leafid.LEAF_EPOCH_MS)
    assert layout.max_worker_id == 31
    sf = leafid.SnowflakeGenerator("fixed:7", layout=layout, cache_dir=tmp_path)
    assert sf.worker_id == 7
    assert leafid.decode(sf.next_id(), layout).worker_id == 7


def test_bad_configuration_is_a_value_error(tmp_path: Path) -> None:
    with pytest.raises(leafid.InvalidConfig) as e:
        leafid.Layout(timestamp_bits=41, worker_bits=10, sequence_bits=10)
    assert isinstance(e.value, ValueError) and e.value.code == "LEAF_INVALID_CONFIG"
    with pytest.raises(leafid.WorkerIdOutOfRange):
        leafid.SnowflakeGenerator("fixed:5000", cache_dir=tmp_path)
    with pytest.raises(leafid.InvalidUrl):
        leafid.SnowflakeGenerator("etcd://somewhere", cache_dir=tmp_path)
    with pytest.raises(leafid.InvalidConfig):
        leafid.Layout(epoch_ms=99_999_999_999_999)


HOLD = """
import sys, leafid
sf = leafid.SnowflakeGenerator(sys.argv[1], cache_dir=sys.argv[2])
print(sf.worker_id, flush=True)
sys.stdin.read()
"""


def test_close_releases_the_local_worker_id(tmp_path: Path) -> None:
    registry = f"local://{tmp_path}/locks"
    first = leafid.SnowflakeGenerator(registry, cache_dir=tmp_path / "a")
    other = subprocess.Popen([sys.executable, "-c", HOLD, registry, str(tmp_path / "b")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert other.stdout is not None
    held_by_other = int(other.stdout.readline())
    assert held_by_other != first.worker_id
    mine = first.worker_id
    first.close()
    third = subprocess.run([sys.executable, "-c", HOLD, registry, str(tmp_path / "c")],
                           input="", capture_output=True, text=True, timeout=60)
    assert int(third.stdout.split()[0]) == mine, "the closed id is free again"
    other.communicate("")


def test_closed_snowflake_generator_refuses(tmp_path: Path) -> None:
    sf = leafid.SnowflakeGenerator(f"local://{tmp_path}/locks", cache_dir=tmp_path)
    sf.close()
    with pytest.raises(leafid.Closed):
        sf.next_id()


def test_zookeeper_registry_issues_and_refuses_in_a_forked_child(zk: str, tmp_path: Path) -> None:
    import os

    registry = f"zookeeper://{zk}/py_{os.getpid()}_{time.time_ns()}?port=8080&ip=127.0.0.1"
    with leafid.SnowflakeGenerator(registry, cache_dir=tmp_path) as sf:
        ids = [sf.next_id() for _ in range(100)]
        assert ids == sorted(set(ids)) and leafid.decode(ids[-1]).worker_id == sf.worker_id
        pid = os.fork()
        if pid == 0:
            try:
                sf.next_id()
                os._exit(1)
            except leafid.InvalidConfig as e:
                os._exit(0 if "create it after the fork" in str(e) else 2)
            except BaseException:
                os._exit(3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "a forever-mode id is the parent's"


def test_unreachable_zookeeper_is_registry_unavailable(tmp_path: Path) -> None:
    with pytest.raises(leafid.RegistryUnavailable) as e:
        leafid.SnowflakeGenerator("zookeeper://127.0.0.1:1/nowhere?port=1&connect_timeout_ms=300",
                                  cache_dir=tmp_path)
    assert isinstance(e.value, leafid.UnavailableError) and e.value.code == "LEAF_REGISTRY_UNAVAILABLE"


def test_mysql_registry_gives_a_worker_id(mysql_url: str, tmp_path: Path) -> None:
    with leafid.SnowflakeGenerator(f"{mysql_url}?port=9&ip=127.0.0.9",  # one identity: the same id each run
                                   cache_dir=tmp_path) as sf:
        assert leafid.decode(sf.next_id()).worker_id == sf.worker_id


def test_a_big_batch_sleeps_out_spent_milliseconds(tmp_path: Path) -> None:
    # Issue 29 review: next_ids spun through each spent millisecond with the GIL
    # released, a CPU busy the whole batch; it sleeps now. 192 ids per ms go to batches
    # in this layout, so 20 000 ids take about 100 ms.
    layout = leafid.Layout(timestamp_bits=41, worker_bits=14, sequence_bits=8)
    with leafid.SnowflakeGenerator("fixed:11", layout=layout, cache_dir=tmp_path) as sf:
        wall, cpu = time.perf_counter(), time.thread_time()
        ids = sf.next_ids_array(20_000)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        assert list(ids) == sorted(set(ids))
        # Generous: sleeping, a few percent of the wall time; spinning, all of it.
        assert cpu < wall / 2, (cpu, wall)
