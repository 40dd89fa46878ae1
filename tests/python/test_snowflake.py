"""SnowflakeGenerator, Layout and decode from Python."""

from __future__ import annotations

import subprocess
import sys
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
