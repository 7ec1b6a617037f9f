"""The import graph: the engine (specdec) stands alone, and no import circle exists anywhere in the project.

Every first-party .py file is parsed with `ast` (nothing is imported or run), and every import counts: at module
level, inside functions, under `if TYPE_CHECKING`, and `importlib.import_module("...")` / `__import__("...")` with
a literal name. Print the graph (the closing note of issue 39 shows it):

    python -m tests.test_import_graph            # specdec's modules and what each imports; the package graph
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("specdec", "heads", "data", "rewards", "train", "eval", "bench", "diagnostics", "tests")
# What the shipped engine may not import (at module level or inside functions): the jobs and the project's data,
# and the packages built on top of it (heads re-exports specdec.head; rewards scores text).
ENGINE_FORBIDDEN = ("eval", "train", "data", "bench", "diagnostics", "heads", "rewards", "tests")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "__pycache__" not in path.parts:
                mods[module_name(path)] = path
    return mods


def _resolve(name: str, mods: dict[str, Path]) -> str | None:
    """The deepest project module `name` names (a.b.c -> a.b when c is an attribute), or None (third party)."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in mods:
            return cand
        parts.pop()
    return None


def imports_of(mod: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """Project modules `mod` imports, anywhere in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_pkg = path.name == "__init__.py"
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the package the module is in
                base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            names.append(stem)
            names += [f"{stem}.{a.name}" for a in node.names]  # `from pkg import submodule`
        elif isinstance(node, ast.Call):  # importlib.import_module("x.y") / __import__("x.y") with a literal
            fn = node.func
            fname = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if fname in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                names.append(node.args[0].value)
    out = set()
    for n in names:
        target = _resolve(n, mods)
        if target is not None and target != mod:
            out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> project modules it imports. Importing a module of another top-level package also runs that
    package's __init__ (and those of the packages between), so those are edges too; inside one package they are not
    (a package's __init__ importing its own submodules, which import their siblings, is how packages work)."""
    mods = project_modules()
    graph: dict[str, set[str]] = {}
    for mod, path in mods.items():
        edges = set()
        for t in imports_of(mod, path, mods):
            edges.add(t)
            if t.split(".")[0] != mod.split(".")[0]:
                parts = t.split(".")
                edges.update(p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in mods)
        graph[mod] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    pg: dict[str, set[str]] = defaultdict(set)
    for mod, edges in graph.items():
        top = mod.split(".")[0]
        pg[top] |= {t.split(".")[0] for t in edges} - {top}
    return dict(pg)


# ---------------------------------------------------------------- tests
def test_engine_imports_nothing_from_the_jobs_or_the_data():
    graph = import_graph()
    bad = sorted((m, t) for m, edges in graph.items() if m.split(".")[0] == "specdec"
                 for t in edges if t.split(".")[0] in ENGINE_FORBIDDEN)
    assert not bad, "specdec must stand alone; it imports: " + ", ".join(f"{m} -> {t}" for m, t in bad)
    assert sum(m.split(".")[0] == "specdec" for m in graph) >= 15  # the walk found the engine's modules


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_import_cycle_between_packages():
    pg = package_graph(import_graph())
    found = cycles(pg)
    assert not found, f"package import cycles: {found}; package graph: {pg}"
    assert pg["specdec"] == set()  # the engine depends on no other package of the project


def test_embedded_trio_builds_through_the_registered_builder(micro_trio, tmp_path, monkeypatch):
    """The engine never imports data.build_models: the data package registers its builder, so the jobs (which import
    it) still build the trio on first use; without a builder a built trio is used and a missing one is named."""
    import pytest

    import data.build_models as bm
    from specdec import loading

    calls = []
    monkeypatch.setattr(bm, "ensure_embedded", lambda d=None, seed=0: calls.append(d) or micro_trio)
    assert loading.Models({"embedded": True, "dir": "somewhere"}).root == micro_trio and calls == ["somewhere"]
    monkeypatch.setattr(loading, "_embedded_builder", None)
    assert loading.Models({"embedded": True, "dir": str(micro_trio)}).root == micro_trio
    with pytest.raises(FileNotFoundError, match="make models"):
        loading.Models({"embedded": True, "dir": str(tmp_path / "none")}).root  # noqa: B018
    assert not calls[1:]


def test_the_checker_sees_what_it_must(tmp_path):
    """The parser catches an import inside a function, a relative import and importlib with a literal name."""
    mods = {"specdec": ROOT / "specdec/__init__.py", "specdec.x": tmp_path / "x.py", "data": ROOT / "data/__init__.py",
            "data.tasks": ROOT / "data/tasks.py", "eval": ROOT / "eval/__init__.py", "eval.run": ROOT / "eval/run.py",
            "specdec.y": tmp_path / "y.py"}
    (tmp_path / "x.py").write_text("import importlib\ndef f():\n    from data.tasks import get_task\n"
                                   "    importlib.import_module('eval.run')\nfrom . import y\n")
    assert imports_of("specdec.x", tmp_path / "x.py", mods) == {"data.tasks", "eval.run", "specdec", "specdec.y"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def main() -> None:
    graph = import_graph()
    print("specdec: each module and the project modules it imports (anywhere in the file)")
    for mod in sorted(m for m in graph if m.split(".")[0] == "specdec"):
        print(f"  {mod:26s} -> {', '.join(sorted(graph[mod])) or '(nothing first-party)'}")
    outside = sorted({t for m, e in graph.items() if m.startswith("specdec") for t in e if not t.startswith("specdec")})
    print(f"specdec imports from other project packages: {outside or 'nothing'}")
    print("package graph (package -> packages it imports):")
    for top, deps in sorted(package_graph(graph).items()):
        print(f"  {top:8s} -> {', '.join(sorted(deps)) or '-'}")
    found = cycles(graph)
    print(f"module import cycles: {found or 'none'}; package import cycles: {cycles(package_graph(graph)) or 'none'}")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
