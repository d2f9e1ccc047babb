"""The Python package in layers (docs/python.md, "Layers"): no import circle among adaptiveload's
modules, counting the imports inside functions too (an import moved into a function to dodge a
circle hides the circle from Python at load time, not from this graph); and no test imports a
module of examples/ (examples import the package; a test runs an example only as a script)."""
import ast
import importlib.machinery
import os
from pathlib import Path

import adaptiveload
from conftest import REPO

PACKAGE = Path(REPO) / "python" / "adaptiveload"
TESTS = Path(REPO) / "python" / "tests"
EXAMPLES = Path(REPO) / "examples"
# Calls that make a folder's files importable or load a file as a module.
PATH_CALLS = {"sys.path.insert", "sys.path.append", "sys.path.extend", "site.addsitedir", "runpy.run_path",
              "importlib.util.spec_from_file_location", "importlib.machinery.SourceFileLoader", "SourceFileLoader",
              "spec_from_file_location", "run_path", "addsitedir", "importlib.import_module", "import_module",
              "__import__"}


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
            suffix = next((x for x in importlib.machinery.EXTENSION_SUFFIXES if path.name.endswith(x)), None)
            if suffix:  # the longest first: _C.cpython-311-x86_64-linux-gnu.so is _C
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


def _mentions(node, word: str, tainted: set) -> bool:
    """Whether the expression holds the string `word` (in a constant) or a name assigned from one."""
    return any((isinstance(n, ast.Constant) and isinstance(n.value, str) and word in n.value)
               or (isinstance(n, ast.Name) and n.id in tainted) for n in ast.walk(node))


def example_imports(path: Path, examples: set) -> list:
    """["file:line: what"] for each way the test file reaches a module of examples/: an import of
    an example's module name, or a path call (sys.path, site, runpy, importlib, a PYTHONPATH)
    whose arguments name the examples folder, directly or through a variable."""
    tree = ast.parse(path.read_text(), str(path))
    tainted, grew = set(), True
    while grew:  # names assigned from an expression that names the folder, to a fixpoint
        grew = False
        for n in ast.walk(tree):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None:
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                if _mentions(n.value, "examples", tainted):
                    for t in targets:
                        for name in (x.id for x in ast.walk(t) if isinstance(x, ast.Name)):
                            if name not in tainted:
                                tainted.add(name)
                                grew = True
    where = os.path.relpath(path, REPO)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            bad = [a.name for a in n.names if a.name.split(".")[0] in examples]
        elif isinstance(n, ast.ImportFrom):
            bad = [n.module] if not n.level and n.module and n.module.split(".")[0] in examples else []
        elif isinstance(n, ast.Call):
            name = ast.unparse(n.func)
            args = list(n.args) + [k.value for k in n.keywords]
            if name in PATH_CALLS and any(_mentions(a, "examples", tainted) for a in args):
                bad = [f"{name}(...) with the examples folder"]
            elif any(k.arg in ("PYTHONPATH", "extra_paths") and _mentions(k.value, "examples", tainted)
                     for k in n.keywords):
                bad = [f"{name}(...): the examples folder on a PYTHONPATH"]
            else:
                bad = []
        else:
            continue
        found += [f"{where}:{n.lineno}: {b}" for b in bad]
    for n in ast.walk(tree):  # env["PYTHONPATH"] = ... naming the folder
        if isinstance(n, ast.Assign) and _mentions(n.value, "examples", tainted) and any(
                isinstance(t, ast.Subscript) and _mentions(t.slice, "PYTHONPATH", set()) for t in n.targets):
            found.append(f"{where}:{n.lineno}: the examples folder on a PYTHONPATH")
    return found


def example_modules() -> set:
    return {p.stem for p in EXAMPLES.glob("*.py")} | {p.name for p in EXAMPLES.iterdir() if p.is_dir()} | {"examples"}


def test_no_test_imports_from_examples():
    examples = example_modules()
    assert {"train_dit", "compare"} <= examples, examples
    found = [hit for path in sorted(TESTS.glob("*.py")) for hit in example_imports(path, examples)]
    assert not found, ("tests import modules of examples/ (what they need belongs in the package, e.g. "
                       "adaptiveload.training; run an example only as a script):\n  " + "\n  ".join(found))


def test_the_examples_check_sees_imports_and_path_tricks(tmp_path):
    """The checker itself: each way of importing an example is found, running one as a script is not."""
    examples = example_modules()
    cases = {
        "import train_dit": 1,
        "from compare import main": 1,
        "import sys, os\nsys.path.insert(0, os.path.join(REPO, 'examples'))": 1,
        "import sys, os\nEX = os.path.join(REPO, 'examples')\nsys.path.append(EX)": 1,
        "import importlib.util\nimportlib.util.spec_from_file_location('t', 'examples/train_dit.py')": 1,
        "import os\nenv = {}\nenv['PYTHONPATH'] = os.path.join(REPO, 'examples')": 1,
        "cmd, env = torchrun(2, 'logs', extra_paths=[os.path.join(REPO, 'examples')])": 1,
        "import subprocess, sys\nsubprocess.run([sys.executable, os.path.join(REPO, 'examples', 'train_dit.py')])": 0,
        "from adaptiveload.training import compare, train_dit": 0,
    }
    for text, expected in cases.items():
        path = tmp_path / "test_case.py"
        path.write_text(text + "\n")
        assert len(example_imports(path, examples)) == expected, (text, example_imports(path, examples))
