"""The Python package in layers (docs/python.md, "Layers"): no import circle among adaptiveload's
modules, counting the imports inside functions too (an import moved into a function to dodge a
circle hides the circle from Python at load time, not from this graph)."""
import ast
import importlib.machinery
import os
from pathlib import Path

import adaptiveload
from conftest import REPO

PACKAGE = Path(REPO) / "python" / "adaptiveload"


def package_modules(root: Path = PACKAGE) -> dict:
    """{dotted name: (source path or None, is a package)}: the package's .py files, and its
    compiled extensions (adaptiveload._C, in the source tree or beside the imported package)
    as modules without source, which import nothing of the package."""
    mods = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        mods[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    for d in {root, Path(adaptiveload.__file__).parent}:
        for path in d.rglob("*"):
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                if path.name.endswith(suffix):
                    parts = path.relative_to(d.parent).parts
                    mods.setdefault(".".join(parts[:-1] + (path.name[: -len(suffix)],)), (None, False))
    return mods


def imports_of(module: str, path: Path, is_pkg: bool, mods: dict) -> list:
    """[(imported module, line)] of every import statement in the file, at any depth (functions,
    methods, if-blocks), of a module of the package. A module of the package without a file here
    (adaptiveload._build_info, which the build writes) is a module all the same: it imports nothing."""
    root = module.split(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            # `from pkg import sub` loads the submodule; `from pkg import name` runs pkg.
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in mods else prefix for a in node.names]
        else:
            continue
        out += [(t, node.lineno) for t in targets if t.split(".")[0] == root and t != module]
    return out


def import_graph(mods: dict) -> dict:
    """{module: {imported module: first line}} over the package's modules with source."""
    graph = {}
    for module, (path, is_pkg) in mods.items():
        edges = {}
        if path is not None:
            for target, line in imports_of(module, path, is_pkg, mods):
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def cycles(graph: dict) -> list:
    """One cycle [m0, m1, ..., m0] per strongly connected component of more than one module
    (Tarjan's algorithm, iterative), in a stable order."""
    index, low, on_stack, stack, comps = {}, {}, set(), [], []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, {})))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return [cycle_in(graph, comp) for comp in sorted(comps)]


def cycle_in(graph: dict, comp: list) -> list:
    """A shortest cycle through comp[0] inside the component (breadth first)."""
    start, members = comp[0], set(comp)
    prev, todo = {start: None}, [start]
    while todo:
        nxt = []
        for v in todo:
            for w in sorted(graph[v]):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w in members and w not in prev:
                    prev[w] = v
                    nxt.append(w)
        todo = nxt
    return comp


def describe(cycle: list, graph: dict, mods: dict) -> str:
    hops = []
    for a, b in zip(cycle, cycle[1:]):
        path = mods[a][0]
        hops.append(f"  {a} imports {b} ({os.path.relpath(path, REPO)}:{graph[a][b]})")
    return " -> ".join(cycle) + "\n" + "\n".join(hops)


def test_the_package_has_no_import_circle():
    mods = package_modules()
    graph = import_graph(mods)
    assert "adaptiveload._C" in mods and graph["adaptiveload.sampler._sampler"], "the graph found no modules"
    found = cycles(graph)
    assert not found, ("import circles in python/adaptiveload (each module of a circle imports the next; move the "
                       "shared piece into a module below both, docs/python.md, Layers):\n"
                       + "\n".join(describe(c, graph, mods) for c in found))


def test_the_graph_sees_imports_inside_functions_and_names_the_circle(tmp_path):
    """The checker itself, on a small package: a circle closed by an import inside a function is
    found and named with its files and lines; the same package without it has none."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("import os\n\n\ndef f():\n    from ..a import g\n    return g\n")
    mods = package_modules(pkg)
    graph = import_graph(mods)
    found = cycles(graph)
    assert found == [["pkg.a", "pkg.sub.b", "pkg.a"]], found
    text = describe(found[0], graph, mods)
    assert "pkg.sub.b imports pkg.a" in text and "b.py:5" in text, text
    (pkg / "sub" / "b.py").write_text("import os\n")
    assert cycles(import_graph(package_modules(pkg))) == []
