"""The exception hierarchy mirrors the core's Error enum, and each error a Python user can
meet arrives as its own class with the core's message and code."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import leafid
from leafid import _errors, _leafid

CONFIG = {"InvalidTag", "InvalidUrl", "InvalidConfig", "WorkerIdOutOfRange"}


def test_every_core_variant_has_a_class_under_leaf_error() -> None:
    names = set(_leafid._ERROR_NAMES)
    assert len(names) >= 18
    classes = {n for n, c in vars(_errors).items()
               if isinstance(c, type) and issubclass(c, leafid.LeafError)}
    # One class per core variant, plus the base and the three group classes.
    assert classes - names == {"LeafError", "ConfigError", "UnavailableError", "ClockError"}
    for name in names:
        cls = getattr(leafid, name)
        assert issubclass(cls, leafid.LeafError) and cls.__name__ == name
        assert getattr(_errors, name) is cls
        assert name in leafid.__all__


def test_not_found_is_a_key_error_and_config_errors_are_value_errors() -> None:
    assert issubclass(leafid.TagNotFound, KeyError)
    for name in _leafid._ERROR_NAMES:
        assert issubclass(getattr(leafid, name), ValueError) == (name in CONFIG), name
        assert issubclass(getattr(leafid, name), KeyError) == (name == "TagNotFound"), name


def test_message_is_printed_as_is() -> None:
    assert str(leafid.TagNotFound('tag "x" not found')) == 'tag "x" not found'


def test_public_names_are_exported() -> None:
    for name in leafid.__all__:
        assert hasattr(leafid, name), name


def _code(e: pytest.ExceptionInfo[leafid.LeafError]) -> str:
    return e.value.code


def test_clock_behind_the_local_bound_refuses_to_start(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    # Worker 0 claims to have issued up to an hour from now.
    (locks / "worker-0.json").write_text(json.dumps(
        {"worker_id": 0, "bound_ms": time.time_ns() // 1_000_000 + 3_600_000}))
    with pytest.raises(leafid.ClockBehindRegistry) as e:
        leafid.SnowflakeGenerator(f"local://{locks}", cache_dir=tmp_path, startup_wait=0.0)
    assert isinstance(e.value, leafid.ClockError)
    assert _code(e) == "LEAF_CLOCK_BEHIND_REGISTRY" and "behind" in str(e.value)


def test_corrupt_bound_file_is_malformed(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "worker-0.json").write_text("{not json")
    with pytest.raises(leafid.Malformed) as e:
        leafid.SnowflakeGenerator(f"local://{locks}", cache_dir=tmp_path)
    assert _code(e) == "LEAF_MALFORMED" and "worker-0.json" in str(e.value)


def test_unusable_lock_directory_is_io(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(leafid.Io) as e:
        leafid.SnowflakeGenerator(f"local://{blocker}/locks", cache_dir=tmp_path)
    assert isinstance(e.value, leafid.UnavailableError) and _code(e) == "LEAF_IO"


def test_a_full_local_pool_is_worker_id_exhausted(tmp_path: Path) -> None:
    layout = leafid.Layout(timestamp_bits=41, worker_bits=1, sequence_bits=21)
    registry = f"local://{tmp_path}/locks"
    held = [leafid.SnowflakeGenerator(registry, layout=layout, cache_dir=tmp_path) for _ in range(2)]
    assert sorted(g.worker_id for g in held) == [0, 1]
    with pytest.raises(leafid.WorkerIdExhausted) as e:
        leafid.SnowflakeGenerator(registry, layout=layout, cache_dir=tmp_path, startup_wait=0.0)
    assert _code(e) == "LEAF_WORKER_ID_EXHAUSTED"
    held[0].close()
    assert leafid.SnowflakeGenerator(registry, layout=layout, cache_dir=tmp_path).worker_id == 0


def test_a_layout_whose_range_has_passed_is_timestamp_overflow(tmp_path: Path) -> None:
    # 2^40 ms after 1970 is in 2004.
    layout = leafid.Layout(timestamp_bits=40, worker_bits=10, sequence_bits=13, epoch_ms=0)
    with pytest.raises(leafid.TimestampOverflow) as e:
        leafid.SnowflakeGenerator("fixed:1", layout=layout, cache_dir=tmp_path)
    assert _code(e) == "LEAF_TIMESTAMP_OVERFLOW"


LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def test_spent_segments_without_a_refill_are_segments_exhausted(tmp_path: Path) -> None:
    db = tmp_path / "ids.db"
    gen = leafid.SegmentGenerator(f"sqlite://{db}", wait_timeout=0.2, refresh_interval=3600)
    gen.create_tag("t", step=10)
    h = gen.tag("t")
    next(h)
    # Another process holds the database's write lock (it must be another process:
    # SQLite's POSIX locks never conflict within one), so no refill can finish in time.
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(leafid.SegmentsExhausted) as e:
            for _ in range(1000):
                next(h)
    finally:
        holder.communicate("")
    assert isinstance(e.value, leafid.UnavailableError) and _code(e) == "LEAF_SEGMENTS_EXHAUSTED"
    assert "both segments spent" in str(e.value)
