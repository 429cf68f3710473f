"""``check()``: the snapshot invariants of SPEC section 4.

``check()`` leaves the process-wide garbage collector alone. It stays fast on
large snapshots by doing per-task work in C where it can (``map``, ``Counter``,
set operations), keeping few objects the collector has to scan (the graph is
flat lists of ints, texts are built as strings, each Problem once, in place of
a row tuple, and the big lists are let go before the many Problems of a large
cycle set the collector off) and finding cycles in linear time without a graph
library, each text read off a neighbour's where it can.
"""

from __future__ import annotations

import reprlib
from bisect import bisect_left
from collections import Counter, deque
from collections.abc import Iterable, Sequence, Set
from itertools import accumulate, chain, compress, count, islice, pairwise, repeat
from operator import attrgetter, contains, eq, is_not
from typing import cast

from taskboard._contract import Code, Lease, Problem, State, Task

__all__ = ["check"]

_SHOWN = 8  # names a text lists before it is cut short, so texts stay bounded
# A strongly connected component with at most this many tasks plus edges gets a shortest
# cycle through each task (one BFS per task, so at most this many steps each); a larger one
# gets the cycles that the one depth-first search finds for all tasks (see ``_cycles``).
_BFS_LIMIT = 64

_STATES: dict[str, State] = {s.value: s for s in State}
_STATES_TEXT = ", ".join(_STATES)

_repr = reprlib.Repr()
_repr.maxstring = 60
_repr.maxother = 160
_repr.maxlist = _repr.maxtuple = _SHOWN

_ID = attrgetter("id")
_DEPS = attrgetter("deps")
_STATE = attrgetter("state")
_OWNER = attrgetter("owner")
_LEASE = attrgetter("lease")
_TOKEN = attrgetter("token")

_TASK = attrgetter("task")
_CODE_TEXT = attrgetter("code", "text")
_CYCLE_TEXT = "on a dependency cycle: "


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


def _plain(snapshot: list[Task], ids: list[str], deps: list[Sequence[str]]) -> bool:
    """True if every item is a Task whose fields have exactly the types ``_fault`` wants.

    The common case, checked column by column in C; False sends the caller to
    ``_fault`` item by item (subclasses of those types are fine, just slower).
    Every item is a plain Task already; ``ids`` and ``deps`` are its columns,
    which the caller keeps.
    """
    leases = [lease for lease in map(_LEASE, snapshot) if lease is not None]
    return not (
        set(map(type, ids)) - {str}
        or set(map(type, deps)) - {tuple, list}
        or set(map(type, chain.from_iterable(deps))) - {str}
        or set(map(type, map(_OWNER, snapshot))) - {str}
        or set(map(type, leases)) - {Lease}
        or set(map(type, map(_TOKEN, leases))) - {str}
    )


def _read(tasks: object) -> tuple[list[Task], list[str], list[Sequence[str]]]:
    """The tasks as a list, with their ids and deps; TypeError names the first garbage item."""
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
    snapshot = cast("list[Task]", list(items))
    if not set(map(type, snapshot)) - {Task}:
        ids: list[str] = list(map(_ID, snapshot))
        deps: list[Sequence[str]] = list(map(_DEPS, snapshot))
        if _plain(snapshot, ids, deps):
            return snapshot, ids, deps
    for index, item in enumerate(snapshot):
        fault = _fault(item)
        if fault is not None:
            raise TypeError(f"check(): tasks[{index}] {fault}; the item: {_show(item)}")
    return snapshot, list(map(_ID, snapshot)), list(map(_DEPS, snapshot))


def _state(value: object) -> State | None:
    """The State a stored value stands for (a known plain string counts), or None if unknown."""
    return _STATES.get(value) if isinstance(value, str) else None


# --- cycles ------------------------------------------------------------------------------------
#
# A cycle is listed open and read from the task it is for: [a, b, c] stands for
# a -> b -> c -> a, where a depends on b. Where it may be long, only its first _SHOWN
# tasks and its length are kept.


def _cycle_words(first: Sequence[str], length: int) -> str:
    """The first names of a cycle of ``length`` tasks, as a text cut short after ``_SHOWN``."""
    if length <= _SHOWN:
        return " -> ".join([*first, first[0]])
    return " -> ".join(first[:_SHOWN]) + f" -> ... ({length} tasks)"


def _ring_texts(ring: list[str]) -> list[str]:
    """The dep_cycle text of each task of a simple cycle: the cycle read from that task."""
    length = len(ring)
    names = list(map(_name, ring))
    if length <= _SHOWN:
        return [
            _CYCLE_TEXT + " -> ".join([*names[at:], *names[:at], names[at]]) for at in range(length)
        ]
    tail = f" -> ... ({length} tasks)"
    names += names[: _SHOWN - 1]
    return [_CYCLE_TEXT + " -> ".join(names[at : at + _SHOWN]) + tail for at in range(length)]


def _shortest_cycle(start: int, succ: dict[int, list[int]]) -> list[int]:
    """A shortest cycle through ``start``: BFS over ``succ`` (sorted, without self loops)."""
    parent = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for dep in succ[node]:
            if dep == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                path.reverse()
                return path
            if dep not in parent:
                parent[dep] = node
                queue.append(dep)
    raise AssertionError(f"no cycle through {start} in a strongly connected component")


def _cycles(
    starts: Sequence[int],
    targets: Sequence[int],
    names: Sequence[str],
    limit: int = _SHOWN,
) -> tuple[list[int], list[int], list[str | None]]:
    """The strongly connected components, and a cycle through each of their tasks, fast.

    Tasks are ``0 .. len(starts) - 2``; task ``v`` depends on
    ``targets[starts[v] : starts[v + 1]]`` (repeats and self loops are harmless).
    One depth-first search (iterative) finds the components (Tarjan) and each
    task's lowpoint: the least preorder number that an edge out of its subtree
    reaches inside its component, through a *witness* edge ``w -> x``. For a
    task ``v`` that is not the first of its component to be visited, ``x`` lies
    earlier than ``v``, and ``v``'s cycle goes down the tree from ``v`` to ``w``
    and jumps to ``x``; while ``x`` is not an ancestor of ``v`` it goes on from
    ``x`` the same way (down to ``x``'s witness, and jump); from the first
    ancestor it reaches it goes down the tree back to ``v``. Each jump lands
    earlier in preorder, and no leg enters the subtree of an earlier one (that
    would give its start a lower lowpoint), so the cycle is simple. The first
    task of a component takes the way of its first child there, which ends with
    the jump back to it. The legs passed are summed with a union-find over
    finished tasks (path compression), and only the first ``limit`` tasks of a
    cycle are listed, so the whole is near-linear however long the cycles are.

    A task whose way starts with a child ``c`` (down the tree, or the first
    child of a component) has ``c``'s cycle, rotated: the same tasks after the
    first step, ``c``'s ending on the task itself, as the descent back to ``c``
    passes its parent. So its list is its own name, then ``c``'s list less the
    last name, built from ``c``'s text; only the tasks that are their own
    witness walk their way.

    Returns:
        The components of two or more tasks, one after another in ``members``,
        the ``k``-th being ``members[bounds[k] : bounds[k + 1]]``; and for each
        task on one, its cycle read from it as text: the ``names`` of its first
        ``limit`` tasks joined by ``" -> "``, then the first name again if that
        was all of them, else ``" -> ... (N tasks)"`` (None for other tasks).
    """
    # What the search keeps per task is kept by place in preorder (the preorder number), not by
    # task, but for ``order`` itself and ``out``: the tasks a step touches (parent, child, path)
    # then lie near each other in memory, which on a large graph of scattered tasks matters as
    # much as the steps themselves. A lowpoint is a place, so it also names the task that the
    # witness edge lands on.
    size = len(starts) - 1
    order = [-1] * size  # by task: its place; -1 until visited, ``size`` once its component is done
    task = [0] * size  # the task at the place
    named = [""] * size  # its name
    low = [0] * size  # the lowpoint
    down = [-1] * size  # the child toward the witness, or -1: the task is the witness
    leg = [0] * size  # tasks on the leg from the task down to its witness
    link = [0] * size  # union-find over finished tasks: a later leg's start ...
    summed = [0] * size  # ... and the tasks on the legs before it
    lengths = [0] * size  # the length of the task's cycle
    depth = [-1] * size  # position on ``path`` while on it, else -1
    child_in = [-1] * size  # the first child to finish inside the same component
    texts = [""] * size  # the text of its cycle
    stack: list[int] = []  # Tarjan's, by place: increasing, so a component is found by bisection
    members: list[int] = []
    bounds = [0]
    out: list[str | None] = [None] * size
    # A list of one name has no cut before its last, and a name holding " -> " itself would
    # make that cut ambiguous: then every task walks its way.
    rotate = limit > 1 and not any(map(contains, names, repeat(" -> ")))
    tails: dict[int, str] = {}  # " -> ... (N tasks)" by N: many cycles share a length
    # What is left to do, last first: a dependency to look at, or -1 to finish the task on
    # top of ``path``. A task's dependencies go on at once (in C, from the edges reversed),
    # so that they are looked at in order.
    backward = targets[::-1]
    total = len(targets)
    work: list[int] = []
    count = 0
    for root in range(size):
        if order[root] >= 0:
            continue
        work.append(root)
        path: list[int] = []
        node = top = -1
        while work:
            dep = work.pop()
            if dep >= 0:
                seen = order[dep]
                if seen < 0:
                    order[dep] = low[count] = node = count
                    task[count] = dep
                    named[count] = names[dep]
                    top += 1
                    depth[count] = top
                    path.append(count)
                    stack.append(count)
                    count += 1
                    work.append(-1)
                    work += backward[total - starts[dep + 1] : total - starts[dep]]
                elif seen < low[node]:  # (never so for a task of a component done before)
                    low[node] = seen
                    down[node] = -1
                continue
            lowest = low[node]
            child = down[node]
            if lowest < node:  # not the first of its component: it has a way
                steps = leg[node] = 1 if child < 0 else leg[child] + 1
                land = lowest
                above = depth[land]
                between = 0
                if above < 0:  # a finished task: on through the links to an ancestor
                    trail = []
                    while above < 0:
                        trail.append(land)
                        land = link[land]
                        above = depth[land]
                    for passed in reversed(trail):  # compress: each points at ``land`` now
                        between += summed[passed]
                        summed[passed] = between
                        link[passed] = land
                lengths[node] = length = steps + between + top - above
                link[node] = lowest
                summed[node] = steps
                parent = path[-2]
                if child_in[parent] < 0:
                    child_in[parent] = node
            else:  # the first task of its component: pop the component off
                mark = bisect_left(stack, node)
                if mark < len(stack) - 1:
                    members += map(task.__getitem__, stack[mark:])
                    bounds.append(len(members))
                for done in stack[mark:]:
                    order[task[done]] = size
                del stack[mark:]
                child = child_in[node]  # its way is that child's, which ends with the jump back
                if child >= 0:
                    lengths[node] = length = lengths[child]
            if child >= 0 or lowest < node:  # on a cycle
                if length <= limit:  # listed whole: it ends on the task's own name
                    tail = ""
                elif length in tails:
                    tail = tails[length]
                else:
                    tail = tails[length] = f" -> ... ({length} tasks)"
                if child >= 0 and rotate:  # the child's cycle, rotated: cut its last name
                    text = texts[child]
                    if tail:
                        cut = text.rfind(" -> ", 0, len(text) - len(tail))
                        text = f"{named[node]} -> {text[:cut]}{tail}"
                    else:  # (the child's last name is this task's, so it closes the cycle)
                        text = f"{named[node]} -> {text[: text.rfind(' -> ')]}"
                else:  # list it: down each leg and jump, until back on ``path``
                    first = [node] if child >= 0 else []
                    at = child if child >= 0 else node
                    while len(first) < limit:
                        first.append(at)
                        step = down[at]
                        if step >= 0:
                            at = step
                            continue
                        step = low[at]
                        above = depth[step]
                        if above >= 0:  # an ancestor: down the tree back to ``node``
                            first += path[above : min(top, above + limit - len(first))]
                            break
                        at = step
                    text = " -> ".join(map(named.__getitem__, first))
                    text += tail or f" -> {named[node]}"
                texts[node] = out[task[node]] = text
            depth[node] = -1
            path.pop()
            top -= 1
            if top >= 0:
                parent = path[-1]
                if lowest < low[parent]:
                    low[parent] = lowest
                    down[parent] = node
                node = parent
    return members, bounds, out


def _cycle_problems(deps_of: dict[str, Sequence[str]], rest: Set[str]) -> list[Problem]:
    """One dep_cycle problem per task on a cycle, naming a cycle through that very task.

    ``rest`` holds every task a topological peel could not remove: the tasks on
    cycles and those downstream of one. Every known dependency of such a task
    is in ``rest`` too. The texts depend on the graph alone, not on input order.
    """
    # Fast path: every task left has exactly one dependency left (and so, as each has one
    # left that depends on it, exactly one of those too): what is left is simple cycles,
    # and the cycle through each task is its ring read from it.
    next_of: dict[str, str] = {}
    for node in rest:
        deps: Iterable[str] = deps_of[node]
        if len(deps_of[node]) != 1:
            deps = {dep for dep in deps if dep in rest and dep != node}
            if len(deps) != 1:
                break
        dep = next(iter(deps))
        if dep not in rest or dep == node:
            break
        next_of[node] = dep
    else:
        problems: list[Problem] = []
        while next_of:
            node, dep = next_of.popitem()
            ring = [node]
            while dep != node:
                ring.append(dep)
                dep = next_of.pop(dep)
            problems += map(Problem, ring, repeat(Code.DEP_CYCLE), _ring_texts(ring))
        return problems

    # The general case: number the tasks in id order, so that the search, and so the cycles
    # named, depend on the graph alone; list each task's dependencies in that order too.
    nodes = sorted(rest)
    number = {node: at for at, node in enumerate(nodes)}
    listed = list(map(deps_of.__getitem__, nodes))
    starts = [0, *accumulate(map(len, listed))]
    try:
        targets = list(map(number.__getitem__, chain.from_iterable(listed)))
    except KeyError:  # some unknown dependency: leave those out
        listed = [[dep for dep in deps if dep in number] for deps in listed]
        starts = [0, *accumulate(map(len, listed))]
        targets = list(map(number.__getitem__, chain.from_iterable(listed)))
    for lower, upper in pairwise(starts):
        if upper - lower > 1:
            targets[lower:upper] = sorted(targets[lower:upper])
    names = list(map(_name, nodes))

    members, bounds, texts = _cycles(starts, targets, names)
    for lower, upper in pairwise(bounds):
        if upper - lower < _BFS_LIMIT:  # a small one: a shortest cycle through each task
            inside = set(members[lower:upper])
            edges = {
                task: sorted(inside.intersection(targets[starts[task] : starts[task + 1]]) - {task})
                for task in inside
            }
            if len(inside) + sum(map(len, edges.values())) <= _BFS_LIMIT:
                for task in inside:
                    cycle = _shortest_cycle(task, edges)
                    texts[task] = _cycle_words([names[step] for step in cycle], len(cycle))
    # Let go of the graph before making one Problem per task: the collector, which those set
    # off, would scan every list still held, item by item.
    del number, listed, starts, targets, names, members
    return [  # in id order
        Problem(task, Code.DEP_CYCLE, _CYCLE_TEXT + text)
        for task, text in zip(nodes, texts, strict=True)
        if text is not None
    ]


def _sort(problems: list[Problem]) -> None:
    """Sort ``problems`` by ``(task, code, text)`` in place, without building a key per item."""
    problems.sort(key=_TASK)
    tasks = list(map(_TASK, problems))
    # Each run of problems of one task gets sorted by (code, text); the runs are found in C
    # (where a task equals the one before), as most tasks have a single problem.
    lower = upper = 0
    for at in compress(count(1), map(eq, tasks, islice(tasks, 1, None))):
        if at != upper:
            problems[lower:upper] = sorted(problems[lower:upper], key=_CODE_TEXT)
            lower = at - 1
        upper = at + 1
    problems[lower:upper] = sorted(problems[lower:upper], key=_CODE_TEXT)


# --- check -------------------------------------------------------------------------------------


def check(tasks: Iterable[Task]) -> list[Problem]:
    """Report every invariant a snapshot of tasks violates (SPEC section 4).

    The ten codes of :class:`~taskboard.Code`: an empty id; an id that occurs
    more than once; a state that is not one of the four; a dependency on no
    task in the snapshot (the text names it by its full repr, so two of one
    task always differ); a task depending on itself; a task on a dependency
    cycle of two or more tasks (the text names a cycle through that task, read
    from it, ``a -> b`` meaning ``a`` depends on ``b``; a shortest one where its
    component is small, and after eight names only the length of a long one);
    ``CLAIMED`` without an owner, a lease or a token; ``OPEN`` or ``FAILED``
    with an owner or lease; ``DONE`` with an owner or lease; ``CLAIMED`` while
    a known dependency (itself included) is not ``DONE`` (with duplicate ids, a
    dependency is done only if every entry is). An expired lease is not a
    problem. Duplicate entries of an id are one task: one problem per (task,
    code), except one ``unknown_dep`` per missing id.

    It never touches the garbage collector's settings, and it runs in time
    near-linear in the size of the snapshot, whatever the graph's shape.

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
    snapshot, ids, deps_list = _read(tasks)
    problems: list[Problem] = []
    found: dict[Code, dict[str, str]] = {}  # code -> task -> text, where entries may differ

    def report(task_id: str, code: Code, text: str) -> None:
        # Duplicate entries of one id may each offend: keep one text, order-independently.
        texts = found.setdefault(code, {})
        old = texts.get(task_id)
        if old is None or text < old:
            texts[task_id] = text

    # Ids. Every id's dependencies; a duplicated id gets the union of its entries' (one node).
    deps_of: dict[str, Sequence[str]] = dict(zip(ids, deps_list, strict=True))
    known = deps_of.keys()
    if len(known) < len(ids):
        merged: dict[str, list[str]] = {}
        for tid, count in Counter(ids).items():
            if count > 1:
                problems.append(Problem(tid, Code.DUPLICATE_ID, f"id occurs {count} times"))
                merged[tid] = []
        for tid, deps in zip(ids, deps_list, strict=True):
            if tid in merged:
                merged[tid] += deps
        deps_of.update(merged)
    if "" in known:
        problems.append(Problem("", Code.EMPTY_ID, "id is empty"))

    # Dependencies: unknown ones, self loops, and how many edges lead into each known id.
    indegree = Counter(chain.from_iterable(deps_of.values()))
    missing = indegree.keys() - known
    if missing:
        for tid, deps in deps_of.items():
            if not missing.isdisjoint(deps):
                # The full repr, never cut short: two unknown ids of one task always differ.
                problems += [
                    Problem(tid, Code.UNKNOWN_DEP, f"depends on unknown task {str.__repr__(dep)}")
                    for dep in missing.intersection(deps)
                ]
        for dep in missing:
            del indegree[dep]
    for tid, deps in compress(deps_of.items(), map(contains, deps_of.values(), deps_of)):
        report(tid, Code.SELF_DEP, "depends on itself")
        left = indegree[tid] - deps.count(tid)
        if left:
            indegree[tid] = left
        else:
            del indegree[tid]

    # States and holders.
    states = list(map(_STATE, snapshot))
    if set(map(type, states)) - {State}:
        for tid, value in zip(ids, states, strict=True):
            if _state(value) is None:
                report(
                    tid, Code.UNKNOWN_STATE, f"state {_show(value)} is not one of {_STATES_TEXT}"
                )
        states = [value if type(value) is State else _state(value) for value in states]
    watched: list[int] = []
    if (
        State.CLAIMED in states
        or any(map(_OWNER, snapshot))
        or any(map(is_not, map(_LEASE, snapshot), repeat(None)))
    ):
        watched = [
            index
            for index, (state, owner, lease) in enumerate(
                zip(states, map(_OWNER, snapshot), map(_LEASE, snapshot), strict=True)
            )
            if state is State.CLAIMED or owner or lease is not None
        ]
    not_done: set[str] = set()  # ids with an entry that is not DONE (unknown states included)
    if watched:
        not_done = {tid for tid, state in zip(ids, states, strict=True) if state is not State.DONE}
    for index in watched:
        task, state = snapshot[index], states[index]
        tid, owner, lease = task.id, task.owner, task.lease
        if state is State.CLAIMED:
            lacks = [] if owner else ["owner"]
            if lease is None:
                lacks.append("lease")
            elif not lease.token:
                lacks.append("lease token")
            if lacks:
                report(tid, Code.CLAIMED_WITHOUT_LEASE, f"claimed without {' or '.join(lacks)}")
            blocking = sorted({dep for dep in task.deps if dep in not_done})
            if blocking:
                listed = ", ".join(_name(dep) for dep in blocking[:_SHOWN])
                if len(blocking) > _SHOWN:
                    listed += f", ... ({len(blocking)} in all)"
                which = "dependency" if len(blocking) == 1 else "dependencies"
                report(tid, Code.BLOCKED_CLAIM, f"claimed while {which} not done: {listed}")
        elif state is not None:
            held = [f"owner {_show(owner)}"] if owner else []
            if lease is not None:
                held.append("a lease")
            if state is State.DONE:
                report(tid, Code.TERMINAL_CLAIMED, f"done but still has {' and '.join(held)}")
            else:
                report(tid, Code.LEASE_WITHOUT_CLAIM, f"{state.value} but has {' and '.join(held)}")

    # Cycles. Peel off every task no cycle reaches (Kahn's algorithm on in-degrees, with a
    # task leaving ``indegree`` when nothing left depends on it); what stays goes on.
    sources = list(known - indegree.keys())
    # Let go of the columns before the cycles: the many Problems made there set off the
    # collector, which would scan every list still held, item by item.
    del snapshot, ids, deps_list, states, watched, not_done
    while sources:
        for dep in deps_of[sources.pop()]:
            dependents = indegree.get(dep)
            if dependents is None:  # not a known id other than the task itself still in the graph
                continue
            if dependents > 1:
                indegree[dep] = dependents - 1
            else:
                indegree.pop(dep)  # (dict's own: Counter's ``del`` is Python code)
                sources.append(dep)
    if indegree:
        problems += _cycle_problems(deps_of, indegree.keys())

    for code, texts in found.items():
        problems += [Problem(tid, code, text) for tid, text in texts.items()]
    _sort(problems)
    return problems
