"""Issue 31: leafid ids as primary keys through Django (leafid.django.LeafIdField) and
SQLAlchemy 2 (the recipes of docs/frameworks-python.md, sync and async engines), on
PostgreSQL and MySQL: 4 forked processes insert 10 000 rows, single and bulk inserts,
with no duplicate key, and every row's id is one leafid issued, from the tag's ranges.

Each case runs tests/python/orm_workers.py in a fresh interpreter (Django configures
itself once per process) against a database of its own, dropped afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator, List, Tuple
from urllib.parse import urlsplit

import pytest

pytest.importorskip("django")
pytest.importorskip("sqlalchemy")

import psycopg  # noqa: E402
import pymysql  # noqa: E402

WORKERS = Path(__file__).with_name("orm_workers.py")


def _server(name: str) -> str:
    url = os.environ.get(name)
    if not url:
        pytest.fail(f"{name} is not set: run `eval \"$(scripts/services.sh start)\"`")
    return url


class Database:
    """A database of the test's own on the shared server, and queries on it."""

    def __init__(self, server_url: str) -> None:
        self.server = urlsplit(server_url)
        self.name = f"leafid_py_orm_{os.getpid()}_{time.time_ns()}"
        self.url = f"{self.server.scheme}://{self.server.netloc}/{self.name}"
        self._admin("create database " + self.name)

    def _connect(self, db: str) -> Any:
        u = self.server
        if u.scheme == "mysql":
            return pymysql.connect(host=u.hostname, port=u.port, user=u.username,
                                   password=u.password, database=db or None, autocommit=True)
        return psycopg.connect(host=u.hostname, port=u.port, user=u.username,
                               password=u.password, dbname=db or "postgres", autocommit=True)

    def _admin(self, sql: str) -> None:
        conn = self._connect("")
        try:
            conn.cursor().execute(sql)
        finally:
            conn.close()

    def query(self, sql: str) -> List[Tuple[Any, ...]]:
        conn = self._connect(self.name)
        try:
            cur = conn.cursor()
            cur.execute(sql)
            return list(cur.fetchall())
        finally:
            conn.close()

    def drop(self) -> None:
        if self.server.scheme != "mysql":
            # A worker's session may still be closing: PostgreSQL refuses to drop a
            # database with a session on it unless forced (13+).
            self._admin(f"drop database if exists {self.name} with (force)")
        else:
            self._admin(f"drop database if exists {self.name}")


@pytest.fixture(params=["LEAFID_PG_URL", "LEAFID_MYSQL_URL"], ids=["postgres", "mysql"])
def database(request: pytest.FixtureRequest) -> Iterator[Database]:
    db = Database(_server(request.param))
    try:
        yield db
    finally:
        db.drop()


@pytest.mark.parametrize("framework", ["django", "sqlalchemy", "sqlalchemy-async"])
def test_four_processes_insert_10_000_rows_with_leafid_ids_and_no_duplicate_key(
    framework: str, database: Database
) -> None:
    res = subprocess.run([sys.executable, str(WORKERS), framework, database.url],
                         capture_output=True, text=True, timeout=240)
    # A duplicate key (or any error) in a worker fails the run with its traceback.
    assert res.returncode == 0, res.stderr[-4000:]
    per_worker: List[List[int]] = json.loads(res.stdout)
    assert len(per_worker) == 4
    issued = [i for ids in per_worker for i in ids]
    assert len(issued) == 10_000 and len(set(issued)) == 10_000

    rows = sorted(r[0] for r in database.query("select id from orders"))
    assert rows == sorted(issued), "the rows' ids are the ids leafid issued"
    # From the tag's ranges: the tag starts at 1 and leaf_alloc's max_id is the end of
    # the last range handed out (ranges are [max_id - step, max_id)).
    ((max_id,),) = database.query("select max_id from leaf_alloc where biz_tag = 'order'")
    assert 1 <= rows[0] and rows[-1] < max_id



STUB_CHECK = """
import ast, inspect, pathlib
import leafid.django as m
tree = ast.parse(pathlib.Path(m.__file__).with_suffix(".pyi").read_text())
defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
assert sorted(defs) == sorted(m.__all__), (sorted(defs), m.__all__)
for name, node in defs.items():
    assert ast.get_docstring(node) == inspect.getdoc(getattr(m, name)), name
"""


def test_the_django_stub_holds_every_public_name_with_the_runtime_docstring() -> None:
    # The stub beside the module is what IDEs and mypy read: it lists the module's
    # public names (`__all__`) and says what their docstrings say. In a fresh
    # interpreter: importing leafid.django here would add `django` to `dir(leafid)`,
    # which test_package.py checks holds only leafid's own names.
    res = subprocess.run([sys.executable, "-c", STUB_CHECK], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
