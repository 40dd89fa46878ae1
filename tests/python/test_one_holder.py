"""A worker id has at most one live holder (issue 10): processes started from ONE
snowflake config (gunicorn workers without preload, two instances of a service) either
get distinct worker ids, where the registry can give them (`local://`), or all but one
are refused with `leafid.WorkerIdInUse` (`zookeeper://`, `mysql://`, `fixed:`). Never do
two of them issue under the same worker id.

Each scenario starts N processes at once on one registry URL. Every process reports the
outcome of its constructor, then keeps its generator (and so its claim) until every
process has reported; only then do the live ones issue. So each claimant tried while the
others held, and the outcome does not depend on timing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import leafid

N = 4
IDS_PER_PROCESS = 20_000

CLAIMANT = """
import json, os, sys, leafid
registry, cache_dir, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    sf = leafid.SnowflakeGenerator(registry, cache_dir=cache_dir)
except leafid.LeafError as e:
    print(json.dumps({"pid": os.getpid(), "error": type(e).__name__, "code": e.code,
                      "message": str(e)}), flush=True)
    sys.stdin.readline()
    sys.exit(0)
print(json.dumps({"pid": os.getpid(), "worker_id": sf.worker_id}), flush=True)
sys.stdin.readline()  # the parent's go: every claimant has tried while this one held
ids = sf.next_ids(count)
sf.close()
print(json.dumps({"ids": ids}), flush=True)
"""


@dataclass
class Outcome:
    """What one process reported."""

    pid: int
    worker_id: int | None = None
    error: str | None = None
    code: str | None = None
    message: str = ""
    ids: list[int] = field(default_factory=list, repr=False)


def claim_at_once(registry: str, cache_dirs: list[Path]) -> list[Outcome]:
    """Starts one process per cache dir on `registry`, all at once; returns their outcomes
    once every live one has issued IDS_PER_PROCESS ids and closed."""
    procs = [subprocess.Popen([sys.executable, "-c", CLAIMANT, registry, str(d), str(IDS_PER_PROCESS)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for d in cache_dirs]
    # A hung claimant fails the test instead of hanging the suite.
    def kill_all() -> None:
        for p in procs:
            p.kill()

    watchdog = threading.Timer(180, kill_all)
    watchdog.start()
    try:
        outcomes = []
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            assert line, f"a claimant exited without reporting (exit {p.wait()})"
            outcomes.append(Outcome(**json.loads(line)))
        for p in procs:  # go, all at once: the live ones issue side by side
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.close()
        for p, outcome in zip(procs, outcomes):
            assert p.stdout is not None
            out = p.stdout.read()
            assert p.wait() == 0, f"claimant {outcome.pid} exited {p.returncode}"
            if outcome.worker_id is not None:
                outcome.ids = json.loads(out)["ids"]
        return outcomes
    finally:
        watchdog.cancel()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def cache_dirs(tmp_path: Path, shared: bool) -> list[Path]:
    if shared:
        return [tmp_path / "cache"] * N
    return [tmp_path / f"cache{i}" for i in range(N)]


def assert_no_duplicates(outcomes: list[Outcome]) -> None:
    ids = [i for o in outcomes for i in o.ids]
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicate ids"
    for o in outcomes:
        if o.worker_id is None:
            continue
        assert len(o.ids) == IDS_PER_PROCESS
        assert {leafid.decode(i).worker_id for i in o.ids} == {o.worker_id}


def assert_one_live_holder(outcomes: list[Outcome], identity: str) -> None:
    """`identity`: a pattern the refusal's message must contain."""
    """Exactly one process issues; every other one was refused with WorkerIdInUse, whose
    message names the identity, the holder where known (its pid) and what to do."""
    live = [o for o in outcomes if o.worker_id is not None]
    refused = [o for o in outcomes if o.worker_id is None]
    dup = sum(len(o.ids) for o in outcomes) - len({i for o in outcomes for i in o.ids})
    assert len(live) == 1, f"{len(live)} live holders of one identity ({dup} duplicate ids): {outcomes}"
    for o in refused:
        assert (o.error, o.code) == ("WorkerIdInUse", "LEAF_WORKER_ID_IN_USE"), o
        assert re.search(identity, o.message), f"names the identity ({identity}): {o.message}"
        # A claimant that comes between the holder's lock and its note of who it is
        # learns no pid; one that names a pid names the live holder's.
        named = {int(p) for p in re.findall(r"\bpid (\d+)", o.message)}
        assert named <= {live[0].pid}, f"names pids {named}, the holder is {live[0].pid}: {o.message}"
        assert "in use by" in o.message, o.message
        # What to do: a registry that gives each process its own id.
        assert "zookeeper-recycle" in o.message or "local://" in o.message, o.message
    assert_no_duplicates(outcomes)


SHARING = pytest.mark.parametrize("shared", [False, True], ids=["own_cache_dirs", "one_cache_dir"])


@SHARING
def test_local_registry_gives_processes_of_one_config_distinct_worker_ids(tmp_path: Path,
                                                                          shared: bool) -> None:
    outcomes = claim_at_once(f"local://{tmp_path}/locks", cache_dirs(tmp_path, shared))
    assert all(o.error is None for o in outcomes), outcomes
    assert len({o.worker_id for o in outcomes}) == N
    assert_no_duplicates(outcomes)


@SHARING
def test_zookeeper_identity_of_one_config_has_one_live_holder(zk: str, tmp_path: Path,
                                                               shared: bool) -> None:
    # `_`, not `-`: zookeeper:// refuses a '-' in the name.
    name = f"py_holder_{os.getpid()}_{time.time_ns()}"
    outcomes = claim_at_once(f"zookeeper://{zk}/{name}?port=8080&ip=127.0.0.1",
                             cache_dirs(tmp_path, shared))
    assert_one_live_holder(outcomes, re.escape("127.0.0.1:8080"))


@SHARING
def test_mysql_identity_of_one_config_has_one_live_holder(mysql_url: str, tmp_path: Path,
                                                          shared: bool) -> None:
    # A fixed identity per variant (rows of leaf_workerid_alloc are never reused, so a
    # fresh one per run would fill the table); no other test claims these ports.
    port = 18082 if shared else 18081
    outcomes = claim_at_once(f"{mysql_url}?port={port}&ip=127.0.0.1", cache_dirs(tmp_path, shared))
    assert_one_live_holder(outcomes, re.escape(f"127.0.0.1:{port}"))


@SHARING
def test_fixed_worker_id_of_one_config_has_one_live_holder(tmp_path: Path, shared: bool) -> None:
    outcomes = claim_at_once("fixed:7", cache_dirs(tmp_path, shared))
    # The core writes the identity its own way (`fixed:7`, `fixed/7`): the word and the id.
    assert_one_live_holder(outcomes, r"\bfixed\W7\b")


@SHARING
def test_second_fixed_generator_in_one_process_is_refused(tmp_path: Path, shared: bool) -> None:
    first_dir, second_dir = cache_dirs(tmp_path, shared)[:2]
    first = leafid.SnowflakeGenerator("fixed:7", cache_dir=first_dir)
    try:
        with pytest.raises(leafid.WorkerIdInUse) as e:
            leafid.SnowflakeGenerator("fixed:7", cache_dir=second_dir)
        assert isinstance(e.value, leafid.UnavailableError) and not isinstance(e.value, ValueError)
        assert e.value.code == "LEAF_WORKER_ID_IN_USE" and re.search(r"\bfixed\W7\b", str(e.value))
        # The first keeps issuing under its id.
        assert leafid.decode(first.next_id()).worker_id == 7
    finally:
        first.close()
    # close() lets the id go: the next generator of the config takes it.
    with leafid.SnowflakeGenerator("fixed:7", cache_dir=second_dir) as again:
        assert leafid.decode(again.next_id()).worker_id == 7
