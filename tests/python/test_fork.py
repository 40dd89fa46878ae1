"""A forked child never issues an id its parent could issue: os.fork, multiprocessing
with the fork start method, and a gunicorn-style prefork of a generator made first."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

import leafid


def _issue_in_child(next_id: Callable[[], int], n: int) -> list[int]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            ids = [next_id() for _ in range(n)]
            os.write(w, ",".join(map(str, ids)).encode())
            code = 0
        except BaseException:
            code = 1
        os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 1 << 16):
        chunks.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return [int(x) for x in b"".join(chunks).decode().split(",")]


def test_os_fork_child_gets_its_own_segments(sqlite_url: str) -> None:
    gen = leafid.SegmentGenerator(sqlite_url)
    gen.create_tag("t", step=1000)
    h = gen.tag("t")
    parent = [next(h) for _ in range(10)]
    child = _issue_in_child(h.next_id, 2000)
    parent += [next(h) for _ in range(2000)]
    assert not set(parent) & set(child)
    assert len(set(child)) == 2000


def test_os_fork_child_gets_its_own_worker_id(tmp_path: Path) -> None:
    sf = leafid.SnowflakeGenerator(f"local://{tmp_path}/locks", cache_dir=tmp_path)
    parent = [sf.next_id() for _ in range(10)]
    child = _issue_in_child(sf.next_id, 2000)
    parent += [sf.next_id() for _ in range(2000)]
    assert not set(parent) & set(child)
    assert {leafid.decode(i).worker_id for i in child} != {sf.worker_id}


def test_fixed_worker_id_refuses_in_a_forked_child(tmp_path: Path) -> None:
    sf = leafid.SnowflakeGenerator("fixed:3", cache_dir=tmp_path)
    sf.next_id()
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
    assert os.waitstatus_to_exitcode(status) == 0, "the child must not issue with its parent's id"


def _mp_worker(args: tuple[str, str, int]) -> list[int]:
    kind, _, n = args
    return [NEXT() for _ in range(n)]


# Set before the pool forks, so every child inherits the generator made in the parent.
NEXT: Callable[[], int] = lambda: 0


@pytest.mark.parametrize("kind", ["segment", "snowflake"])
def test_multiprocessing_fork_pool_after_a_prefork_generator(kind: str, sqlite_url: str, tmp_path: Path) -> None:
    global NEXT
    if kind == "segment":
        gen = leafid.SegmentGenerator(sqlite_url, wait_timeout=30.0)
        gen.create_tag("t", step=500)
        h = gen.tag("t")
        NEXT = h.next_id
    else:
        sf = leafid.SnowflakeGenerator(f"local://{tmp_path}/locks", cache_dir=tmp_path)
        NEXT = sf.next_id
    first = [NEXT() for _ in range(5)]
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(4) as pool:
        batches = pool.map(_mp_worker, [(kind, "", 3000)] * 8)
    rest = [NEXT() for _ in range(3000)]
    ids = first + rest + [i for b in batches for i in b]
    assert len(ids) == len(set(ids))


def _prefork_workers(next_id: Callable[[], int], workers: int, threads: int, n: int) -> list[int]:
    """gunicorn's shape: the master made the generator (app preloaded), then forks
    workers that each serve from several threads; returns every worker's ids."""
    pipes = []
    for _ in range(workers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 1
            try:
                out: list[list[int]] = []
                ts = [threading.Thread(target=lambda: out.append([next_id() for _ in range(n)]))
                      for _ in range(threads)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join()
                ids = [i for chunk in out for i in chunk]
                if len(ids) == threads * n:
                    with os.fdopen(w, "wb") as f:
                        f.write(",".join(map(str, ids)).encode())
                    code = 0
            finally:
                os._exit(code)
        os.close(w)
        pipes.append((pid, r))
    ids: list[int] = []
    for pid, r in pipes:
        with os.fdopen(r, "rb") as f:
            data = f.read()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        ids += [int(x) for x in data.decode().split(",")]
    return ids


@pytest.mark.parametrize("store", ["sqlite", "mysql"])
def test_gunicorn_style_prefork_workers_never_share_an_id(store: str, sqlite_url: str, tag: str,
                                                          request: pytest.FixtureRequest) -> None:
    url = sqlite_url if store == "sqlite" else request.getfixturevalue("mysql_url")
    master = leafid.SegmentGenerator(url, create_table=True, wait_timeout=30.0)
    master.create_tag(tag, step=300)
    h = master.tag(tag)
    before = h.next_ids(10)  # the master has a loaded segment when it forks
    ids = _prefork_workers(h.next_id, workers=4, threads=4, n=2000)
    after = h.next_ids(1000)
    every = before + ids + after
    assert len(every) == len(set(every)) == 10 + 4 * 4 * 2000 + 1000


def test_gunicorn_style_prefork_snowflake_workers_never_share_an_id(tmp_path: Path) -> None:
    sf = leafid.SnowflakeGenerator(f"local://{tmp_path}/locks", cache_dir=tmp_path)
    before = sf.next_ids(10)
    ids = _prefork_workers(sf.next_id, workers=4, threads=4, n=2000)
    every = before + ids + sf.next_ids(1000)
    assert len(every) == len(set(every))
    assert sf.worker_id not in {leafid.decode(i).worker_id for i in ids}


def test_zookeeper_recycle_child_takes_its_own_worker_id(zk: str, tmp_path: Path) -> None:
    # The parent holds a ZooKeeper session when it forks: the child opens its own on its
    # own runtime and leases another id; the parent goes on with its own.
    registry = f"zookeeper-recycle://{zk}/py-fork-{os.getpid()}-{time.time_ns()}"
    with leafid.SnowflakeGenerator(registry, cache_dir=tmp_path) as sf:
        parent = [sf.next_id() for _ in range(10)]
        child = _issue_in_child(sf.next_id, 2000)
        parent += [sf.next_id() for _ in range(2000)]
        assert not set(parent) & set(child)
        assert {leafid.decode(i).worker_id for i in child} != {sf.worker_id}


def test_new_zookeeper_generator_in_a_child_of_a_zookeeper_user(zk: str, tmp_path: Path) -> None:
    registry = f"zookeeper-recycle://{zk}/py-fork-new-{os.getpid()}-{time.time_ns()}"
    with leafid.SnowflakeGenerator(registry, cache_dir=tmp_path / "p") as sf:
        parent = [sf.next_id() for _ in range(10)]

        def in_child() -> int:
            with leafid.SnowflakeGenerator(registry, cache_dir=tmp_path / "c") as mine:
                return mine.next_id()

        child = _issue_in_child(in_child, 3)
        assert len(set(child)) == 3
        assert sf.worker_id not in {leafid.decode(i).worker_id for i in child}
        assert not set(parent) & set(child)


_CHILDREN_TAKE_POOL_IDS = """
import os, sys, leafid
registry, cache = sys.argv[1], sys.argv[2]
# The parent never touches ZooKeeper; each forked child opens its own session.
pids = []
for _ in range(3):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        with leafid.SnowflakeGenerator(registry, cache_dir=cache) as sf:
            ids = [sf.next_id() for _ in range(1000)]
            os.write(w, (str(sf.worker_id) + ":" + ",".join(map(str, ids))).encode())
        os._exit(0)
    os.close(w)
    pids.append((pid, r))
for pid, r in pids:
    out = b""
    while chunk := os.read(r, 1 << 16):
        out += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    print(out.decode())
"""


def test_zookeeper_recycle_after_fork_gives_each_child_its_own_worker_id(zk: str, tmp_path: Path) -> None:
    # The supported pattern for preforked servers: generators created in the workers.
    registry = f"zookeeper-recycle://{zk}/py-postfork-{os.getpid()}-{time.time_ns()}"
    out = subprocess.run([sys.executable, "-c", _CHILDREN_TAKE_POOL_IDS, registry, str(tmp_path)],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    workers, ids = [], []
    for line in out.split():
        worker, _, rest = line.partition(":")
        workers.append(int(worker))
        ids += [int(x) for x in rest.split(",")]
    assert len(workers) == 3 and len(ids) == 3000
    assert len(set(ids)) == len(ids)
    assert all(leafid.decode(i).worker_id in workers for i in ids)


def test_forks_while_the_core_is_logging_never_hang_the_child(mysql_url: str, tag: str) -> None:
    # A tag with a tiny step refills all the time: the slow path's lock changes hands
    # constantly, and every refill is a log event on its way to Python's logging from the
    # core's threads. Forking in the middle of that must never leave a child stuck on a
    # lock some other thread held (CPython's own, or ours).
    gen = leafid.SegmentGenerator(mysql_url, create_table=True)
    gen.create_tag(tag, step=10)
    h = gen.tag(tag)
    stop = threading.Event()

    def issue() -> None:
        while not stop.is_set():
            h.next_id()

    t = threading.Thread(target=issue)
    t.start()
    stuck: list[int] = []
    failed: list[int] = []
    try:
        for _ in range(60):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    h.next_id()  # the child's own segments, its own log events
                    code = 0
                except BaseException as e:
                    os.write(2, f"child: {e!r}\n".encode())
                finally:
                    os._exit(code)
            deadline = time.monotonic() + 20
            while (status := os.waitpid(pid, os.WNOHANG)) == (0, 0):
                if time.monotonic() > deadline:
                    stuck.append(pid)
                    os.kill(pid, 9)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.005)
            else:
                if os.waitstatus_to_exitcode(status[1]) != 0:
                    failed.append(pid)
    finally:
        stop.set()
        t.join()
        gen.close()
    assert not stuck, f"{len(stuck)} of 60 children hung after fork()"
    assert not failed, f"{len(failed)} of 60 children could not issue an id"
