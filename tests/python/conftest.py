"""Shared fixtures: a fresh SQLite file per test, the MariaDB URL from
scripts/services.sh, and unique tag names."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path}/ids.db"


@pytest.fixture
def mysql_url() -> str:
    url = os.environ.get("LEAFID_MYSQL_URL")
    if not url:
        pytest.fail("LEAFID_MYSQL_URL is not set: run `eval \"$(scripts/services.sh start)\"`")
    return url


@pytest.fixture
def zk() -> str:
    addr = os.environ.get("LEAFID_ZK")
    if not addr:
        pytest.fail("LEAFID_ZK is not set: run `eval \"$(scripts/services.sh start)\"`")
    return addr


@pytest.fixture
def tag(request: pytest.FixtureRequest) -> str:
    return f"py-{request.node.name[:60]}-{os.getpid()}-{time.time_ns()}"
