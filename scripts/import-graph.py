#!/usr/bin/env python3
"""The import graph of leafid's Rust crates, file by file, and the rules it must keep.

    python3 scripts/import-graph.py            # check: circles, mode -> mode, db -> mode
    python3 scripts/import-graph.py --edges    # also print every edge

An edge A -> B means a file A names an item of file B (a `use` line, or a `crate::`/
`super::` path in code). Not edges: `mod x;` and re-exports (`pub use`, `pub(crate) use`),
which only arrange names, and `#[cfg(test)] mod tests` at the end of a file.

Rules (exit 1 when one breaks):
- no circle between files of one crate (a callee never reaches back into its caller);
- in core/, `segment/` and `snowflake/` never name each other (the two modes share only
  what sits below them), and `db/` (the backends both modes use) names neither.

Why a script and not `cargo modules`: that tool needs a nightly-matched rust-analyzer build
and draws modules, not files; this reads `use` lines in a second, with Python alone.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRATES = ["core/src", "bindings-python/src", "bindings-node/src", "server/src"]
MODES = ("segment", "snowflake")
USE = re.compile(r"(^|[;{}\n])\s*(pub(\([^)]*\))?\s+)?use\s+([^;]+);")


def module_of(src, path):
    """`core/src/a/b.rs` -> ('a', 'b'); `a/mod.rs` -> ('a',); lib.rs/main.rs -> ()."""
    rel = os.path.relpath(path, src)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib", "main"):
        rel = rel[:-1]
    return tuple(rel)


def strip(text):
    """The file without comments, strings and a trailing `#[cfg(test)] mod tests { ... }`."""
    # One pass, so that a `//` inside a string ("mysql://…") is no comment and a quote
    # inside a comment opens no string. Char literals first: '"' is no string either.
    token = re.compile(
        r"'(?:\\.|[^'\\])'|r(#*)\"(?:.|\n)*?\"\1|\"(?:\\.|[^\"\\])*\"|//[^\n]*|/\*(?:.|\n)*?\*/"
    )
    text = token.sub(lambda m: '""' if m.group(0)[0] in "r\"" else " ", text)
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\(\w+\))?\s+)?mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def expand(tree):
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = tree.strip()
    i = tree.find("{")
    if i < 0:
        return [re.sub(r"\s+as\s+\w+$", "", tree)] if tree else []
    prefix, body = tree[:i], tree[i + 1 : tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "{"
        depth -= ch == "}"
        cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        for q in expand(p):
            out.append(prefix + q if q != "self" else prefix.rstrip(":"))
    return out


def absolute(here, path):
    """A path as written in module `here` -> segments from the crate root, or None."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        return segs[1:]
    base = list(here)
    if segs[0] == "self":
        return base + segs[1:]
    if segs[0] == "super":
        while segs and segs[0] == "super":
            if not base:
                return None
            base.pop()
            segs = segs[1:]
        return base + segs
    return None  # an outside crate or a name in scope


def crate_graph(src):
    files = {}
    for d, _, names in os.walk(src):
        for n in names:
            if n.endswith(".rs"):
                p = os.path.join(d, n)
                files[module_of(src, p)] = os.path.relpath(p, ROOT)
    texts = {m: strip(open(os.path.join(ROOT, p), encoding="utf-8").read()) for m, p in files.items()}
    # Re-exports, name -> where it comes from, so that `crate::segment::SegmentStats` leads to
    # the file that defines it, not to the `mod.rs` that arranges the name.
    exports = {}
    for mod, text in texts.items():
        for m in USE.finditer(text):
            if m.group(2):
                for r in expand(m.group(4)):
                    segs = absolute(mod, r)
                    if segs:
                        name = re.search(r"\bas\s+(\w+)$", r)
                        exports.setdefault(mod, {})[name.group(1) if name else segs[-1]] = segs

    def resolve(segs, depth=0):
        for k in range(len(segs), -1, -1):
            if tuple(segs[:k]) in files:
                target = tuple(segs[:k])
                if k < len(segs) and depth < 8:
                    again = exports.get(target, {}).get(segs[k])
                    if again and again[0] != segs[k]:
                        return resolve(again + segs[k + 1 :], depth + 1)
                return target
        return None

    edges = {}
    for mod, path in files.items():
        text = texts[mod]
        refs = []
        for m in USE.finditer(text):
            if m.group(2):
                continue  # a re-export arranges names; it is not a dependency
            refs += expand(m.group(4))
        code = re.sub(r"(^|[;{}\n])\s*(pub(\([^)]*\))?\s+)?use\s+[^;]+;", r"\1", text)
        refs += re.findall(r"\b((?:crate|super|self)(?:::(?:super|\w+))+)", code)
        for r in refs:
            segs = absolute(mod, r)
            if segs is None:
                continue
            target = resolve(segs)
            if target is None or target == mod:
                continue
            # A child naming its own ancestor's re-export is resolved to the ancestor file;
            # an ancestor naming a child's item is an ordinary edge.
            edges.setdefault(path, set()).add(files[target])
    return files, edges


def circles(edges):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def area(path):
    """The top-level module of a core file: `segment`, `snowflake`, `metrics`, `db`, ..."""
    parts = path.split("/")
    if parts[0] != "core" or parts[-1] == "lib.rs":
        return None
    return parts[2][:-3] if parts[2].endswith(".rs") else parts[2]


def main():
    show = "--edges" in sys.argv
    bad = 0
    total = 0
    for src in CRATES:
        if not os.path.isdir(os.path.join(ROOT, src)):
            continue
        files, edges = crate_graph(os.path.join(ROOT, src))
        total += sum(len(v) for v in edges.values())
        if show:
            for a in sorted(edges):
                for b in sorted(edges[a]):
                    print(f"{a} -> {b}")
        for comp in circles(edges):
            bad += 1
            print("circle: " + " <-> ".join(comp))
            for a in comp:
                for b in sorted(edges.get(a, ())):
                    if b in comp:
                        print(f"    {a} -> {b}")
        # The same between the core's top-level modules: `metrics` may not take the modes'
        # types while the modes register with it.
        areas = {}
        for a in edges:
            for b in edges[a]:
                if area(a) and area(b) and area(a) != area(b):
                    areas.setdefault(area(a), set()).add(area(b))
        for comp in circles(areas):
            bad += 1
            print("module circle: " + " <-> ".join(comp))
            for a in comp:
                for b in sorted(edges):
                    if area(b) == a:
                        for c in sorted(edges[b]):
                            if area(c) in comp and area(c) != a:
                                print(f"    {b} -> {c}")
        for a in sorted(edges):
            for b in sorted(edges[a]):
                fa, fb = area(a), area(b)
                if fa in MODES and fb in MODES and fa != fb:
                    bad += 1
                    print(f"mode -> mode: {a} -> {b}")
                if fa == "db" and fb in MODES:
                    bad += 1
                    print(f"db -> mode: {a} -> {b}")
    print(f"{total} edges, {bad} broken rules")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
