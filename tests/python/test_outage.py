"""Issue 30, Python: what the snowflake calls return, and how long they take, while the
registry is out of reach. A loopback proxy (tests/python/proxy.py) stands between the
generator and the real ZooKeeper or MariaDB (a ``?pool=`` registry) and blackholes or
refuses. Settings are short so the bound comes quickly: a heartbeat of 0.5 s and a
``lookahead`` of 4 s, so an outage of 2.5 s (longer than the 1.6-2 s after which issuing
stopped before issue 30) is ridden through and a longer one meets the bound.

Timing asserts are hang-catchers only: a call during a short outage returns within 1 s
(before issue 30 one waited 10 s, the core's ``MAX_ASYNC_WAIT``); past the bound a call
fails within 30 s (the core bounds it at 10 s; a hang would not end); ids are back within
30 s of the heal. The measured figures are printed (``pytest -s``)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, List, Tuple
from urllib.parse import unquote, urlparse

import pymysql
import leafid
from proxy import Proxy

HEARTBEAT = 0.5
LOOKAHEAD = 4.0
# Small, so a fresh identity's lead (lookahead + max_skew + 1 s) is short to wait out.
MAX_SKEW = 1.0
OUTAGE = 2.5
# A call that returns from memory takes microseconds; one that waits for the registry
# took 10 s before issue 30. 1 s tells the two apart on a loaded CI machine.
AT_ONCE = 1.0
# Past the bound a call fails within the core's 10 s (MAX_ASYNC_WAIT); only a hang
# outlasts this.
BOUNDED = 30.0
HUNG = 30.0


def options(tmp_path: Path) -> dict[str, Any]:
    return dict(cache_dir=tmp_path, heartbeat=HEARTBEAT, lookahead=LOOKAHEAD, max_skew=MAX_SKEW)


def settled_zookeeper(zk: str, tmp_path: Path) -> Tuple[Proxy, str]:
    """A ``zookeeper://`` identity whose recorded bound is in the past, behind a proxy:
    a holder on it issues at the real clock (a new identity's ids lead the clock by
    lookahead + max_skew + 1 s and would leave no room to ride an outage through)."""
    proxy = Proxy(int(zk.rsplit(":", 1)[1]))
    url = f"zookeeper://127.0.0.1:{proxy.port}/py_outage_{os.getpid()}_{time.time_ns()}?port=8001"
    first = leafid.SnowflakeGenerator(url, **options(tmp_path))
    first.next_id()
    assert first.close()
    time.sleep(LOOKAHEAD + MAX_SKEW + 1.0 + 0.2)  # the bound written at close is past
    return proxy, url


def settled_pool(mysql_url: str, tmp_path: Path) -> Tuple[Proxy, str]:
    """A ``mysql://…?pool=`` pool of one id whose last bound is long past, behind a proxy."""
    u = urlparse(mysql_url)
    assert u.port is not None
    proxy = Proxy(u.port)
    pool = f"py_outage_{os.getpid()}_{time.time_ns()}"
    via = mysql_url.replace(f"{u.hostname}:{u.port}", f"127.0.0.1:{proxy.port}")
    url = f"{via}{'&' if '?' in via else '?'}pool={pool}&pool_size=1"
    leafid.SnowflakeGenerator(url, **options(tmp_path)).close()
    db = pymysql.connect(host=u.hostname, port=u.port, user=unquote(u.username or ""),
                         password=unquote(u.password or ""), database=u.path.lstrip("/"))
    with db:
        with db.cursor() as c:
            c.execute("UPDATE leafid_worker_pool SET bound_ms = 1 WHERE pool = %s", (pool,))
        db.commit()
    return proxy, url


async def issue_through(sf: leafid.SnowflakeGenerator, span: float, ids: List[int]) -> float:
    """Every call kind in turn (``next_id``, ``next_ids``, ``await next_id_async``) for
    ``span`` seconds; appends the ids; returns the slowest call's seconds."""
    slowest = 0.0
    end = time.monotonic() + span
    while time.monotonic() < end:
        for call in ("next_id", "next_ids", "next_id_async"):
            started = time.monotonic()
            if call == "next_id":
                ids.append(sf.next_id())
            elif call == "next_ids":
                ids.extend(sf.next_ids(16))
            else:
                ids.append(await sf.next_id_async())
            slowest = max(slowest, time.monotonic() - started)
        await asyncio.sleep(0.005)
    return slowest


def timed(call: Callable[[], Any]) -> Tuple[float, Any]:
    """Seconds the call took, and its result or the exception it raised."""
    started = time.monotonic()
    try:
        result = call()
    except Exception as e:  # noqa: BLE001 - the error is the result measured
        result = e
    return time.monotonic() - started, result


def assert_increasing(ids: List[int]) -> None:
    assert all(a < b for a, b in zip(ids, ids[1:])), "ids not distinct and increasing"


def outage_figures(registry: str, proxy: Proxy, url: str, cache_dir: Path) -> List[str]:
    """Runs the outages on a settled holder of ``url``; asserts and returns the figures."""
    sf = leafid.SnowflakeGenerator(url, **options(cache_dir))
    ids: List[int] = []
    figures: List[str] = []

    async def ride() -> None:
        # One outage shorter than the lookahead: silent (blackholed) for its first half,
        # refusing for its second.
        await issue_through(sf, 1.0, ids)  # the heartbeat has persisted a bound meanwhile
        proxy.mode = "blackhole"
        slowest = await issue_through(sf, OUTAGE / 2, ids)
        proxy.mode = "refuse"
        slowest = max(slowest, await issue_through(sf, OUTAGE / 2, ids))
        proxy.mode = "forward"
        figures.append(f"blackholed then refused for {OUTAGE} s: slowest call {slowest * 1000:.2f} ms")
        assert slowest < AT_ONCE, f"{registry}: a call took {slowest:.1f} s during an outage of {OUTAGE} s"

    async def awaited() -> Any:
        return await sf.next_id_async()

    try:
        asyncio.run(ride())
        asyncio.run(issue_through(sf, 1.5, ids))

        # Past the bound: ids come until about a lookahead into the outage (less up to a
        # heartbeat), then each call kind fails with the cause, bounded. `next_id` runs
        # in a thread so the other kinds start as soon as one call is seen waiting.
        proxy.mode = "blackhole"
        cut = time.monotonic()
        runs: dict[str, Tuple[float, Any]] = {}

        def take_until_one_fails() -> None:
            while True:
                took, result = timed(sf.next_id)
                if isinstance(result, Exception):
                    runs["first failing next_id"] = (took, result)
                    return
                ids.append(result)
                runs["last id"] = (time.monotonic() - cut, None)
                time.sleep(0.005)

        def started(target: Callable[[], None]) -> threading.Thread:
            t = threading.Thread(target=target)
            t.start()
            return t

        first = started(take_until_one_fails)
        # A call from memory takes microseconds: one running for 0.5 s waits for the
        # registry, so the bound is reached.
        while first.is_alive() and not ("last id" in runs and time.monotonic() - cut - runs["last id"][0] > 0.5):
            assert time.monotonic() - cut < HUNG, f"{registry}: issued far past the lookahead"
            time.sleep(0.05)
        others = [
            started(lambda: runs.__setitem__("next_id", timed(sf.next_id))),
            started(lambda: runs.__setitem__("next_ids", timed(lambda: sf.next_ids(3)))),
        ]
        runs["next_id_async"] = timed(lambda: asyncio.run(awaited()))
        for t in [first, *others]:
            t.join(HUNG)
        last_ok = runs.pop("last id")[0]
        for call, (took, result) in runs.items():
            assert isinstance(result, leafid.RegistryUnavailable), (registry, call, result)
            assert took < BOUNDED, f"{registry}: {call} took {took:.1f} s past the bound"
        figures.append(f"last id {last_ok:.2f} s into a blackhole; then "
                       + ", ".join(f"{k} {v[0]:.2f} s" for k, v in runs.items()))

        proxy.mode = "forward"
        healed = time.monotonic()
        while True:
            took, result = timed(sf.next_id)
            if not isinstance(result, Exception):
                ids.append(result)
                break
            assert time.monotonic() - healed < HUNG, f"{registry}: no id {HUNG} s after the heal: {result!r}"
        figures.append(f"ids back {time.monotonic() - healed:.2f} s after the heal")
        ids.extend(sf.next_ids(16))
        assert_increasing(ids)
        return figures
    finally:
        sf.close(timeout=0.5)
        proxy.close()


def test_snowflake_calls_issue_through_a_short_registry_outage_and_fail_bounded_past_the_lookahead(
    zk: str, mysql_url: str, tmp_path: Path
) -> None:
    # Both registries at once: most of the test is waiting (the outages, the core's 10 s
    # bound past the lookahead), and the two share nothing.
    settle: List[Callable[[], Tuple[Proxy, str]]] = [
        lambda: settled_zookeeper(zk, tmp_path / "zk-settle"),
        lambda: settled_pool(mysql_url, tmp_path / "pool-settle"),
    ]
    results: dict[str, Any] = {}

    def run(registry: str, make: Callable[[], Tuple[Proxy, str]]) -> None:
        try:
            proxy, url = make()
            results[registry] = outage_figures(registry, proxy, url, tmp_path / registry)
        except BaseException as e:  # noqa: BLE001 - re-raised on the test's thread
            results[registry] = e

    threads = [threading.Thread(target=run, args=args) for args in zip(["zookeeper", "mysql pool"], settle)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(3 * HUNG + 60)
    for registry, got in results.items():
        if isinstance(got, BaseException):
            raise got
        print(f"\n{registry}: " + "; ".join(got))
    assert len(results) == 2, "a registry's run did not end"


def test_a_restart_after_a_close_during_a_zookeeper_outage_waits_for_zookeeper(
    zk: str, tmp_path: Path
) -> None:
    """Issue 30 goal 4, from Python: on ``zookeeper://`` a generator closed while
    ZooKeeper is refused hands nothing over in its cache file, because a Java Leaf server
    may start on the identity meanwhile and only ZooKeeper shows it (a review measured
    303 530 ids issued twice when a restart issued from the cache file beside one). The
    next generator of the identity raises ``RegistryUnavailable`` at once instead of
    issuing, and builds once ZooKeeper answers, above every id before. (Handovers are
    made on ``postgres://?port=``, which no foreign server shares.)"""
    proxy, url = settled_zookeeper(zk, tmp_path)
    with proxy:
        first = leafid.SnowflakeGenerator(url, **options(tmp_path))
        before = first.next_ids(100)
        proxy.mode = "refuse"
        time.sleep(3 * HEARTBEAT)  # a heartbeat's renew has failed: out of touch
        before += first.next_ids(100)
        first.close()
        started = time.monotonic()
        try:
            leafid.SnowflakeGenerator(url, **options(tmp_path))
            raise AssertionError("issued from the cache file while ZooKeeper was down")
        except leafid.RegistryUnavailable:
            pass
        assert time.monotonic() - started < HUNG
        proxy.mode = "forward"
        # In one process the closed generator's ZooKeeper claim carries this live pid:
        # it is taken once its session expires (6 s), not at once as a dead process's.
        deadline = time.monotonic() + HUNG
        while True:
            try:
                second = leafid.SnowflakeGenerator(url, **options(tmp_path))
                break
            except leafid.WorkerIdInUse:
                assert time.monotonic() < deadline, "the identity never came back"
                time.sleep(0.5)
        assert min(second.next_ids(100)) > max(before)
        second.close()
