"""The Python programs of README.md and docs/*.md pass mypy --strict, as extracted.

The blocks marked runnable (```python title=NAME, the convention of
scripts/test-docs.sh, which runs them twice as pasted) are checked here on the exact
text a reader copies, so there is no copy of them to drift."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\s*(.*)$")


def blocks(lang: str) -> List[Tuple[str, str, str]]:
    """(page:line, title, code) of every runnable block of `lang`."""
    found = []
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").split("\n")
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            title = re.search(r"\btitle=(\S+)", m.group(2))
            if m.group(1) == lang and title:
                found.append((f"{page.relative_to(ROOT)}:{i + 1}", title.group(1),
                              "\n".join(lines[i + 1:j]) + "\n"))
            i = j + 1
    return found


PYTHON = blocks("python")


def test_the_readme_has_runnable_python_programs() -> None:
    titles = [t for origin, t, _ in PYTHON if origin.startswith("README.md")]
    assert "quickstart.py" in titles and "quickstart_async.py" in titles, titles


def test_every_block_passes_mypy_strict(tmp_path: Path) -> None:
    # One mypy run for all blocks (each run costs seconds); a file per block, named
    # after its origin so a failure says where to look.
    names = {}
    for k, (origin, title, code) in enumerate(PYTHON):
        name = f"b{k}_{Path(title).stem}.py"
        (tmp_path / name).write_text(code, encoding="utf-8")
        names[name] = origin
    res = subprocess.run([sys.executable, "-m", "mypy", "--strict", *names], capture_output=True,
                         text=True, cwd=tmp_path)
    out = res.stdout + res.stderr
    for name, origin in names.items():
        out = out.replace(name, f"{name} ({origin})")
    assert res.returncode == 0, out


def test_stubs_match_the_runtime_module() -> None:
    # stubtest imports leafid and compares every name, signature and default with the stub.
    res = subprocess.run([sys.executable, "-m", "mypy.stubtest", "leafid"], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
