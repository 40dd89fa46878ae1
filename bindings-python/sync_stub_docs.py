"""Copies the docstrings of the installed ``leafid`` into its type stub.

The doc comments on the pyo3 items (``bindings-python/src/*.rs``) are the one source of
the text ``help()`` shows; IDEs read the stub (``python/leafid/__init__.pyi``) instead,
so each public class, function, method and property there carries the same text.
After changing a doc comment: rebuild (``pip install .``), then run

    python bindings-python/sync_stub_docs.py

``tests/python/test_docs.py`` fails while the two differ.
"""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple, Union

STUB = Path(__file__).parent / "python" / "leafid" / "__init__.pyi"

Def = Union[ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef]


def public_defs(tree: ast.Module) -> Iterator[Tuple[Def, Any]]:
    """Every public class, function, method and property of the stub, with the runtime
    object it describes."""
    import leafid

    for node in tree.body:
        if not isinstance(node, (ast.ClassDef, ast.FunctionDef)) or node.name.startswith("_"):
            continue
        obj = getattr(leafid, node.name)
        yield node, obj
        if isinstance(node, ast.ClassDef):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        not member.name.startswith("_"):
                    yield member, inspect.getattr_static(obj, member.name)


def runtime_doc(obj: Any) -> Optional[str]:
    """The text ``help()`` shows for ``obj`` (``None`` when it has none)."""
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    doc = getattr(obj, "__doc__", None)
    return inspect.cleandoc(doc) if doc else None


def docstring_lines(doc: str, indent: int) -> List[str]:
    """``doc`` as a docstring indented by ``indent`` spaces."""
    pad = " " * indent
    lines = doc.split("\n")
    if len(lines) == 1 and indent + len(doc) + 6 <= 88:
        return [f'{pad}"""{doc}"""']
    out = [f'{pad}"""{lines[0]}'] + [f"{pad}{line}" if line else "" for line in lines[1:]]
    out[-1] += '"""'
    return out


def sync(text: str) -> str:
    """``text`` (the stub) with every public docstring replaced by the runtime's."""
    tree = ast.parse(text)
    lines = text.split("\n")
    edits = []  # (first line index, last line index, replacement lines), 0-based
    for node, obj in public_defs(tree):
        doc = runtime_doc(obj)
        if doc is None:
            continue
        first = node.body[0]
        indent = node.col_offset + 4
        has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
            isinstance(first.value.value, str)
        new = docstring_lines(doc, indent)
        assert first.end_lineno is not None
        if has_doc:
            edits.append((first.lineno - 1, first.end_lineno - 1, new))
        elif first.lineno == node.body[0].end_lineno and isinstance(first, ast.Expr) and \
                isinstance(first.value, ast.Constant) and first.value.value is Ellipsis and \
                lines[first.lineno - 1].rstrip().endswith(": ..."):
            # `def f(...) -> T: ...` on one line: the docstring replaces the `...`.
            head = lines[first.lineno - 1].rstrip()[: -len(" ...")]
            edits.append((first.lineno - 1, first.lineno - 1, [head] + new))
        else:
            # A class body: the docstring goes first.
            edits.append((first.lineno - 1, first.lineno - 2, new + [""]))
    for start, end, new in sorted(edits, key=lambda e: e[0], reverse=True):
        lines[start:end + 1] = new
    return "\n".join(lines)


def main() -> int:
    text = STUB.read_text()
    synced = sync(text)
    if synced != text:
        STUB.write_text(synced)
        print(f"updated {STUB}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
