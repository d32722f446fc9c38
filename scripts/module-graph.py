#!/usr/bin/env python3
"""The module import graph of a Rust crate, and the check that it has no circle.

For every folder module (the crate root, `ledger/`, `hub/`, ...) the graph has one node per
child module and an edge A -> B when code under A names something under its sibling B
(`use crate::b::...`, `super::b::...`, or a `crate::b::` path in an expression). Edges between
a module and its own ancestors or descendants are structure (a parent declares and re-exports its
children), not dependencies, and are left out. A circle among siblings means two modules that
cannot be understood, or moved, one without the other; `--check` fails on any.

Usage:
  scripts/module-graph.py CRATE_SRC_DIR...            print each folder's graph (text)
  scripts/module-graph.py --check CRATE_SRC_DIR...    same, exit 1 if any folder has a circle
  scripts/module-graph.py --mermaid CRATE_SRC_DIR     the root folder's graph as a Mermaid chart
  scripts/module-graph.py --self-test                 checks the checker on a made-up crate

It reads source text with a small tokenizer (comments and strings removed, `mod x { ... }`
blocks tracked), so it needs nothing but Python 3.
"""

import os
import re
import sys
import tempfile

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(text):
    """Removes comments, string and char literals, keeping newlines and braces' positions."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:]) and (i == 0 or not re.match(r"\w", text[i - 1])):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            i = n if j < 0 else j + len(end)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            i += len(m.group(0))
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_files(src):
    """Maps module paths (tuples) to their files, from the crate root (lib.rs or main.rs)."""
    files = {}
    for root, _dirs, names in os.walk(src):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[0] == "bin":
                continue  # binaries are crates of their own
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            files[tuple(rel)] = path
    return files


def use_paths(text):
    """Yields (inline-module prefix, path) for every path that starts with crate/super/self."""
    # Expand `use a::{b, c::{d, e}}` into separate paths.
    def expand(prefix, body):
        parts, depth, cur = [], 0, ""
        for ch in body:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for part in parts:
            part = part.strip()
            if not part:
                continue
            m = re.match(r"^(.*?)::\{(.*)\}$", part, re.S)
            if m:
                yield from expand(prefix + [m.group(1).strip()], m.group(2))
            else:
                yield "::".join(prefix + [part.split(" as ")[0].strip()])

    # Track inline `mod name {` blocks so that `super` inside them resolves correctly.
    stack = []  # (name, brace depth at which it opened)
    depth = 0
    token = re.compile(r"\bmod\s+(" + IDENT + r")\s*\{|\{|\}|\buse\s+([^;]*);|"
                       r"\b((?:crate|super|self)(?:\s*::\s*" + IDENT + r")+)")
    for m in token.finditer(text):
        if m.group(1):
            depth += 1
            stack.append((m.group(1), depth))
        elif m.group(0) == "{":
            depth += 1
        elif m.group(0) == "}":
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
        elif m.group(2) is not None:
            body = re.sub(r"\s+", "", m.group(2)).replace("pub(crate)", "")
            body = re.sub(r"^pub(\([^)]*\))?", "", body)
            for p in expand([], body):
                if re.match(r"^(crate|super|self)\b", p):
                    yield tuple(n for n, _ in stack), p
        else:
            yield tuple(n for n, _ in stack), re.sub(r"\s+", "", m.group(3))


def resolve(module, inline, path, known):
    """The module a path names, as the longest known module prefix; None outside the crate."""
    here = list(module) + list(inline)
    parts = path.split("::")
    if parts[0] == "crate":
        base, rest = [], parts[1:]
    else:
        base, rest = here, parts
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    full = base + [p for p in rest if re.match("^" + IDENT + "$", p)]
    for k in range(len(full), -1, -1):
        if tuple(full[:k]) in known:
            return tuple(full[:k])
    return None


def graph(src):
    """Per folder module: {child: set(children it depends on)}."""
    files = module_files(src)
    known = set(files)
    folders = {}
    for module, path in files.items():
        with open(path, encoding="utf-8") as f:
            text = strip(f.read())
        for inline, p in use_paths(text):
            target = resolve(module, inline, p, known)
            if target is None:
                continue
            # The first point where the two paths part: the folder whose children they are.
            k = 0
            while k < min(len(module), len(target)) and module[k] == target[k]:
                k += 1
            if k == len(module) or k == len(target):
                continue  # ancestor or descendant: structure, not a dependency
            folder = module[:k]
            folders.setdefault(folder, {}).setdefault(module[k], set()).add(target[k])
    for module in known:
        if module:
            folders.setdefault(module[:-1], {}).setdefault(module[-1], set())
    return folders


def circles(edges):
    """Strongly connected components with more than one member (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
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

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layers(edges):
    """Modules in dependency order (leaves first), for an acyclic folder."""
    order, seen = [], set()

    def visit(v):
        if v in seen:
            return
        seen.add(v)
        for w in sorted(edges.get(v, ())):
            visit(w)
        order.append(v)

    for v in sorted(edges):
        visit(v)
    return order


def report(src, out=sys.stdout):
    bad = 0
    for folder, edges in sorted(graph(src).items()):
        name = "::".join(("crate",) + folder)
        found = circles(edges)
        bad += len(found)
        print(f"{src}: {name}", file=out)
        for c in found:
            print(f"  CIRCLE: {' <-> '.join(c)}", file=out)
        if not found:
            print(f"  order (leaves first): {', '.join(layers(edges))}", file=out)
        for a in sorted(edges):
            if edges[a]:
                print(f"  {a} -> {', '.join(sorted(edges[a]))}", file=out)
    return bad


def mermaid(src):
    edges = graph(src).get((), {})
    print("flowchart TD")
    for a in sorted(edges):
        for b in sorted(edges[a]):
            print(f"  {a} --> {b}")


def self_test():
    with tempfile.TemporaryDirectory() as d:
        def write(rel, text):
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        write("lib.rs", "mod a; mod b; mod c; mod d;\n// use crate::d;\n")
        write("a.rs", "use crate::{b::X, c};\nfn f() { let s = \"crate::d::Y\"; }\n")
        write("b.rs", "use super::c::Z;\n")
        write("c.rs", "mod tests { use super::*; use super::super::a; }\n")
        write("d/mod.rs", "mod e; mod f; pub use e::E;\n")
        write("d/e.rs", "use super::f::F;\nuse crate::d::E2;\n")
        write("d/f.rs", "use crate::b;\n")
        g = graph(d)
        assert g[()] == {"a": {"b", "c"}, "b": {"c"}, "c": {"a"}, "d": {"b"}}, g[()]
        assert g[("d",)] == {"e": {"f"}, "f": set()}, g[("d",)]
        assert circles(g[()]) == [["a", "b", "c"]], circles(g[()])
        assert circles(g[("d",)]) == []
    print("module-graph self-test: ok")


def main(argv):
    if argv[:1] == ["--self-test"]:
        self_test()
        return 0
    if argv[:1] == ["--mermaid"]:
        mermaid(argv[1])
        return 0
    check = argv[:1] == ["--check"]
    srcs = argv[1:] if check else argv
    if not srcs:
        print(__doc__, file=sys.stderr)
        return 2
    bad = sum(report(s) for s in srcs)
    if check and bad:
        print(f"{bad} import circle(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
