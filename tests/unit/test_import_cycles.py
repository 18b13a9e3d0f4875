"""The layering of ``monitor``: no module imports one that depends on it, directly or
through its package. Module-level imports count, those under ``TYPE_CHECKING`` too (a
type-only import is still a dependency a reader has to follow); imports inside functions
are not followed. A cycle makes the import order matter and hides which room depends on
which (docs/architecture.md)."""

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
                if isinstance(node, ast.If):  # TYPE_CHECKING blocks included
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


def _rooms(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph between rooms: the top-level packages and modules of ``monitor``
    (``monitor.engine.core`` is in room ``monitor.engine``)."""

    def room(m: str) -> str:
        return ".".join(m.split(".")[:2])

    out: dict[str, set[str]] = {room(m): set() for m in graph}
    for m, targets in graph.items():
        out[room(m)].update(room(t) for t in targets if room(t) != room(m))
    return out


def test_monitor_has_no_import_cycles() -> None:
    graph = _graph()
    assert "monitor.engine.join" in graph["monitor.engine.core"]  # the graph is real
    assert "monitor.engine.records" in graph["monitor.ingest.pipeline"]
    assert _cycles(graph) == []


def test_rooms_import_one_way() -> None:
    """No import runs against the layers: a module of one room importing a room that
    (through any of its modules) imports the first one is a cycle between rooms."""
    rooms = _rooms(_graph())
    assert "monitor.engine" in rooms["monitor.ingest"]  # the graph is real
    assert _cycles(rooms) == []
    # the lower floors import no room above them
    assert rooms["monitor.stats"] == set()
    assert rooms["monitor.metrics"] == {"monitor.stats"}
