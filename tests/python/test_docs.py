"""Issue 21: ``help()`` shows the text of every native class, method and property, from
one source (the doc comments on the pyo3 items), and the type stub agrees with it: the
same docstrings (``bindings-python/sync_stub_docs.py`` copies them) and the same
signatures wherever ``inspect`` can read the runtime's."""

from __future__ import annotations

import ast
import importlib.util
import inspect
from pathlib import Path
from typing import Any, Iterator, List, Optional, Tuple

import pytest

import leafid

ROOT = Path(__file__).resolve().parents[2]
SYNC = ROOT / "bindings-python" / "sync_stub_docs.py"


def sync_tool() -> Any:
    spec = importlib.util.spec_from_file_location("sync_stub_docs", SYNC)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stub_path() -> Path:
    # The stub installed beside the module (what IDEs and mypy read).
    path = Path(leafid.__file__).with_suffix(".pyi")
    assert path.exists(), path
    return path


def public_defs() -> Iterator[Tuple[str, ast.AST, Any]]:
    tree = ast.parse(stub_path().read_text())
    for node, obj in sync_tool().public_defs(tree):
        yield node.name, node, obj


DEFS = list(public_defs())
NAMES = [name for name, _, _ in DEFS]


def test_the_stub_lists_the_native_api() -> None:
    # The walk reaches the native classes' methods and properties, not just top names.
    for name in ("SegmentGenerator", "connect", "next_ids_async", "stats", "TagStats",
                 "last_error", "SnowflakeGenerator", "worker_id", "IdCipher", "encrypt_many",
                 "Layout", "js_safe", "metrics_text", "decode_base62"):
        assert name in NAMES, name


@pytest.mark.parametrize("name,node,obj", DEFS, ids=[f"{n}@{getattr(d, 'lineno', 0)}" for n, d, _ in DEFS])
def test_every_public_name_of_the_stub_has_a_runtime_docstring(name: str, node: ast.AST, obj: Any) -> None:
    doc = sync_tool().runtime_doc(obj)
    assert doc and doc.strip(), f"{name} has no __doc__: add a doc comment on the pyo3 item"


def test_help_shows_the_text_of_native_methods() -> None:
    text = pydoc_text(leafid.SegmentGenerator)
    assert "The next id of ``tag``" in text and "next_ids_async(self, /, tag, n)" in text
    assert "wait_timeout=1.0" in text  # the constructor's signature, with its defaults
    assert "Successful loads so far." in pydoc_text(leafid.TagStats)


def pydoc_text(obj: Any) -> str:
    import pydoc

    return pydoc.render_doc(obj, renderer=getattr(pydoc, "plaintext"))  # not in typeshed


def test_stub_docstrings_are_the_runtime_docstrings() -> None:
    text = stub_path().read_text()
    assert sync_tool().sync(text) == text, (
        "the stub's docstrings differ from the doc comments: rebuild, then run "
        "python bindings-python/sync_stub_docs.py")


def stub_params(node: ast.FunctionDef) -> List[Tuple[str, inspect._ParameterKind, Optional[str]]]:
    """(name, kind, default source or None) of a stub function, self/cls left out."""
    a = node.args
    out: List[Tuple[str, inspect._ParameterKind, Optional[str]]] = []
    positional = [(p, inspect.Parameter.POSITIONAL_ONLY) for p in a.posonlyargs] + \
        [(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in a.args]
    defaults: List[Optional[ast.expr]] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for (p, kind), d in zip(positional, defaults):
        out.append((p.arg, kind, None if d is None else ast.unparse(d)))
    if a.vararg:
        out.append((a.vararg.arg, inspect.Parameter.VAR_POSITIONAL, None))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, inspect.Parameter.KEYWORD_ONLY, None if d is None else ast.unparse(d)))
    if out and out[0][0] in ("self", "cls"):
        out = out[1:]
    return out


def runtime_params(sig: inspect.Signature) -> List[Tuple[str, inspect._ParameterKind, Any]]:
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    return [(p.name, p.kind, p.default) for p in params]


def signature_cases() -> Iterator[Tuple[str, ast.FunctionDef, Any]]:
    for name, node, obj in DEFS:
        if isinstance(node, ast.ClassDef):
            new = next((m for m in node.body if isinstance(m, ast.FunctionDef) and m.name == "__new__"), None)
            if new is not None:
                yield f"{name}()", new, obj
        elif isinstance(node, ast.FunctionDef) and not any(
                isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
            yield name, node, obj


SIGS = list(signature_cases())


@pytest.mark.parametrize("name,node,obj", SIGS, ids=[f"{n}@{d.lineno}" for n, d, _ in SIGS])
def test_stub_signatures_agree_with_the_runtime(name: str, node: ast.FunctionDef, obj: Any) -> None:
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    # Every native callable carries a text signature (pyo3 writes it; a class's comes
    # from `text_signature` on `#[new]`), so inspect reads it.
    sig = inspect.signature(obj)
    stub = stub_params(node)
    runtime = runtime_params(sig)
    # The receiver is positional-only at runtime (`$self`): compare names and kinds past it.
    assert [(n, k) for n, k, _ in stub] == [(n, k) for n, k, _ in runtime], f"{name}: stub {stub} vs {sig}"
    for (n, _, stub_default), (_, _, default) in zip(stub, runtime):
        if stub_default is None:
            assert default is inspect.Parameter.empty, f"{name}: {n} has a default at runtime"
        elif stub_default != "..." and default is not inspect.Parameter.empty and default is not Ellipsis:
            assert ast.literal_eval(stub_default) == default, f"{name}: {n}={stub_default} vs {default!r}"


def test_layout_signature_shows_leafs_epoch() -> None:
    # Written out on the pyo3 item (a generated one would show `epoch_ms=...`).
    assert inspect.signature(leafid.Layout).parameters["epoch_ms"].default == leafid.LEAF_EPOCH_MS
