"""The README's Python examples type-check under mypy --strict and run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent


def test_readme_examples_pass_mypy_strict() -> None:
    res = subprocess.run([sys.executable, "-m", "mypy", "--strict", str(HERE / "readme_examples.py")],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_readme_examples_run() -> None:
    res = subprocess.run([sys.executable, str(HERE / "readme_examples.py")], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "not found" in res.stdout


def test_stubs_match_the_runtime_module() -> None:
    # stubtest imports leafid and compares every name, signature and default with the stub.
    res = subprocess.run([sys.executable, "-m", "mypy.stubtest", "leafid"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
