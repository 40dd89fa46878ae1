"""Event-loop delay through store and registry outages (issue 12): an asyncio tick probe
(a task sleeping 1 ms in a loop, recording the largest gap beyond its sleep) runs while a
workload goes through each fault, made by a loopback proxy (tests/python/proxy.py) in
front of the real MariaDB and ZooKeeper of scripts/services.sh.

    source .services/env    # or: eval "$(scripts/services.sh start)"
    python benches/loop_delay.py sync     # the blocking API called in the loop (as today)
    python benches/loop_delay.py async    # the async twins (await …)

Prints one markdown row per scenario: the worst loop delay in ms, and what the workload
got. Run it once against main's build (sync) and once against this one (sync and async)
to fill benches/README.md.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "python"))
from proxy import ProxyProcess as Proxy  # noqa: E402

import leafid  # noqa: E402

OUTAGE = 3.0  # seconds each fault lasts
MYSQL_URL = os.environ["LEAFID_MYSQL_URL"]
MYSQL_PORT = int(os.environ.get("LEAFID_MYSQL_PORT", "3307"))
ZK_PORT = int(os.environ.get("LEAFID_ZK_PORT", "2182"))


def unique(prefix: str) -> str:
    return f"{prefix}_{os.getpid()}_{time.time_ns()}"


def later(seconds: float, fn: Callable[[], None]) -> None:
    """Runs `fn` from a timer thread: faults end whatever the loop is doing. A scenario
    that ended early (a connect that failed fast) has closed its proxy: nothing to end."""

    def run() -> None:
        try:
            fn()
        except (BrokenPipeError, ValueError, OSError):
            pass

    t = threading.Timer(seconds, run)
    t.daemon = True
    t.start()


class Probe:
    """Sleeps 1 ms in a loop and keeps the largest lateness, from `start()` on (the
    scenario's own set-up, such as starting the proxy, is not measured)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.measuring = False
        self.running = True

    async def start(self) -> None:
        """Starts measuring once the probe had a turn (a tick the set-up held up does not
        count)."""
        await asyncio.sleep(0.005)
        self.worst, self.measuring = 0.0, True

    async def stop(self) -> None:
        """Stops measuring once the probe had a turn (so a tick the workload held up
        counts)."""
        await asyncio.sleep(0.005)
        self.measuring = False

    async def run(self) -> None:
        while self.running:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            if self.measuring:
                self.worst = max(self.worst, time.perf_counter() - t - 0.001)


async def probed(work: Callable[[Probe], Awaitable[str]]) -> tuple[float, str]:
    """(worst loop delay in ms, the workload's outcome) while `work` runs."""
    probe = Probe()
    task = asyncio.ensure_future(probe.run())
    await asyncio.sleep(0.01)  # the probe is ticking before the work starts
    try:
        outcome = await work(probe)
    finally:
        probe.running = False
        await task
    return probe.worst * 1000, outcome


def mysql_through(proxy: Proxy) -> str:
    return MYSQL_URL.replace(f"127.0.0.1:{MYSQL_PORT}", f"127.0.0.1:{proxy.port}")


async def store_blackholed_during_next_id(mode: str, probe: Probe) -> str:
    tag = unique("bench_loop")
    with leafid.SegmentGenerator(MYSQL_URL) as admin:
        admin.create_tag(tag, start=1, step=10)
    with Proxy(MYSQL_PORT) as proxy:
        gen = leafid.SegmentGenerator(mysql_through(proxy), wait_timeout=1.0)
        ok = failed = 0
        proxy.mode = "blackhole"
        later(OUTAGE, lambda: setattr(proxy, "mode", "forward"))
        await probe.start()
        end = time.monotonic() + OUTAGE + 0.5
        while time.monotonic() < end:
            try:
                if mode == "sync":
                    gen.next_id(tag)
                else:
                    await gen.next_id_async(tag)
                ok += 1
            except leafid.LeafError:
                failed += 1
            await asyncio.sleep(0.01)
        await probe.stop()
        gen.close()
        return f"{ok} ids, {failed} errors"


async def connect_mysql_blackholed(mode: str, probe: Probe) -> str:
    with Proxy(MYSQL_PORT, mode="blackhole") as proxy:
        later(OUTAGE, lambda: setattr(proxy, "mode", "forward"))
        await probe.start()
        try:
            if mode == "sync":
                gen = leafid.SegmentGenerator(mysql_through(proxy))
            else:
                gen = await leafid.SegmentGenerator.connect(mysql_through(proxy))
        except leafid.LeafError as e:
            return type(e).__name__
        finally:
            await probe.stop()
        gen.close()
        return "connected"


async def connect_zookeeper_blackholed(mode: str, probe: Probe) -> str:
    with Proxy(ZK_PORT, mode="blackhole") as proxy, tempfile.TemporaryDirectory() as d:
        url = f"zookeeper://127.0.0.1:{proxy.port}/{unique('bench')}?port=8001"
        later(OUTAGE, lambda: setattr(proxy, "mode", "forward"))
        await probe.start()
        try:
            if mode == "sync":
                sf = leafid.SnowflakeGenerator(url, cache_dir=d)
            else:
                sf = await leafid.SnowflakeGenerator.connect(url, cache_dir=d)
        except leafid.LeafError as e:
            return type(e).__name__
        finally:
            await probe.stop()
        sf.close()
        return "connected"


async def snowflake_with_registry_blackholed(mode: str, end: str, probe: Probe) -> str:
    with Proxy(ZK_PORT) as proxy, tempfile.TemporaryDirectory() as d:
        sf: Any = leafid.SnowflakeGenerator(f"zookeeper://127.0.0.1:{proxy.port}/{unique('bench')}?port=8001", cache_dir=d)
        sf.next_id()
        proxy.mode = "blackhole"
        await probe.start()
        t = time.perf_counter()
        if end == "gc":
            del sf
            gc.collect()
        elif mode == "sync":
            sf.close()
        else:
            await sf.aclose()
        took = time.perf_counter() - t
        await probe.stop()
        proxy.mode = "forward"
        return f"returned after {took * 1000:.0f} ms"


async def gc_registry_blackholed(mode: str, probe: Probe) -> str:
    return await snowflake_with_registry_blackholed(mode, "gc", probe)


async def close_registry_blackholed(mode: str, probe: Probe) -> str:
    return await snowflake_with_registry_blackholed(mode, "close", probe)


async def idle(mode: str, probe: Probe) -> str:
    await probe.start()
    await asyncio.sleep(OUTAGE)
    await probe.stop()
    return "nothing (the floor: this machine's scheduling noise)"


SCENARIOS = [
    ("idle loop, no fault", idle),
    ("next_id, MySQL store blackholed 3 s (an id every 10 ms)", store_blackholed_during_next_id),
    ("connect, MySQL blackholed 3 s", connect_mysql_blackholed),
    ("connect, ZooKeeper blackholed 3 s", connect_zookeeper_blackholed),
    ("close, ZooKeeper registry blackholed", close_registry_blackholed),
    ("del + gc.collect(), ZooKeeper registry blackholed", gc_registry_blackholed),
]


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "async"
    assert mode in ("sync", "async"), "mode: sync or async"
    print(f"leafid from {Path(leafid.__file__).parent}, mode {mode}\n")
    print("| scenario | worst loop delay | workload |")
    print("|---|---|---|")
    for name, scenario in SCENARIOS:
        worst, outcome = asyncio.run(probed(lambda probe: scenario(mode, probe)))
        print(f"| {name} | {worst:.1f} ms | {outcome} |", flush=True)


if __name__ == "__main__":
    main()
