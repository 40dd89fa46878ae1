"""The core's events reach Python's logging under the `leafid` logger."""

from __future__ import annotations

import logging
import time

import pytest

import leafid


def test_segment_loads_are_logged(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="leafid")
    gen = leafid.SegmentGenerator(sqlite_url)
    gen.create_tag("logged")
    gen.next_id("logged")
    deadline = time.monotonic() + 10
    while not any("segment loaded" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        time.sleep(0.01)
    record = next(r for r in caplog.records if "segment loaded" in r.getMessage())
    assert record.name == "leafid" and record.levelno == logging.DEBUG
    assert "tag=logged" in record.getMessage()
