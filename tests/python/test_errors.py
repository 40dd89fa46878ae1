"""The exception hierarchy mirrors the core's Error enum, and each error a Python user can
meet arrives as its own class with the core's message and code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import leafid
from leafid import _errors, _leafid

CONFIG = {"InvalidTag", "InvalidUrl", "InvalidConfig", "WorkerIdOutOfRange", "TableMissing", "AccessDenied"}


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
    # A pool of two ids (one worker bit), both claimed to have issued up to an hour from
    # now: no free id whose bound is past (one would be taken instead).
    layout = leafid.Layout(timestamp_bits=41, worker_bits=1, sequence_bits=21)
    for worker_id in (0, 1):
        (locks / f"worker-{worker_id}.json").write_text(json.dumps(
            {"worker_id": worker_id, "bound_ms": time.time_ns() // 1_000_000 + 3_600_000}))
    with pytest.raises(leafid.ClockBehindRegistry) as e:
        leafid.SnowflakeGenerator(f"local://{locks}", layout=layout, cache_dir=tmp_path,
                                  startup_wait=0.0)
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


@pytest.mark.parametrize("url", [
    "zookeeper://127.0.0.1:1/order?port=80-81&ip=127.0.0.1",
    "zookeeper://127.0.0.1:1/order?port=8080&ip=host-a",
    "mysql://root:x@127.0.0.1:1/leafid?port=80-81&ip=127.0.0.1",
    "mysql://root:x@127.0.0.1:1/leafid?port=8080&ip=host-a",
], ids=["zk_port", "zk_ip", "mysql_port", "mysql_ip"])
def test_identity_java_leaf_cannot_read_is_invalid_url_before_any_io(url: str, tmp_path: Path) -> None:
    # Nothing listens on port 1: had the registry been contacted, this would be
    # RegistryUnavailable. Java Leaf splits node names `ip:port-seq` on '-'.
    with pytest.raises(leafid.InvalidUrl) as e:
        leafid.SnowflakeGenerator(url, cache_dir=tmp_path, startup_wait=0.0)
    assert isinstance(e.value, ValueError) and _code(e) == "LEAF_INVALID_URL"
    assert "'-'" in str(e.value)


def test_recycle_pool_name_may_carry_a_dash(tmp_path: Path) -> None:
    # zookeeper-recycle:// is leafid's own tree, which Java Leaf never reads: the URL is
    # accepted and the registry contacted (nothing listens on port 1).
    with pytest.raises(leafid.RegistryUnavailable):
        leafid.SnowflakeGenerator("zookeeper-recycle://127.0.0.1:1/my-pool?connect_timeout_ms=300",
                                  cache_dir=tmp_path, startup_wait=0.0)


@pytest.mark.parametrize("max_skew", [0.001, 3601.0, -1.0])
def test_max_skew_out_of_range_is_invalid_config(max_skew: float, tmp_path: Path) -> None:
    with pytest.raises(leafid.InvalidConfig) as e:
        leafid.SnowflakeGenerator("fixed:1", cache_dir=tmp_path, max_skew=max_skew)
    assert "max_skew" in str(e.value)


def test_worker_id_in_use_and_clock_skew_sit_in_their_groups() -> None:
    assert issubclass(leafid.WorkerIdInUse, leafid.UnavailableError)
    assert issubclass(leafid.ClockSkew, leafid.ClockError)
    assert not issubclass(leafid.WorkerIdInUse, ValueError)


SKEWED = """
import sys, leafid
try:
    leafid.SnowflakeGenerator(sys.argv[1], cache_dir=sys.argv[2], max_skew=1.0, startup_wait=0.0)
except leafid.ClockSkew as e:
    print(e.code, e)
    sys.exit(0)
sys.exit("started with a clock 30 s ahead of ZooKeeper's")
"""


def test_local_clock_ahead_of_zookeeper_beyond_max_skew_is_clock_skew(zk: str, tmp_path: Path) -> None:
    # The whole process runs 30 s ahead (libfaketime); ZooKeeper's clock is the host's.
    env = dict(os.environ, LD_PRELOAD="/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
               FAKETIME="+30s", FAKETIME_DONT_FAKE_MONOTONIC="1")
    registry = f"zookeeper://{zk}/py_skew_{os.getpid()}_{time.time_ns()}?port=8080&ip=127.0.0.1"
    res = subprocess.run([sys.executable, "-c", SKEWED, registry, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("LEAF_CLOCK_SKEW ") and "ahead" in res.stdout


# ---- issue 21: what a caller can do with an error ----

def test_tracebacks_name_the_public_module() -> None:
    # `leafid.TagNotFound`, where users import it from, not `leafid._errors.TagNotFound`.
    import traceback

    gen = leafid.SegmentGenerator("memory:")
    with pytest.raises(leafid.TagNotFound) as e:
        gen.next_id("nope")
    shown = "".join(traceback.format_exception(e.type, e.value, e.tb))
    assert "leafid.TagNotFound: " in shown and "leafid._errors" not in shown
    for name in [*_leafid._ERROR_NAMES, "LeafError", "ConfigError", "UnavailableError", "ClockError"]:
        assert getattr(leafid, name).__module__ == "leafid", name


def test_tag_not_found_and_tag_exists_name_the_tag() -> None:
    gen = leafid.SegmentGenerator("memory:")
    with pytest.raises(leafid.TagNotFound) as e:
        gen.next_id("nope")
    assert e.value.tag == "nope" and e.value.code == "LEAF_TAG_NOT_FOUND" and e.value.cause is None
    with pytest.raises(KeyError):  # still a KeyError for `except KeyError`
        gen.tag("nope")
    gen.create_tag("t")
    with pytest.raises(leafid.TagExists) as x:
        gen.create_tag("t")
    assert x.value.tag == "t" and x.value.code == "LEAF_TAG_EXISTS"


def test_table_missing_is_a_config_error_a_retry_loop_does_not_retry(mysql_url: str) -> None:
    base, _ = mysql_url.rsplit("/", 1)
    leafid.SegmentGenerator(mysql_url, create_table=True).close()
    attempts = 0
    # The loop a user writes for outages: it must give up on a missing table at once.
    with pytest.raises(leafid.TableMissing) as e:
        while attempts < 3:
            attempts += 1
            try:
                leafid.SegmentGenerator(f"{base}/mysql")  # no leaf_alloc in `mysql`
                break
            except leafid.UnavailableError:
                continue
    assert attempts == 1
    assert isinstance(e.value, leafid.ConfigError) and not isinstance(e.value, leafid.UnavailableError)
    assert e.value.table == "leaf_alloc" and e.value.code == "LEAF_TABLE_MISSING"


def test_a_refused_connection_keeps_its_cause() -> None:
    with pytest.raises(leafid.StoreUnavailable) as e:
        leafid.SegmentGenerator("mysql://root:x@127.0.0.1:1/leafid")
    assert e.value.code == "LEAF_STORE_UNAVAILABLE"
    assert e.value.cause is not None and "Connection refused" in e.value.cause


def test_a_registry_outage_keeps_its_cause(tmp_path: Path) -> None:
    with pytest.raises(leafid.RegistryUnavailable) as e:
        leafid.SnowflakeGenerator("zookeeper-recycle://127.0.0.1:1/pool?connect_timeout_ms=300",
                                  cache_dir=tmp_path, startup_wait=0.0)
    assert e.value.cause is not None and "Connection refused" in e.value.cause


def test_an_os_error_is_the_cause_of_io(tmp_path: Path) -> None:
    import errno
    import traceback

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(leafid.Io) as e:
        leafid.SnowflakeGenerator(f"local://{blocker}/locks", cache_dir=tmp_path)
    cause = e.value.__cause__
    # Python's own subclass for the errno: a caller can tell one failure from another.
    assert isinstance(cause, NotADirectoryError) and cause.errno == errno.ENOTDIR
    assert e.value.cause is not None and "Not a directory" in e.value.cause
    shown = "".join(traceback.format_exception(e.type, e.value, e.tb))
    assert "direct cause" in shown and "NotADirectoryError" in shown


def test_errors_pickle_with_their_attributes() -> None:
    import pickle

    gen = leafid.SegmentGenerator("memory:")
    with pytest.raises(leafid.TagNotFound) as e:
        gen.next_id("gone")
    back = pickle.loads(pickle.dumps(e.value))
    assert type(back) is leafid.TagNotFound and str(back) == str(e.value)
    assert back.tag == "gone" and back.code == "LEAF_TAG_NOT_FOUND"
