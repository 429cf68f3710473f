"""The shape of the package (docs/architecture.md): imports run one way, rooms stay small, and
Hypothesis's internals are touched in one module only."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "taskboard"
#: The one module allowed to reach into Hypothesis's internals.
REACH = PACKAGE / "stateful" / "_hypothesis.py"
LONGEST_MODULE = 1000
LONGEST_CLASS = 500
#: The longest function the checker (taskboard/stateful/) may have.
LONGEST_CHECKER_FUNCTION = 80


def modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in it (functions included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            imported.add(base)
            imported.update(f"{base}.{alias.name}" for alias in node.names)
    # A module's import of its own package's __init__ is how Python loads it, not a use.
    return {m for m in imported if m in known and m != name and not name.startswith(m + ".")}


def import_graph() -> nx.DiGraph[str]:
    found = modules()
    graph: nx.DiGraph[str] = nx.DiGraph()
    for name, path in found.items():
        graph.add_node(name)
        graph.add_edges_from((name, imported) for imported in imports_of(name, path, set(found)))
    return graph


def test_the_package_has_no_import_circle() -> None:
    """No module imports, even inside a function, one that imports it back."""
    cycles = list(nx.simple_cycles(import_graph()))
    assert cycles == []


@pytest.mark.parametrize(
    ("lower", "upper"),
    [
        ("taskboard.stateful._session", "taskboard.stateful._parallel"),
        ("taskboard.stateful._session", "taskboard.stateful._machine"),
        ("taskboard.stateful._parallel", "taskboard.stateful._machine"),
        ("taskboard.stateful._reports", "taskboard.stateful._session"),
        ("taskboard.stateful._config", "taskboard.stateful._session"),
        ("taskboard.model", "taskboard.stateful"),
        ("taskboard.stateful._steps", "taskboard.stateful._session"),
        ("taskboard.stateful._steps", "taskboard.stateful._machine"),
        ("taskboard.stateful._steps", "taskboard.stateful._parallel"),
        ("taskboard.stateful._tracefile", "taskboard.stateful._session"),
        ("taskboard._callpath", "taskboard.stateful"),
        ("taskboard._race", "taskboard.stateful"),
    ],
)
def test_the_rooms_of_the_checker_import_one_way(lower: str, upper: str) -> None:
    """Calling and judging sit below the parallel runner, which sits below the machine."""
    graph = import_graph()
    below = {n for n in graph if n == lower or n.startswith(lower + ".")}
    above = {n for n in graph if n == upper or n.startswith(upper + ".")}
    reached = set().union(*(nx.descendants(graph, n) for n in below))
    assert not reached & above, f"{lower} reaches {sorted(reached & above)}"


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_is_over_a_thousand_lines(name: str) -> None:
    """Each module stays a room one can read."""
    lines = modules()[name].read_text(encoding="utf-8").count("\n")
    assert lines <= LONGEST_MODULE, f"{name}: {lines} lines"


def test_no_class_is_over_five_hundred_lines() -> None:
    """No class grows into the whole checker again."""
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                if length > LONGEST_CLASS:
                    long.append(f"{name}.{node.name}: {length} lines")
    assert long == []


def test_no_function_of_the_checker_is_over_eighty_lines() -> None:
    """Each function of taskboard/stateful/ reads on one screen: a step, a setting or a call
    that needs more is a record or a room of its own."""
    long = []
    for name, path in modules().items():
        if not name.startswith("taskboard.stateful"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > LONGEST_CHECKER_FUNCTION:
                    long.append(f"{name}.{node.name}: {length} lines")
    assert long == []


#: What marks a reach into Hypothesis's internals in the source.
INTERNAL_MARKS = (
    "hypothesis.internal",
    "hypothesis._settings",
    "strategies._internal",
    "_hypothesis_internal_",
    "_rules_strategy",
    "_initialize_rules_to_run",
    "_to_test_case",
    ".is_final",
    '"is_final"',
    "_fallback",
)


def test_hypothesis_internals_are_touched_in_one_module() -> None:
    """Every reach into Hypothesis's internals is in stateful/_hypothesis.py, where each is
    guarded and pinned by tests/test_hypothesis_reach.py."""
    reaching = {
        f"{path.relative_to(PACKAGE.parent)}: {mark}"
        for path in modules().values()
        if path != REACH
        for mark in INTERNAL_MARKS
        if mark in path.read_text(encoding="utf-8")
    }
    assert reaching == set()
