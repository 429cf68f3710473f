"""``check()``: the snapshot invariants of SPEC section 4."""

from __future__ import annotations

import gc
import reprlib
from collections import deque
from collections.abc import Iterable, Iterator, Sequence, Set
from contextlib import contextmanager
from operator import attrgetter
from typing import cast

import networkx as nx

from taskboard._contract import Code, Lease, Problem, State, Task

__all__ = ["check"]

_SHOWN = 8  # names a text lists before it is cut short, so texts stay bounded

_STATES: dict[str, State] = {s.value: s for s in State}
_STATES_TEXT = ", ".join(_STATES)

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 160
_repr.maxlist = _repr.maxtuple = _SHOWN


def _show(value: object) -> str:
    """A bounded repr that never raises (``reprlib`` survives a failing ``__repr__``)."""
    return _repr.repr(value)


def _name(task_id: str) -> str:
    """A task id as it reads in a text: bare when that is unambiguous, else a bounded repr."""
    if task_id and len(task_id) <= 60 and task_id.isprintable() and " " not in task_id:
        return task_id
    return _show(task_id)


def _fault(item: object) -> str | None:
    """What makes ``item`` garbage rather than a snapshot entry, or None if it is a Task."""
    if not isinstance(item, Task):
        return f"is not a Task ({type(item).__name__})"
    if not isinstance(item.id, str):
        return f"has an id that is not a str: {_show(item.id)}"
    deps: object = item.deps
    if not isinstance(deps, tuple | list):
        return f"has deps that are not a tuple of str: {_show(deps)}"
    for dep in deps:
        if not isinstance(dep, str):
            return f"has a dependency that is not a str: {_show(dep)}"
    if not isinstance(item.owner, str):
        return f"has an owner that is not a str: {_show(item.owner)}"
    lease: object = item.lease
    if lease is not None:
        if not isinstance(lease, Lease):
            return f"has a lease that is neither None nor a Lease: {_show(lease)}"
        if not isinstance(lease.token, str):
            return f"has a lease token that is not a str: {_show(lease.token)}"
    return None


def _read(tasks: object) -> tuple[list[Task], dict[str, int]]:
    """The tasks as a list and how often each id occurs; TypeError names the first garbage item."""
    if isinstance(tasks, str | bytes | bytearray | Task):
        raise TypeError(
            f"check() takes an iterable of Task, got a single {type(tasks).__name__}: "
            f"{_show(tasks)}; pass a list of Task"
        )
    try:
        items = iter(cast("Iterable[object]", tasks))
    except TypeError:
        raise TypeError(
            f"check() takes an iterable of Task, got {type(tasks).__name__}: {_show(tasks)}"
        ) from None
    snapshot: list[Task] = []
    counts: dict[str, int] = {}
    for index, item in enumerate(items):
        fault = _fault(item)
        if fault is not None:
            raise TypeError(f"check(): tasks[{index}] {fault}; the item: {_show(item)}")
        task = cast("Task", item)
        snapshot.append(task)
        counts[task.id] = counts.get(task.id, 0) + 1
    return snapshot, counts


def _state(value: object) -> State | None:
    """The State a stored value stands for (a known plain string counts), or None if unknown."""
    return _STATES.get(value) if isinstance(value, str) else None


def _cyclic(deps_of: dict[str, Sequence[str]], indegree: dict[str, int]) -> list[set[str]]:
    """The strongly connected components of two or more tasks in the dependency graph.

    ``deps_of`` maps every id to its dependencies, unknown ids and self loops
    skipped; ``indegree`` counts the other edges into each id (and is used up).
    Tasks that no cycle reaches are peeled off first (Kahn's algorithm on
    in-degrees, iterative), so a chain or any DAG never reaches networkx, which
    then finds the components among what is left.
    """
    sources = [node for node, degree in indegree.items() if not degree]
    while sources:
        node = sources.pop()
        for dep in deps_of[node]:
            if dep != node and dep in indegree:
                indegree[dep] -= 1
                if not indegree[dep]:
                    sources.append(dep)
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_edges_from(
        (node, dep)
        for node, degree in indegree.items()
        if degree
        for dep in deps_of[node]
        if dep != node and dep in indegree
    )
    return [comp for comp in nx.strongly_connected_components(graph) if len(comp) >= 2]


def _cycle(comp: Set[str], deps_of: dict[str, Sequence[str]]) -> list[str]:
    """A shortest cycle through the least id of ``comp``, found by BFS in sorted order.

    It depends on the graph alone, not on the order of the input. The cycle is
    returned open: ``[a, b, c]`` stands for ``a -> b -> c -> a``.
    """
    start = min(comp)
    parent: dict[str, str] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for dep in sorted(set(deps_of[node])):
            if dep == start and node != start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                path.reverse()
                return path
            if dep in comp and dep not in parent:
                parent[dep] = node
                queue.append(dep)
    raise AssertionError(f"no cycle through {start!r} in a strongly connected component")


def _cycle_text(names: list[str], at: int) -> str:
    """The cycle of (shown) ``names`` read from position ``at``, cut short after ``_SHOWN``."""
    length = len(names)
    if length <= _SHOWN:
        return " -> ".join([*names[at:], *names[:at], names[at]])
    shown = names[at : at + _SHOWN]
    shown += names[: _SHOWN - len(shown)]
    return " -> ".join(shown) + f" -> ... ({length} tasks)"


def check(tasks: Iterable[Task]) -> list[Problem]:
    """Report every invariant a snapshot of tasks violates (SPEC section 4).

    The ten codes of :class:`~taskboard.Code`: an empty id; an id that occurs
    more than once; a state that is not one of the four; a dependency on no
    task in the snapshot; a task depending on itself; a task on a dependency
    cycle of two or more tasks (the text names a cycle, ``a -> b`` meaning
    ``a`` depends on ``b``); ``CLAIMED`` without an owner, a lease or a token;
    ``OPEN`` or ``FAILED`` with an owner or lease; ``DONE`` with an owner or
    lease; ``CLAIMED`` while a known dependency (itself included) is not
    ``DONE`` (with duplicate ids, a dependency is done only if every entry
    is). An expired lease is not a problem. Duplicate entries of an id are
    one task: one problem per (task, code), except one ``unknown_dep`` per
    missing id.

    Args:
        tasks: A snapshot, in any order, as ``Board.list_tasks()`` returns it.
            Fields may hold odd values (an unknown state, an empty id).

    Returns:
        The problems, sorted by ``(task, code, text)``; empty for a healthy snapshot.

    Raises:
        TypeError: ``tasks`` is a str, a single Task or not iterable, or an item
            is garbage: not a Task, or an id, dependency, owner or lease token
            that is not a str, deps that are not a tuple or list, or a lease
            that is neither None nor a Lease. The message names the item by
            index and repr.
    """
    with _collector_paused():
        return _check(tasks)


@contextmanager
def _collector_paused() -> Iterator[None]:
    # check() allocates a few objects per task and frees none until it returns; on 100,000
    # tasks the cyclic collector would rescan them again and again (a third of the time).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _check(tasks: Iterable[Task]) -> list[Problem]:
    snapshot, counts = _read(tasks)
    indegree = dict.fromkeys(counts, 0)  # edges into each id, from other ids
    found: dict[Code, dict[str, str]] = {code: {} for code in Code}  # code -> task -> text
    missing: set[tuple[str, str]] = set()
    not_done: set[str] = set()  # ids with an entry that is not DONE (unknown states included)
    claimed: list[Task] = []
    # Every id's dependencies; a duplicated id gets the union of its entries' (one graph node).
    deps_of: dict[str, Sequence[str]] = {}

    def report(task_id: str, code: Code, text: str) -> None:
        # Duplicate entries of one id may each offend: keep one text, order-independently.
        old = found[code].get(task_id)
        if old is None or text < old:
            found[code][task_id] = text

    for task in snapshot:
        tid, deps, owner, lease = task.id, task.deps, task.owner, task.lease
        earlier = deps_of.get(tid)
        deps_of[tid] = deps if earlier is None else (*earlier, *deps)
        for dep in deps:
            if dep not in indegree:
                missing.add((tid, dep))
            elif dep != tid:
                indegree[dep] += 1
            else:
                report(tid, Code.SELF_DEP, "depends on itself")
        state = _state(task.state)
        if state is not State.DONE:
            not_done.add(tid)
        if state is None:
            report(
                tid, Code.UNKNOWN_STATE, f"state {_show(task.state)} is not one of {_STATES_TEXT}"
            )
        elif state is State.CLAIMED:
            claimed.append(task)
            lacks = [] if owner else ["owner"]
            if lease is None:
                lacks.append("lease")
            elif not lease.token:
                lacks.append("lease token")
            if lacks:
                report(tid, Code.CLAIMED_WITHOUT_LEASE, f"claimed without {' or '.join(lacks)}")
        elif owner or lease is not None:
            held = [f"owner {_show(owner)}"] if owner else []
            if lease is not None:
                held.append("a lease")
            if state is State.DONE:
                report(tid, Code.TERMINAL_CLAIMED, f"done but still has {' and '.join(held)}")
            else:
                report(tid, Code.LEASE_WITHOUT_CLAIM, f"{state.value} but has {' and '.join(held)}")

    for task in claimed:
        blocking = sorted({dep for dep in task.deps if dep in not_done})
        if blocking:
            listed = ", ".join(_name(dep) for dep in blocking[:_SHOWN])
            if len(blocking) > _SHOWN:
                listed += f", ... ({len(blocking)} in all)"
            which = "dependency" if len(blocking) == 1 else "dependencies"
            report(task.id, Code.BLOCKED_CLAIM, f"claimed while {which} not done: {listed}")

    for tid, count in counts.items():
        if tid == "":
            report(tid, Code.EMPTY_ID, "id is empty")
        if count > 1:
            report(tid, Code.DUPLICATE_ID, f"id occurs {count} times")

    for comp in _cyclic(deps_of, indegree):
        cycle = _cycle(comp, deps_of)
        names = [_name(node) for node in cycle]
        group = (
            f"on a dependency cycle: its group of {len(comp)} mutually dependent tasks"
            f" includes {_cycle_text(names, 0)}"
        )
        at = {node: index for index, node in enumerate(cycle)}
        cyclic = found[Code.DEP_CYCLE]
        for node in comp:
            index = at.get(node)
            # Components are disjoint and nothing else reports dep_cycle: no need for report().
            cyclic[node] = (
                group if index is None else f"on a dependency cycle: {_cycle_text(names, index)}"
            )

    problems = [
        Problem(tid, code, text) for code, texts in found.items() for tid, text in texts.items()
    ]
    problems.extend(
        Problem(tid, Code.UNKNOWN_DEP, f"depends on unknown task {_show(dep)}")
        for tid, dep in missing
    )
    problems.sort(key=attrgetter("task", "code", "text"))
    return problems
