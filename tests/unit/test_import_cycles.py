"""No import cycles among the modules of ``monitor`` (module-level imports; imports under
``TYPE_CHECKING`` and inside functions are not followed). A cycle makes the import order
matter and hides which room depends on which (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import monitor

ROOT = Path(monitor.__file__).parent


def _graph() -> dict[str, set[str]]:
    files = {}
    for f in ROOT.rglob("*.py"):
        parts = ("monitor", *f.relative_to(ROOT).with_suffix("").parts)
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = f
    graph: dict[str, set[str]] = {m: set() for m in files}
    for m, f in files.items():
        pkg = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]

        def visit(body: list[ast.stmt], m: str = m, pkg: str = pkg) -> None:
            for node in body:
                if isinstance(node, ast.If):
                    if "TYPE_CHECKING" not in ast.unparse(node.test):
                        visit(node.body)
                        visit(node.orelse)
                elif isinstance(node, ast.Try):
                    visit(node.body)
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                        base = ".".join(up + ([node.module] if node.module else []))
                    for alias in node.names:
                        target = next(
                            (c for c in (f"{base}.{alias.name}", base) if c in files), None
                        )
                        if target is not None:
                            graph[m].add(target)
                elif isinstance(node, ast.Import):
                    graph[m].update(a.name for a in node.names if a.name in files)

        visit(ast.parse(f.read_text()).body)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan 1972), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_checker_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_monitor_has_no_import_cycles() -> None:
    graph = _graph()
    assert "monitor.engine.join" in graph["monitor.engine.core"]  # the graph is real
    assert _cycles(graph) == []
