#!/usr/bin/env python3
"""Rust, Python and Node processes issuing ids at once from one MySQL table and one
ZooKeeper tree, for every registry mode, beside `leafid serve` and its HTTP callers,
then the same under faults. Every id is kept
and checked by core/examples/check_ids.rs: not one duplicate, ids strictly increasing
within each process (and within each HTTP caller of snowflake ids; the segment ids an HTTP
caller gets from `leafid serve` come from its threads' chunks, in trend order, so those are
checked for duplicates only).

    python3 tests/cross/run.py            # needs scripts/services.sh's variables
    python3 tests/cross/run.py --only faults
    python3 tests/cross/run.py --only shared
    python3 tests/cross/run.py --only server
    python3 tests/cross/run.py --only postgres   # tests/cross/postgres.py; in a full run
                                                 # too when LEAFID_PG_URL is set

Workers: core/examples/issue_ids.rs, tests/cross/worker.py, tests/cross/worker.js (one
command line for all three), and tests/cross/worker_http.py, a plain HTTP caller of
`leafid serve` (target/debug/leafid). The Python worker runs on $LEAFID_PYTHON (default:
the test venv of scripts/test-python.sh); the Node worker on the repository's package,
whose native module is `npm run build`'s, or the one NAPI_RS_NATIVE_LIBRARY_PATH names
(scripts/test-all.sh passes the npm tarball's). What each fault did to the run (ids
issued, errors callers saw, time to recover) is printed as a table and written to
target/cross-report.md.

The shared-config case starts Node `cluster` workers, Python processes and Rust
processes from ONE registry URL at once (issue 10): every live issuer must hold a
distinct worker id, the others must have been refused with LEAF_WORKER_ID_IN_USE.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
EXAMPLES = os.path.join(TARGET, "debug", "examples")
# LEAFID_CROSS_LANGS=rust,python narrows a run while a binding is being worked on.
LANGS = tuple(os.environ.get("LEAFID_CROSS_LANGS", "rust,python,node").split(","))


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        sys.exit(f"cross: {name} is not set; run `eval \"$(scripts/services.sh start)\"` first")
    return value


def python_bin() -> str:
    return os.environ.get("LEAFID_PYTHON") or os.path.join(ROOT, ".venv-test", "bin", "python")


@dataclass
class Worker:
    lang: str
    out: str
    proc: subprocess.Popen[str]
    summary: dict[str, object] = field(default_factory=dict)
    # An error code with which this worker may refuse to start (and that is a pass).
    may_refuse: str = ""
    # Workers of one group share an id space (one tag, one registry); ids are unique
    # within a group. Two registries hand out the same worker ids by design.
    group: str = ""


class Run:
    """One phase's workers and output files."""

    def __init__(self, tmp: str, name: str) -> None:
        self.dir = os.path.join(tmp, name)
        os.makedirs(self.dir, exist_ok=True)
        self.workers: list[Worker] = []
        self.count = 0

    def start(self, lang: str, args: list[str], extra_env: dict[str, str] | None = None,
              prefix: list[str] | None = None) -> Worker:
        self.count += 1
        out = os.path.join(self.dir, f"{self.count:03d}-{lang}.txt")
        if lang == "rust":
            cmd = [os.path.join(EXAMPLES, "issue_ids")]
        elif lang == "python":
            cmd = [python_bin(), os.path.join(ROOT, "tests", "cross", "worker.py")]
        elif lang == "http":
            cmd = [sys.executable, os.path.join(ROOT, "tests", "cross", "worker_http.py")]
        else:
            cmd = ["node", os.path.join(ROOT, "tests", "cross", "worker.js")]
        # The output file is the last argument of every mode.
        e = dict(os.environ)
        e["LEAFID_CACHE_DIR"] = os.path.join(self.dir, f"cache-{self.count:03d}")
        e.update(extra_env or {})
        proc = subprocess.Popen((prefix or []) + cmd + args + [out], env=e, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        w = Worker(lang, out, proc)
        self.workers.append(w)
        return w

    def wait(self) -> list[str]:
        """Waits for every worker; returns the problems found."""
        problems = []
        for w in self.workers:
            stdout, stderr = w.proc.communicate(timeout=120)
            lines = [l for l in stdout.splitlines() if l.startswith("{")]
            w.summary = json.loads(lines[-1]) if lines else {}
            killed = w.proc.returncode == -signal.SIGKILL
            refused = bool(w.may_refuse) and w.may_refuse in str(w.summary.get("first_error"))
            if w.proc.returncode != 0 and not killed and not refused:
                problems.append(f"{w.lang} worker {w.out} exited {w.proc.returncode}: "
                                f"{w.summary or stderr.strip()[-400:]}")
        return problems

    def files(self, group: str | None = None) -> list[str]:
        return [w.out for w in self.workers
                if os.path.exists(w.out) and (group is None or w.group == group)]

    def check_groups(self) -> dict[str, object]:
        """Checks each id space on its own and sums the results."""
        total: dict[str, object] = {"files": 0, "ids": 0, "duplicates": 0, "out_of_order": 0,
                                    "ok": True}
        for group in sorted({w.group for w in self.workers}):
            res = check(self.files(group), group)
            for key in ("files", "ids", "duplicates", "out_of_order"):
                total[key] = int(total[key]) + int(res[key])  # type: ignore[call-overload]
            total["ok"] = bool(total["ok"]) and bool(res["ok"])
        return total


def check(files: list[str], group: str | None = None) -> dict[str, object]:
    # Segment ids from `leafid serve` come from its threads' chunks (--thread-chunk 64 by
    # default): unique, and increasing as a trend across requests, not strictly.
    args = [a for f in files
            for a in (["--trend", f] if group == "segment" and f.endswith("-http.txt") else [f])]
    res = subprocess.run([os.path.join(EXAMPLES, "check_ids")] + args, text=True,
                         capture_output=True)
    result = json.loads(res.stdout.strip().splitlines()[-1])
    result["ok"] = res.returncode == 0
    return result


def mysql(sql: str) -> None:
    u = urllib.parse.urlparse(env("LEAFID_MYSQL_URL"))
    subprocess.run(["mariadb", "-h", u.hostname or "127.0.0.1", "-P", str(u.port or 3306),
                    "-u", u.username or "root", f"-p{u.password or ''}", u.path.lstrip("/"),
                    "-e", sql], check=True)


def services(*args: str) -> None:
    subprocess.run(["bash", os.path.join(ROOT, "scripts", "services.sh"), *args], check=True,
                   stdout=subprocess.DEVNULL)


SQLITE_TABLE = """CREATE TABLE IF NOT EXISTS leaf_alloc (
  biz_tag TEXT NOT NULL DEFAULT '' PRIMARY KEY, max_id INTEGER NOT NULL DEFAULT 1,
  step INTEGER NOT NULL, description TEXT DEFAULT NULL,
  update_time TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)"""


def new_mysql_tag(name: str, step: int) -> str:
    mysql("CREATE TABLE IF NOT EXISTS leaf_alloc (biz_tag varchar(128) NOT NULL DEFAULT '', "
          "max_id bigint(20) NOT NULL DEFAULT '1', step int(11) NOT NULL, "
          "description varchar(256) DEFAULT NULL, update_time timestamp NOT NULL DEFAULT "
          "CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (biz_tag)) ENGINE=InnoDB")
    mysql(f"INSERT INTO leaf_alloc (biz_tag, max_id, step, description) "
          f"VALUES ('{name}', 1, {step}, 'cross-language run')")
    return name


def registries(tag: str) -> dict[str, list[str]]:
    """Registry URLs, one per worker slot, for each snowflake mode. `tag` joins its words
    with `_`: `zookeeper://` refuses a `-` in the name (Java Leaf splits node names on it)."""
    zk, my = env("LEAFID_ZK"), env("LEAFID_MYSQL_URL")
    return {
        "zookeeper": [f"zookeeper://{zk}/{tag}_zk?port={9000 + i}" for i in range(6)],
        "zookeeper-recycle": [f"zookeeper-recycle://{zk}/{tag}_rc?port={9100 + i}"
                              for i in range(6)],
        "mysql": [f"{my}?port={9200 + i}" for i in range(6)],
    }


def uniqueness(tmp: str, stamp: str, seconds: float) -> list[tuple[str, dict[str, object], list[str]]]:
    """Two processes per language on each mode, all at once, no fault."""
    results = []
    tag = new_mysql_tag(f"cross-{stamp}", 1000)
    run = Run(tmp, "segment-mysql")
    for i, lang in enumerate(LANGS * 2):
        run.start(lang, ["segment", env("LEAFID_MYSQL_URL"), tag, str(seconds)])
    problems = run.wait()
    results.append(("segment, MySQL leaf_alloc", check(run.files()), problems))

    db = os.path.join(tmp, "shared.db")
    with sqlite3.connect(db) as c:
        c.execute(SQLITE_TABLE)
        c.execute("INSERT INTO leaf_alloc (biz_tag, max_id, step) VALUES ('cross', 1, 1000)")
    run = Run(tmp, "segment-sqlite")
    for lang in LANGS * 2:
        run.start(lang, ["segment", f"sqlite://{db}", "cross", str(seconds)])
    problems = run.wait()
    results.append(("segment, one SQLite file", check(run.files()), problems))

    modes = registries(f"cross_{stamp}")
    modes["local"] = [f"local://{tmp}/locks"] * 6
    for mode, urls in modes.items():
        run = Run(tmp, f"snowflake-{mode}")
        for i, lang in enumerate(LANGS * 2):
            run.start(lang, ["snowflake", urls[i], str(seconds)])
        problems = run.wait()
        results.append((f"snowflake, {mode}", check(run.files()), problems))
    return results


@dataclass
class Issuer:
    """One generator of a shared-config run, from its worker's summary line."""

    lang: str
    summary: dict[str, object]

    @property
    def live(self) -> bool:
        return self.summary.get("worker_id") is not None

    @property
    def refused_in_use(self) -> bool:
        return not self.live and "LEAF_WORKER_ID_IN_USE" in str(self.summary.get("first_error"))


def shared_config(tmp: str, stamp: str, seconds: float) -> list[tuple[str, dict[str, object], list[str]]]:
    """Every language's processes started at once from ONE registry URL (and one cache
    dir): Rust and Python processes, and one Node process that is a `cluster` primary
    forking workers, as a service started from one config would be. Each worker claims
    its worker id, reports it (LEAFID_START_BARRIER) and waits until every worker has
    claimed; only then do the live ones issue. So every claim is made while the others
    hold theirs, and the outcome does not depend on start-up times."""
    zk, my = env("LEAFID_ZK"), env("LEAFID_MYSQL_URL")
    # (label, URL, how many live issuers: one per identity, or all of them)
    cases = [
        # `_`, not `-`: zookeeper:// refuses a '-' in the name. One fixed mysql identity:
        # rows of leaf_workerid_alloc are never reused, a fresh one per run would fill it.
        ("zookeeper://", f"zookeeper://{zk}/cross_shared_{stamp}?port=8080&ip=127.0.0.1", "one"),
        ("mysql://", f"{my}{'&' if '?' in my else '?'}port=18301&ip=127.0.0.1", "one"),
        ("zookeeper-recycle://", f"zookeeper-recycle://{zk}/cross_shared_{stamp}_rc", "all"),
    ]
    per_lang = 2
    results = []
    for label, url, live_expected in cases:
        run = Run(tmp, "shared-" + label.rstrip(":/"))
        gate = os.path.join(run.dir, "barrier")
        os.makedirs(gate)
        common = {"LEAFID_START_BARRIER": gate, "LEAFID_CACHE_DIR": os.path.join(run.dir, "cache")}
        args = ["snowflake", url, str(seconds)]
        for lang in LANGS:
            if lang == "node":
                run.start(lang, args, dict(common, LEAFID_CLUSTER_WORKERS=str(per_lang)))
            else:
                for _ in range(per_lang):
                    run.start(lang, args, common)
        expected = per_lang * len(LANGS)
        deadline = time.monotonic() + 120
        while (sum(f.endswith(".ready") for f in os.listdir(gate)) < expected
               and time.monotonic() < deadline
               and any(w.proc.poll() is None for w in run.workers)):
            time.sleep(0.01)
        open(os.path.join(gate, "go"), "w").close()

        problems: list[str] = []
        issuers: list[Issuer] = []
        for w in run.workers:
            stdout, stderr = w.proc.communicate(timeout=120)
            lines = [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]
            want = per_lang if w.lang == "node" else 1
            if len(lines) != want:
                problems.append(f"{w.lang} process {w.out} reported {len(lines)} of {want} "
                                f"generators (exit {w.proc.returncode}): {stderr.strip()[-400:]}")
            issuers += [Issuer(w.lang, s) for s in lines]
        live = [i for i in issuers if i.live]
        refused = [i for i in issuers if i.refused_in_use]
        for i in issuers:
            if not i.live and not i.refused_in_use:
                problems.append(f"{i.lang}: neither issued nor refused with WorkerIdInUse: {i.summary}")
            elif i.live and (int(i.summary["ids"]) == 0 or int(i.summary["errors"]) > 0):  # type: ignore[call-overload]
                problems.append(f"{i.lang}: live issuer with no ids or with errors: {i.summary}")
        worker_ids = sorted(int(i.summary["worker_id"]) for i in live)  # type: ignore[call-overload]
        if len(set(worker_ids)) != len(worker_ids):
            problems.append(f"live issuers share a worker id: {worker_ids}")
        if live_expected == "one" and len(live) != 1:
            problems.append(f"{len(live)} live issuers of one identity (expected exactly 1)")
        if live_expected == "all" and len(live) != len(issuers):
            problems.append(f"{len(issuers) - len(live)} of {len(issuers)} refused; this registry "
                            "gives each process an id of its own")
        res: dict[str, object] = check([str(i.summary["out"]) for i in live]) if live else {
            "files": 0, "ids": 0, "duplicates": 0, "out_of_order": 0, "ok": False}
        res.update(live=len(live), refused=len(refused), worker_ids=worker_ids,
                   issuers=len(issuers))
        langs = ", ".join(f"{lang} {per_lang}" if lang != "node" else f"node cluster {per_lang}"
                          for lang in LANGS)
        results.append((f"{label} ({langs})", res, problems))
    return results


class Serve:
    """`leafid serve` (target/debug/leafid) on a loopback port the OS picks, reading a
    Leaf `leaf.properties` as an operator replacing Java Leaf would write it."""

    def __init__(self, tmp: str, name: str, tag_space: str, port: int,
                 args: list[str] | None = None) -> None:
        """`args`, when given, replace the properties file (`--url`, `--snowflake`)."""
        if args is None:
            args = ["--config", self.properties(tmp, tag_space, port), "--lookahead", "4"]
        self.log = open(os.path.join(tmp, f"{name}.log"), "w+")
        self.proc = subprocess.Popen(
            [os.path.join(TARGET, "debug", "leafid"), "serve", *args, "--listen", "127.0.0.1:0"],
            env=dict(os.environ, NO_COLOR="1"), stdout=subprocess.DEVNULL, stderr=self.log,
            text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self.proc.poll() is None:
            self.log.seek(0)
            for line in self.log:
                if "listening on " in line:
                    self.base = "http://" + line.split("listening on ")[1].split()[0]
                    return
            time.sleep(0.05)
        self.stop()
        self.log.seek(0)
        raise RuntimeError(f"leafid serve did not start: {self.log.read()[-2000:]}")

    @staticmethod
    def properties(tmp: str, tag_space: str, port: int) -> str:
        u = urllib.parse.urlparse(env("LEAFID_MYSQL_URL"))
        props = os.path.join(tmp, "leaf.properties")
        with open(props, "w") as f:
            f.write(f"leaf.name={tag_space}\n"
                    "leaf.segment.enable=true\n"
                    f"leaf.jdbc.url=jdbc:mysql://{u.hostname}:{u.port}{u.path}"
                    "?useUnicode=true&characterEncoding=utf8\n"
                    f"leaf.jdbc.username={urllib.parse.unquote(u.username or 'root')}\n"
                    f"leaf.jdbc.password={urllib.parse.unquote(u.password or '')}\n"
                    "leaf.snowflake.enable=true\n"
                    f"leaf.snowflake.zk.address={env('LEAFID_ZK')}\n"
                    f"leaf.snowflake.port={port}\n")
        return props

    def stop(self) -> int:
        """SIGTERM, as an orchestrator stops it; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        # A stop on Leaf's layouts waits until the clock has passed the last id (at
        # most the lookahead + 6 s: `server()` gives a lookahead of 4 s).
        return self.proc.wait(timeout=120)


def server(tmp: str, stamp: str, seconds: float) -> list[tuple[str, dict[str, object], list[str]]]:
    """`leafid serve` on Leaf's `leaf.properties` with HTTP callers (plain GETs, as
    services call Leaf), while Rust, Python and Node processes issue in-process from the
    same `leaf_alloc` row and the same ZooKeeper name (Leaf's forever nodes, one port
    each): one id space per mode."""
    tag = new_mysql_tag(f"cross-serve-{stamp}", 200)
    name = f"cross_serve_{stamp}"
    srv = Serve(tmp, "serve", name, 9306)
    run = Run(tmp, "server")
    zk = env("LEAFID_ZK")
    try:
        for i, lang in enumerate(LANGS):
            run.start(lang, ["segment", env("LEAFID_MYSQL_URL"), tag, str(seconds)]).group = "segment"
            run.start(lang, ["snowflake", f"zookeeper://{zk}/{name}?port={9300 + i}",
                             str(seconds)]).group = "snowflake"
        for _ in range(2):
            run.start("http", ["segment", srv.base, tag, str(seconds)]).group = "segment"
            run.start("http", ["snowflake", srv.base, str(seconds)]).group = "snowflake"
        problems = run.wait()
    finally:
        code = srv.stop()
    if code != 0:
        srv.log.seek(0)
        problems.append(f"leafid serve exited {code} on SIGTERM: {srv.log.read()[-1000:]}")
    results = []
    for group in ("segment", "snowflake"):
        res = check(run.files(group), group)
        mine = [w for w in run.workers if w.group == group]
        for w in mine:
            if int(w.summary.get("ids", 0)) == 0:  # type: ignore[call-overload]
                problems.append(f"{w.lang} {group} worker issued nothing: {w.summary}")
        langs = ", ".join(sorted({w.lang for w in mine}))
        results.append((f"{group} beside leafid serve ({langs})", res, problems))
        problems = []
    return results


@dataclass
class Fault:
    name: str
    start: float
    end: float
    codes: dict[str, int] = field(default_factory=dict)
    recovered_ms: int | None = None


def faults(tmp: str, stamp: str) -> tuple[dict[str, object], list[str], list[Fault], dict[str, int]]:
    """One 32-second run (4 s of start-ups, then every fault injected in turn) while all modes issue."""
    run = Run(tmp, "faults")
    tag = new_mysql_tag(f"cross-fault-{stamp}", 2000)
    modes = registries(f"cross_fault_{stamp}")
    recycle = [u + "&session_timeout_ms=2000" for u in modes["zookeeper-recycle"]]
    # Leaf's forever nodes on the three-node ensemble, of which one member is stopped.
    ensemble = [u.replace(env("LEAFID_ZK"), env("LEAFID_ZK_ENSEMBLE"))
                for u in modes["zookeeper"]]
    # Start-ups first: a zookeeper:// or mysql:// worker with a new identity watches it
    # 3.5 s before its first id (fence rule 3), so the faults start once they issue.
    settle = 4.0
    seconds = 28.0 + settle
    t0 = time.monotonic()

    def spawn_all(kind: str, i: int, lang: str) -> Worker:
        w = spawn(kind, i, lang)
        w.group = kind
        return w

    def spawn(kind: str, i: int, lang: str) -> Worker:
        left = str(max(1.0, seconds - (time.monotonic() - t0)))
        if kind == "segment":
            return run.start(lang, ["segment", env("LEAFID_MYSQL_URL"), tag, left])
        url = {"zookeeper": modes["zookeeper"], "recycle": recycle, "mysql": modes["mysql"],
               "ensemble": ensemble}[kind][i]
        return run.start(lang, ["snowflake", url, left])

    live: dict[tuple[str, str], Worker] = {}
    for i, lang in enumerate(LANGS):
        for kind in ("segment", "zookeeper", "recycle", "mysql", "ensemble"):
            live[(kind, lang)] = spawn_all(kind, i, lang)
    # A Rust snowflake worker whose clock libfaketime moves back 3 s at t=5.
    clock_file = os.path.join(tmp, "faketime")
    with open(clock_file, "w") as f:
        f.write("+0\n")
    faketime_env = {
        "LD_PRELOAD": "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
        "FAKETIME_TIMESTAMP_FILE": clock_file,
        "FAKETIME_CACHE_DURATION": "0",
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "LEAFID_WORKER_RATE": "5000",
    }
    clock_url = f"local://{tmp}/clock-locks"
    clock_worker = run.start("rust", ["snowflake", clock_url, str(10 + settle)], faketime_env)
    clock_worker.group = "clock"

    timeline: list[Fault] = []

    def at(t: float) -> None:
        time.sleep(max(0.0, t0 + settle + t - time.monotonic()))

    at(2)
    f = Fault("MariaDB stopped 3 s, restarted", time.monotonic(), 0)
    services("stop", "mysql")
    at(5)
    services("start", "mysql")
    f.end = time.monotonic()
    timeline.append(f)
    at(6)
    f = Fault("clock stepped back 3 s for 2 s (faketime, one Rust process)", time.monotonic(), 0)
    with open(clock_file, "w") as fh:
        fh.write("-3s\n")
    at(8)
    with open(clock_file, "w") as fh:
        fh.write("+0\n")
    f.end = time.monotonic()
    timeline.append(f)
    at(9)
    f = Fault("ZooKeeper stopped 3 s, restarted", time.monotonic(), 0)
    services("stop", "zookeeper")
    at(12)
    services("start", "zookeeper")
    f.end = time.monotonic()
    timeline.append(f)
    at(13)
    f = Fault("ZooKeeper ensemble: member 1 stopped 2 s, restarted", time.monotonic(), 0)
    services("stop-node", "1")
    at(15)
    services("start-node", "1")
    f.end = time.monotonic()
    timeline.append(f)
    at(16)
    f = Fault("SIGKILL + restart: every segment and recycle worker", time.monotonic(), 0)
    for i, lang in enumerate(LANGS):
        for kind in ("segment", "recycle"):
            live[(kind, lang)].proc.send_signal(signal.SIGKILL)
            live[(kind, lang)].proc.wait()
            live[(kind, lang)] = spawn_all(kind, i, lang)
    f.end = time.monotonic()
    timeline.append(f)
    at(18)
    # A process paused past its session timeout (a long GC, SIGSTOP): ZooKeeper expires
    # the session and frees its worker id while it sleeps. Resumed, it may issue up to the
    # bound it persisted, then must take an id again, above that id's last bound.
    f = Fault("ZooKeeper session expired: every recycle worker SIGSTOPped 4 s (timeout 2 s)",
              time.monotonic(), 0)
    paused = [live[("recycle", lang)].proc for lang in LANGS]
    for proc in paused:
        proc.send_signal(signal.SIGSTOP)
    at(22)
    for proc in paused:
        proc.send_signal(signal.SIGCONT)
    f.end = time.monotonic()
    timeline.append(f)
    # The clock worker ended at t=10; restart it on the same lock directory with its clock
    # 5 s behind the bound it persisted: it must wait or refuse, never reissue.
    clock_worker.proc.wait()
    at(25)  # after the resumed workers took ids again, so their errors count above
    f = Fault("restart with the clock 5 s behind (same local worker id)", time.monotonic(), 0)
    with open(clock_file, "w") as fh:
        fh.write("-5s\n")
    late = run.start("rust", ["snowflake", clock_url, "8"], faketime_env)
    late.group = "clock"
    late.may_refuse = "LEAF_CLOCK_BEHIND_REGISTRY"
    problems = run.wait()
    f.end = time.monotonic()
    timeline.append(f)
    result = run.check_groups()
    return result, problems, timeline, attribute_errors(run, timeline)


def attribute_errors(run: Run, timeline: list[Fault]) -> dict[str, int]:
    """Attributes each worker-side error to the latest fault that began before it; the
    errors by code."""
    totals: dict[str, int] = {}
    errors: list[tuple[float, str]] = []
    for w in run.workers:
        if os.path.exists(w.out + ".err"):
            for line in open(w.out + ".err"):
                ms, code = line.split()
                errors.append((int(ms) / 1000, code))
                totals[code] = totals.get(code, 0) + 1
    for ts, code in errors:
        began = [f for f in timeline if f.start <= ts]
        if not began:
            continue
        fault = max(began, key=lambda f: f.start)
        fault.codes[code] = fault.codes.get(code, 0) + 1
        late = max(0, int((ts - fault.end) * 1000))
        fault.recovered_ms = late if fault.recovered_ms is None else max(fault.recovered_ms, late)
    return totals


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=["uniqueness", "server", "shared", "faults",
                                           "postgres"])
    parser.add_argument("--seconds", type=float, default=3.0)
    opts = parser.parse_args()
    subprocess.run(["cargo", "build", "-q", "-p", "leafid", "--example", "issue_ids",
                    "--example", "check_ids"], check=True, cwd=ROOT)
    subprocess.run(["cargo", "build", "-q", "-p", "leafid-server"], check=True, cwd=ROOT)
    stamp = str(time.time_ns())
    report = ["# Cross-language run", ""]
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="leafid-cross-") as tmp:
        if opts.only in (None, "uniqueness", "server"):
            report += ["| run | processes | ids | duplicates | out of order | result |",
                       "|---|---|---|---|---|---|"]
            runs = []
            if opts.only in (None, "uniqueness"):
                runs += uniqueness(tmp, stamp, opts.seconds)
            if opts.only in (None, "server"):
                runs += server(tmp, stamp, opts.seconds)
            for name, res, problems in runs:
                ok = bool(res["ok"]) and not problems and int(res["ids"]) > 0  # type: ignore[call-overload]
                passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
                report.append(f"| {name} | {res['files']} | {res['ids']} | {res['duplicates']} "
                              f"| {res['out_of_order']} | {'ok' if ok else 'FAILED'} |")
                for p in problems:
                    report.append(f"  - {p}")
            report.append("")
        if opts.only in (None, "shared"):
            report += ["Shared config: every process started at once from ONE registry URL "
                       "(a worker id has one live holder)", "",
                       "| registry URL (processes) | generators | live (worker ids) "
                       "| refused: WorkerIdInUse | ids | duplicates | out of order | result |",
                       "|---|---|---|---|---|---|---|---|"]
            for name, res, problems in shared_config(tmp, stamp, opts.seconds):
                ok = bool(res["ok"]) and not problems and int(res["ids"]) > 0  # type: ignore[call-overload]
                passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
                report.append(f"| {name} | {res['issuers']} | {res['live']} {res['worker_ids']} "
                              f"| {res['refused']} | {res['ids']} | {res['duplicates']} "
                              f"| {res['out_of_order']} | {'ok' if ok else 'FAILED'} |")
                for p in problems:
                    report.append(f"  - {p}")
            report.append("")
        if opts.only in (None, "faults"):
            res, problems, timeline, totals = faults(tmp, stamp)
            ok = bool(res["ok"]) and not problems
            passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
            report += [f"Faults, one 32 s run of {res['files']} processes ({5 * len(LANGS)} issuing "
                       f"from the start; {2 * len(LANGS)} killed and restarted; 2 under faketime): "
                       f"{res['ids']} ids, {res['duplicates']} duplicates, "
                       f"{res['out_of_order']} out of order: {'ok' if ok else 'FAILED'}", "",
                       "| fault | errors callers saw (by code) | last error after the fault ended |",
                       "|---|---|---|"]
            for f in timeline:
                codes = ", ".join(f"{c} ×{n}" for c, n in sorted(f.codes.items())) or "none"
                rec = "-" if f.recovered_ms is None else f"{f.recovered_ms} ms"
                report.append(f"| {f.name} | {codes} | {rec} |")
            report.append(f"\nAll errors by code: {totals}")
            for p in problems:
                report.append(f"  - {p}")
        # PostgreSQL (tests/cross/postgres.py): in a full run when services.sh gave a server.
        if opts.only == "postgres" or (opts.only is None and os.environ.get("LEAFID_PG_URL")):
            import postgres
            lines, ok_count, failed_count = postgres.report(tmp, stamp, opts.seconds)
            report += ["", *lines]
            passed, failed = passed + ok_count, failed + failed_count
    text = "\n".join(report)
    print(text)
    os.makedirs(TARGET, exist_ok=True)
    with open(os.path.join(TARGET, "cross-report.md"), "w") as f:
        f.write(text + "\n")
    print(f"\ncross: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
