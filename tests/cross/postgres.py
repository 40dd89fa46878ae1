"""The cross-language run on PostgreSQL (issue 23): Rust, Python and Node processes, and
HTTP callers of `leafid serve --url postgres://…`, issuing segment ids from ONE
`leaf_alloc` row and snowflake ids from ONE worker-id pool on the database
(`postgres://…?pool=NAME&pool_size=8`, any free id, leased by the database's clock), first
as they are, then while PostgreSQL is stopped and started again and workers are
SIGKILLed and respawned. Every id is checked by core/examples/check_ids.rs as run.py's
phases are: 0 duplicates within an id space, ids strictly increasing per generator.

    python3 tests/cross/run.py --only postgres

It is a file of its own so that run.py (MySQL, SQLite, ZooKeeper) stays one job and one
size. The database:

- LEAFID_PG_URL set (scripts/services.sh's, as CI runs it): that server, stopped and
  started with `scripts/services.sh stop|start postgres`, or with the shell commands in
  LEAFID_CROSS_PG_STOP / LEAFID_CROSS_PG_START when they are set.
- LEAFID_PG_URL unset: a private instance on 127.0.0.1:5435 under /tmp/leafid-pg-cross
  (initdb at the first run; as root it runs as the `postgres` user), stopped and started
  with pg_ctl, so that no shared service is disturbed.

The bindings are found as run.py finds them (LEAFID_PYTHON, NAPI_RS_NATIVE_LIBRARY_PATH);
LEAFID_CROSS_LANGS=rust,python leaves Node out. The run needs pool sizes above its live holders: 3 snowflake processes and the server
in the fault phase, plus 3 respawned while the killed ones' leases run out (7 of 8).
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import time

import run as cross

POOL_SIZE = 8
PRIVATE_DIR = "/tmp/leafid-pg-cross"
PRIVATE_PORT = 5435


def pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else name


def as_postgres(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: root runs it as the `postgres` user."""
    if os.geteuid() != 0:
        return cmd
    return ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", "--", *cmd]


class Database:
    """The PostgreSQL server of the run and how to stop and start it."""

    def __init__(self) -> None:
        self.url = os.environ.get("LEAFID_PG_URL", "")
        self.private = not self.url
        if self.private:
            self.url = f"postgres://leafid:leafid@127.0.0.1:{PRIVATE_PORT}/leafid"
            self.start_private()

    def pg_ctl(self, *args: str) -> None:
        subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", f"{PRIVATE_DIR}/data", *args]),
                       check=True, stdout=subprocess.DEVNULL)

    def start_private(self) -> None:
        data = f"{PRIVATE_DIR}/data"
        if not os.path.exists(f"{data}/PG_VERSION"):
            os.makedirs(PRIVATE_DIR, exist_ok=True)
            if os.geteuid() == 0:
                subprocess.run(["chown", "postgres:postgres", PRIVATE_DIR], check=True)
            subprocess.run(as_postgres([pg_bin("initdb"), "-D", data, "-U", "postgres",
                                        "-E", "UTF8", "--auth=trust"]),
                           check=True, stdout=subprocess.DEVNULL, cwd=PRIVATE_DIR)
        running = subprocess.run(as_postgres([pg_bin("pg_ctl"), "-D", data, "status"]),
                                 stdout=subprocess.DEVNULL, cwd=PRIVATE_DIR).returncode == 0
        if not running:
            self.start()
        self.psql("postgres", "postgres",
                  "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'leafid') "
                  "THEN CREATE ROLE leafid LOGIN PASSWORD 'leafid'; END IF; END $$")
        exists = subprocess.run(
            ["psql", "-X", "-At", "-h", "127.0.0.1", "-p", str(PRIVATE_PORT), "-U", "postgres",
             "-d", "postgres", "-c", "SELECT 1 FROM pg_database WHERE datname = 'leafid'"],
            check=True, capture_output=True, text=True).stdout.strip()
        if not exists:
            self.psql("postgres", "postgres", "CREATE DATABASE leafid OWNER leafid")

    def psql(self, user: str, db: str, sql: str) -> None:
        url = self.url.rsplit("/", 1)[0].replace("leafid:leafid@", f"{user}@") + f"/{db}"
        subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", url, "-c", sql],
                       check=True, stdout=subprocess.DEVNULL)

    def sql(self, sql: str) -> None:
        # Without the NOTICE of CREATE TABLE IF NOT EXISTS on a second run.
        subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", self.url, "-c", sql],
                       check=True, stdout=subprocess.DEVNULL,
                       env=dict(os.environ, PGOPTIONS="-c client_min_messages=warning"))

    def restarted_by(self) -> str:
        if os.environ.get("LEAFID_CROSS_PG_STOP") or os.environ.get("LEAFID_CROSS_PG_START"):
            return "LEAFID_CROSS_PG_STOP/START"
        return "pg_ctl stop -m fast / start" if self.private else "scripts/services.sh"

    def command(self, verb: str) -> None:
        custom = os.environ.get(f"LEAFID_CROSS_PG_{verb.upper()}")
        if custom:
            subprocess.run(custom, shell=True, check=True, stdout=subprocess.DEVNULL)
        elif self.private and verb == "stop":
            self.pg_ctl("stop", "-m", "fast", "-w")
        elif self.private:
            self.start()
        else:
            cross.services(verb, "postgres")

    def start(self) -> None:
        self.pg_ctl("start", "-w", "-l", f"{PRIVATE_DIR}/pg.log", "-o",
                    f"-p {PRIVATE_PORT} -h 127.0.0.1 -k {PRIVATE_DIR} -c fsync=off "
                    "-c max_connections=300")

    def new_tag(self, name: str, step: int) -> str:
        self.sql("CREATE TABLE IF NOT EXISTS leaf_alloc (biz_tag varchar(128) NOT NULL "
                 "DEFAULT '' PRIMARY KEY, max_id bigint NOT NULL DEFAULT 1, step int NOT NULL, "
                 "description varchar(256) DEFAULT NULL, update_time timestamp NOT NULL "
                 "DEFAULT CURRENT_TIMESTAMP)")
        self.sql(f"INSERT INTO leaf_alloc (biz_tag, max_id, step, description) "
                 f"VALUES ('{name}', 1, {step}, 'cross-language run')")
        return name

    def pool(self, name: str) -> str:
        return f"{self.url}{'&' if '?' in self.url else '?'}pool={name}&pool_size={POOL_SIZE}"


def start_all(run: cross.Run, db: Database, tag: str, pool: str, srv: cross.Serve,
              seconds: float, per_lang: int) -> None:
    for lang in cross.LANGS:
        for _ in range(per_lang):
            run.start(lang, ["segment", db.url, tag, str(seconds)]).group = "segment"
            run.start(lang, ["snowflake", pool, str(seconds)]).group = "snowflake"
    run.start("http", ["segment", srv.base, tag, str(seconds)]).group = "segment"
    run.start("http", ["snowflake", srv.base, str(seconds)]).group = "snowflake"


def serve(tmp: str, name: str, db: Database, pool: str) -> cross.Serve:
    return cross.Serve(tmp, name, "", 0, args=["--url", db.url, "--snowflake", pool,
                                               "--create-table"])


def stop_server(srv: cross.Serve, problems: list[str]) -> None:
    code = srv.stop()
    if code != 0:
        srv.log.seek(0)
        problems.append(f"leafid serve exited {code} on SIGTERM: {srv.log.read()[-1000:]}")


def count_lines(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def results(run: cross.Run, problems: list[str],
            label: str) -> list[tuple[str, dict[str, object], list[str]]]:
    """Each id space checked on its own. Every worker that ran to its end (all but the
    SIGKILLed) must have issued: the respawned ones and the HTTP callers after the
    outage too."""
    out = []
    for group in ("segment", "snowflake"):
        mine = [w for w in run.workers if w.group == group]
        res = cross.check(run.files(group), group)
        # Lines written, not the summaries: a SIGKILLed worker prints none.
        written = {lang: sum(count_lines(w.out) for w in mine if w.lang == lang)
                   for lang in sorted({w.lang for w in mine})}
        res["langs"] = ", ".join(f"{lang} {n}" for lang, n in written.items())
        killed = [w for w in mine if w.proc.returncode == -signal.SIGKILL]
        early = sum(count_lines(w.out) == 0 for w in killed)
        if killed:
            res["langs"] = f"{res['langs']}; {len(killed)} killed, {early} before a first id"
        mine_problems = list(problems) if group == "segment" else []
        for w in mine:
            if w not in killed and int(w.summary.get("ids", 0)) == 0:  # type: ignore[call-overload]
                mine_problems.append(f"{w.lang} {group} worker issued nothing: {w.summary}")
        out.append((f"{label}: {group} ({res['langs']})", res, mine_problems))
    return out


def uniqueness(tmp: str, db: Database, stamp: str,
               seconds: float) -> list[tuple[str, dict[str, object], list[str]]]:
    """Two processes per language and `leafid serve`, no fault."""
    tag = db.new_tag(f"cross-pg-{stamp}", 1000)
    pool = db.pool(f"cross-pg-{stamp}")
    srv = serve(tmp, "serve-pg", db, pool)
    run = cross.Run(tmp, "postgres")
    problems: list[str] = []
    try:
        start_all(run, db, tag, pool, srv, seconds, 2)
        problems = run.wait()
    finally:
        stop_server(srv, problems)
    return results(run, problems, "PostgreSQL")


def faults(tmp: str, db: Database, stamp: str
           ) -> tuple[list[tuple[str, dict[str, object], list[str]]], list[cross.Fault], dict[str, int]]:
    """One run: 4 s of start-ups (a pool newcomer watches its row 3.5 s), PostgreSQL
    stopped 3 s and started, then every in-process worker SIGKILLed and respawned."""
    tag = db.new_tag(f"cross-pg-fault-{stamp}", 2000)
    pool = db.pool(f"cross-pg-fault-{stamp}")
    settle, length = 4.0, 16.0
    srv = serve(tmp, "serve-pg-fault", db, pool)
    run = cross.Run(tmp, "postgres-faults")
    t0 = time.monotonic()
    problems: list[str] = []
    timeline: list[cross.Fault] = []

    def at(t: float) -> None:
        time.sleep(max(0.0, t0 + settle + t - time.monotonic()))

    try:
        start_all(run, db, tag, pool, srv, settle + length, 1)
        at(2)
        f = cross.Fault("PostgreSQL stopped 3 s, started", time.monotonic(), 0)
        db.command("stop")
        at(5)
        db.command("start")
        f.end = time.monotonic()
        timeline.append(f)
        at(7)
        f = cross.Fault("SIGKILL + respawn: every Rust, Python and Node worker",
                        time.monotonic(), 0)
        for w in [w for w in run.workers if w.lang != "http"]:
            w.proc.send_signal(signal.SIGKILL)
            w.proc.wait()
            left = str(max(1.0, settle + length - (time.monotonic() - t0)))
            args = (["segment", db.url, tag, left] if w.group == "segment"
                    else ["snowflake", pool, left])
            run.start(w.lang, args).group = w.group
        f.end = time.monotonic()
        timeline.append(f)
        problems = run.wait()
    finally:
        stop_server(srv, problems)
    totals = cross.attribute_errors(run, timeline)
    return results(run, problems, "PostgreSQL under faults"), timeline, totals


def report(tmp: str, stamp: str, seconds: float) -> tuple[list[str], int, int]:
    """The PostgreSQL section of the report; how many checks passed and failed."""
    db = Database()
    lines = [f"PostgreSQL ({'private instance' if db.private else 'LEAFID_PG_URL'}): one "
             f"leaf_alloc tag, one worker-id pool (pool_size={POOL_SIZE}); restarts by "
             f"{db.restarted_by()}", "",
             "| run: id space (ids per caller) | processes | ids | duplicates | out of order "
             "| result |", "|---|---|---|---|---|---|"]
    rows = uniqueness(tmp, db, stamp, seconds)
    fault_rows, timeline, totals = faults(tmp, db, stamp)
    passed = failed = 0
    for name, res, problems in rows + fault_rows:
        ok = bool(res["ok"]) and not problems and int(res["ids"]) > 0  # type: ignore[call-overload]
        passed, failed = (passed + 1, failed) if ok else (passed, failed + 1)
        lines.append(f"| {name} | {res['files']} | {res['ids']} | {res['duplicates']} "
                     f"| {res['out_of_order']} | {'ok' if ok else 'FAILED'} |")
        lines += [f"  - {p}" for p in problems]
    lines += ["", "| fault | errors callers saw (by code) | last error after the fault ended |",
              "|---|---|---|"]
    for f in timeline:
        codes = ", ".join(f"{c} ×{n}" for c, n in sorted(f.codes.items())) or "none"
        rec = "-" if f.recovered_ms is None else f"{f.recovered_ms} ms"
        lines.append(f"| {f.name} | {codes} | {rec} |")
    lines += [f"\nAll errors by code: {totals}", ""]
    return lines, passed, failed
