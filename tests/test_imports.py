"""No import circles among attnx's modules, found statically: every import, at any level, is an edge."""

from __future__ import annotations

import ast
import functools
import itertools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parent.parent / "attnx"


def module_names(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, for its ``__init__.py``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """The import statements under ``if TYPE_CHECKING:`` (they run for the type checker only)."""
    guarded: set[ast.AST] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING"):
            guarded |= {inner for child in node.body for inner in ast.walk(child)}
    return guarded


def imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, bool]]:
    """The attnx modules ``name`` (at ``path``) imports anywhere in its text, each with whether the import is under
    ``if TYPE_CHECKING`` (it counts all the same: the modules still know each other).

    ``from attnx.pkg import x`` imports ``attnx.pkg.x`` when that is a module, else ``attnx.pkg``. A module's
    implicit import of the packages above it is not counted: it would make every package a circle.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text("utf-8"), str(path))
    typing_only = type_checking_only(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1 packages
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import attnx.io.documents.x` names no module: the nearest one
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target, node in typing_only


@functools.cache
def import_edges(root: Path = ROOT) -> dict[tuple[str, str], bool]:
    """Every import edge between attnx's modules, with whether it is only ever made under ``TYPE_CHECKING`` (read
    once per session: each module parsed once for every test here)."""
    modules = module_names(root)
    edges: dict[tuple[str, str], bool] = {}
    for name, path in modules.items():
        for target, typing_only in imported(name, path, modules):
            edges[name, target] = edges.get((name, target), True) and typing_only
    return edges


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Each module of attnx and the attnx modules it imports."""
    graph: dict[str, set[str]] = {name: set() for name in module_names(root)}
    for name, target in import_edges(root):
        graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph.get(node, ())):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def loop_through(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One closed path of imports inside ``component``, from its first module back to it (breadth first)."""
    start, members = component[0], set(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for after in sorted(graph[node] & members):
                if after == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if after not in previous:
                    previous[after] = node
                    following.append(after)
        frontier = following
    return component  # pragma: no cover (a component always holds a loop)


class TestImportGraph:
    """The graph and the circle finder on small cases, so that an empty answer means something."""

    def test_finds_a_circle_and_leaves_a_chain(self) -> None:
        """A → B → A is a circle; C → A is not part of it."""
        graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
        assert circles(graph) == [["a", "b"]]
        assert loop_through(["a", "b"], graph) == ["a", "b", "a"]

    def test_a_longer_loop(self) -> None:
        """A → B → C → A is one circle of three, shown in import order."""
        graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
        assert circles(graph) == [["a", "b", "c"]]
        assert loop_through(["a", "b", "c"], graph) == ["a", "b", "c", "a"]

    def test_resolves_from_imports(self) -> None:
        """``from attnx.io import jsontext`` is the module, ``from attnx.io import load_spec`` the package; an
        import inside a function or under TYPE_CHECKING counts, and the edge says which."""
        graph = import_graph()
        assert "attnx.io.jsontext" in graph["attnx.io.documents"]
        assert "attnx.io" in graph["attnx"]  # `from attnx.io import load_spec`, under TYPE_CHECKING
        assert "attnx.analysis.diff" in graph["attnx.analysis.explore"]  # inside a method
        edges = import_edges()
        assert edges["attnx", "attnx.io"] and not edges["attnx.analysis.explore", "attnx.analysis.diff"]
        assert "attnx.analysis" not in graph["attnx.analysis.check"]  # its package, imported implicitly only


def test_no_import_circles() -> None:
    """No module of attnx imports, through any chain, a module that imports it back (``⇢``: under TYPE_CHECKING)."""
    edges = import_edges()
    graph = import_graph()
    found = []
    for component in circles(graph):
        loop = loop_through(component, graph)
        steps = [f" {'⇢' if edges[a, b] else '→'} {b}" for a, b in itertools.pairwise(loop)]
        found.append(f"{loop[0]}{''.join(steps)} (component: {', '.join(component)})")
    assert not found, "import circles:\n" + "\n".join(found)


def test_only_the_cli_imports_the_app() -> None:
    """The explorer's app (``attnx.tui``) sits above render and analysis: only the CLI imports it."""
    importers = sorted({name for name, target in import_edges() if target.startswith("attnx.tui")})
    assert all(name.startswith(("attnx.cli", "attnx.tui")) for name in importers), importers


def within(name: str, package: str) -> bool:
    """Whether module ``name`` is ``package`` or one of its modules."""
    return name == package or name.startswith(f"{package}.")


# The house's layers: what each package must not import (directly, at any level, under TYPE_CHECKING too).
# core ← engines ← models; core ← analysis; workflows → models + analysis + engines; cli → workflows + render.
BELOW = {
    "attnx.models": ("attnx.analysis", "attnx.workflows"),
    "attnx.analysis": ("attnx.models", "attnx.workflows"),
}
# The one arrow back up the house: the entry point starts the CLI.
ENTRY_POINTS = ("attnx.cli", "attnx.console")


def test_the_layers_point_down() -> None:
    """No module of ``attnx.models`` imports ``attnx.analysis`` or ``attnx.workflows``; none of ``attnx.analysis``
    imports ``attnx.models`` or ``attnx.workflows``; only the CLI and its entry point import ``attnx.cli``."""
    edges = import_edges()
    found = [
        f"{name} {'⇢' if typing_only else '→'} {target}"
        for (name, target), typing_only in sorted(edges.items())
        for package, forbidden in BELOW.items()
        if within(name, package) and any(within(target, above) for above in forbidden)
    ]
    found += [
        f"{name} {'⇢' if typing_only else '→'} {target}"
        for (name, target), typing_only in sorted(edges.items())
        if within(target, "attnx.cli") and not any(within(name, entry) for entry in ENTRY_POINTS)
    ]
    assert not found, "imports up the house:\n" + "\n".join(found)
