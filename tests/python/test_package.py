"""What the installed distribution says about itself."""

from __future__ import annotations

import importlib.metadata

import leafid


def test_version_is_the_distributions_version() -> None:
    # The native module's version (Cargo's) and the wheel's metadata are one number.
    assert leafid.__version__ == importlib.metadata.version("leafid")
    assert leafid.__version__.count(".") == 2


def _stubbed_names() -> set[str]:
    """The names the package's stub defines or re-exports at its top level."""
    import ast
    import pathlib

    stub = pathlib.Path(leafid.__file__).with_name("__init__.pyi")
    names: set[str] = set()
    for node in ast.parse(stub.read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            # `from x import A as A` is a stub's re-export (PEP 484).
            names.update(a.asname for a in node.names if a.asname == a.name)
    return names


def test_the_namespace_holds_only_leafids_names_each_stubbed() -> None:
    # Issue 31: `typing`'s Any, NamedTuple and Optional leaked in as leafid.Any, ….
    public = {n for n in dir(leafid) if not n.startswith("_")}
    assert public == set(leafid.__all__)
    assert not set(leafid.__all__) - _stubbed_names()
    for name in leafid.__all__:
        getattr(leafid, name)
