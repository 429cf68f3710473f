"""Tests for ``taskboard.check``: the snapshot invariants of SPEC section 4."""

from __future__ import annotations

import gc
import itertools
import random
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskboard import Code, Lease, Problem, State, Task, _check, check

LEASE = Lease(token="tok", fence=1)
PAST = datetime(2000, 1, 1, tzinfo=UTC)


def claimed(task_id: str, *deps: str) -> Task:
    """A well-formed claimed task."""
    return Task(task_id, deps=deps, state=State.CLAIMED, owner="agent", lease=LEASE)


def done(task_id: str, *deps: str) -> Task:
    """A well-formed done task."""
    return Task(task_id, deps=deps, state=State.DONE)


def codes(tasks: Any) -> list[tuple[str, Code]]:
    """The (task, code) pairs check() reports, in its order."""
    return [(p.task, p.code) for p in check(tasks)]


# --- the clean cases -------------------------------------------------------------------------


def test_empty_snapshot_is_clean() -> None:
    """An empty snapshot has no problems."""
    assert check([]) == []


def test_healthy_snapshot_with_every_state_is_clean() -> None:
    """A consistent snapshot holding all four states, with satisfied deps, has no problems."""
    tasks = [
        done("d"),
        claimed("c", "d"),
        Task("o", deps=("c", "d")),
        Task("f", deps=("d",), state=State.FAILED),
        Task("title", title="anything goes", seq=7),
    ]
    assert check(tasks) == []


def test_expired_lease_is_not_a_problem() -> None:
    """A claimed task whose lease expired long ago is still consistent (it awaits takeover)."""
    stale = Lease(token="tok", fence=3, until=PAST)
    assert check([Task("a", state=State.CLAIMED, owner="w", lease=stale)]) == []


def test_any_iterable_is_accepted() -> None:
    """A generator or tuple of tasks is read like a list."""
    tasks = (Task("a"), Task("a"))
    assert check(t for t in tasks) == check(tasks) == check(list(tasks))


# --- one test per code: positive, then a near miss ---------------------------------------------


def test_empty_id() -> None:
    """An empty id is empty_id."""
    assert check([Task("")]) == [Problem("", Code.EMPTY_ID, "id is empty")]


def test_blank_but_nonempty_id_is_not_empty_id() -> None:
    """An id of one space is odd but not empty."""
    assert check([Task(" ")]) == []


def test_duplicate_id_once_per_id() -> None:
    """An id occurring three times is one duplicate_id problem that gives the count."""
    assert check([Task("a"), Task("a"), Task("a"), Task("b")]) == [
        Problem("a", Code.DUPLICATE_ID, "id occurs 3 times")
    ]


def test_ids_differing_in_case_are_not_duplicates() -> None:
    """Ids are compared exactly: "a" and "A" are two tasks."""
    assert check([Task("a"), Task("A")]) == []


@pytest.mark.parametrize("state", ["opened", "OPEN", "", None, 3, [1], {"x": 1}, object()])
def test_unknown_state(state: object) -> None:
    """A state outside the four, hashable or not, is unknown_state (never a crash)."""
    assert codes([Task("a", state=state)]) == [("a", Code.UNKNOWN_STATE)]  # type: ignore[arg-type]


@pytest.mark.parametrize("state", ["open", "claimed", "done", "failed"])
def test_plain_string_state_is_known(state: str) -> None:
    """A plain string naming a state counts as that state (State is a StrEnum)."""
    task = Task("a", state=state, owner="w", lease=LEASE)  # type: ignore[arg-type]
    expected = {
        "open": [("a", Code.LEASE_WITHOUT_CLAIM)],
        "claimed": [],
        "done": [("a", Code.TERMINAL_CLAIMED)],
        "failed": [("a", Code.LEASE_WITHOUT_CLAIM)],
    }
    assert codes([task]) == expected[state]


def test_unknown_dep_once_per_missing_id() -> None:
    """Each missing dependency id is its own unknown_dep problem, repeats counted once."""
    assert check([Task("a", deps=("y", "x", "y"))]) == [
        Problem("a", Code.UNKNOWN_DEP, "depends on unknown task 'x'"),
        Problem("a", Code.UNKNOWN_DEP, "depends on unknown task 'y'"),
    ]


def test_unknown_deps_of_one_task_have_distinct_texts_naming_each_id() -> None:
    """Each unknown dependency of a task gets its own text, naming its id in full (repr)."""
    odd = ["", " ", "\n", "x" * 100 + "a", "x" * 100 + "b", "a'b", "ünï", "t\x00"]
    problems = check([Task("t", deps=tuple(odd)), Task("x")])
    assert [p.code for p in problems] == [Code.UNKNOWN_DEP] * len(odd)
    texts = [p.text for p in problems]
    assert len(set(texts)) == len(odd)
    assert sorted(texts) == sorted(f"depends on unknown task {dep!r}" for dep in odd)


def test_known_dep_is_not_unknown() -> None:
    """A dependency on a task in the snapshot, in any order, is not unknown_dep."""
    assert check([Task("a", deps=("b",)), Task("b")]) == []


def test_self_dep_is_not_a_cycle() -> None:
    """A task depending on itself is self_dep, not dep_cycle."""
    assert check([Task("a", deps=("a", "a"))]) == [Problem("a", Code.SELF_DEP, "depends on itself")]


def test_dep_on_other_task_is_not_self_dep() -> None:
    """A dependency on another task is not self_dep."""
    assert check([Task("a", deps=("b",)), Task("b")]) == []


def test_dep_cycle_names_the_cycle_from_each_task() -> None:
    """Every task on a cycle is dep_cycle, and its text walks the cycle starting from it."""
    tasks = [Task("a", deps=("b",)), Task("b", deps=("c",)), Task("c", deps=("a",))]
    assert check(tasks) == [
        Problem("a", Code.DEP_CYCLE, "on a dependency cycle: a -> b -> c -> a"),
        Problem("b", Code.DEP_CYCLE, "on a dependency cycle: b -> c -> a -> b"),
        Problem("c", Code.DEP_CYCLE, "on a dependency cycle: c -> a -> b -> c"),
    ]


def test_diamond_is_not_a_cycle() -> None:
    """Two paths to the same dependency (a diamond) are no cycle."""
    tasks = [Task("a", deps=("b", "c")), Task("b", deps=("d",)), Task("c", deps=("d",)), Task("d")]
    assert check(tasks) == []


def test_task_depending_on_a_cycle_is_not_on_it() -> None:
    """A task that merely depends on a cycle, or is depended on by one, is not dep_cycle."""
    tasks = [Task("a", deps=("b", "z")), Task("b", deps=("a",)), Task("up", deps=("a",)), Task("z")]
    assert codes(tasks) == [("a", Code.DEP_CYCLE), ("b", Code.DEP_CYCLE)]


def test_dep_cycle_names_a_cycle_through_each_task_of_the_component() -> None:
    """A task of a cyclic component off another task's cycle names a cycle through itself."""
    tasks = [Task("a", deps=("b",)), Task("b", deps=("a", "c")), Task("c", deps=("b",))]
    by_task = {p.task: p.text for p in check(tasks)}
    assert by_task == {
        "a": "on a dependency cycle: a -> b -> a",
        "b": "on a dependency cycle: b -> a -> b",
        "c": "on a dependency cycle: c -> b -> c",
    }


def test_long_cycle_text_is_cut_short() -> None:
    """A long cycle's text lists eight names from the task, then the cycle's length."""
    n = 20
    problems = check([Task(f"t{i:02}", deps=(f"t{(i + 1) % n:02}",)) for i in range(n)])
    assert len(problems) == n
    assert problems[5].text == (
        "on a dependency cycle: t05 -> t06 -> t07 -> t08 -> t09 -> t10 -> t11 -> t12 -> ..."
        " (20 tasks)"
    )
    assert problems[15].text.startswith("on a dependency cycle: t15 -> ")
    assert " -> t19 -> t00 -> " in problems[15].text


def test_duplicate_ids_merge_their_deps_into_one_node() -> None:
    """The deps of every entry of a duplicated id count, so a cycle through either is found."""
    tasks = [Task("a"), Task("a", deps=("b",)), Task("b", deps=("a",))]
    assert codes(tasks) == [("a", Code.DEP_CYCLE), ("a", Code.DUPLICATE_ID), ("b", Code.DEP_CYCLE)]


@pytest.mark.parametrize(
    ("owner", "lease", "text"),
    [
        ("", LEASE, "claimed without owner"),
        ("w", None, "claimed without lease"),
        ("w", Lease(token="", fence=1), "claimed without lease token"),
        ("", None, "claimed without owner or lease"),
    ],
)
def test_claimed_without_lease(owner: str, lease: Lease | None, text: str) -> None:
    """CLAIMED with an empty owner, no lease or an empty token is claimed_without_lease."""
    task = Task("a", state=State.CLAIMED, owner=owner, lease=lease)
    assert check([task]) == [Problem("a", Code.CLAIMED_WITHOUT_LEASE, text)]


def test_claimed_with_owner_and_token_is_fine() -> None:
    """CLAIMED with an owner and a lease carrying a token is consistent."""
    assert check([claimed("a")]) == []


@pytest.mark.parametrize("state", [State.OPEN, State.FAILED])
@pytest.mark.parametrize(("owner", "lease"), [("w", None), ("", LEASE), ("w", LEASE)])
def test_lease_without_claim(state: State, owner: str, lease: Lease | None) -> None:
    """OPEN or FAILED with an owner or a lease is lease_without_claim."""
    assert codes([Task("a", state=state, owner=owner, lease=lease)]) == [
        ("a", Code.LEASE_WITHOUT_CLAIM)
    ]


@pytest.mark.parametrize("state", [State.OPEN, State.FAILED])
def test_unheld_open_or_failed_is_fine(state: State) -> None:
    """OPEN or FAILED with neither owner nor lease is consistent."""
    assert check([Task("a", state=state)]) == []


@pytest.mark.parametrize(("owner", "lease"), [("w", None), ("", LEASE), ("w", LEASE)])
def test_terminal_claimed(owner: str, lease: Lease | None) -> None:
    """DONE with an owner or a lease is terminal_claimed."""
    assert codes([Task("a", state=State.DONE, owner=owner, lease=lease)]) == [
        ("a", Code.TERMINAL_CLAIMED)
    ]


def test_done_without_holder_is_fine() -> None:
    """DONE with neither owner nor lease is consistent."""
    assert check([done("a")]) == []


def test_blocked_claim_names_the_unfinished_deps() -> None:
    """CLAIMED while known deps are not DONE is one blocked_claim naming them."""
    tasks = [claimed("a", "b", "c", "d"), Task("b"), Task("c", state=State.FAILED), done("d")]
    assert check(tasks) == [
        Problem("a", Code.BLOCKED_CLAIM, "claimed while dependencies not done: b, c")
    ]


def test_claimed_on_done_dep_is_not_blocked() -> None:
    """CLAIMED with every dependency DONE is not blocked."""
    assert check([claimed("a", "b"), done("b")]) == []


def test_claimed_on_unknown_dep_is_unknown_dep_only() -> None:
    """A missing dependency is unknown_dep, not also blocked_claim (only known deps block)."""
    assert codes([claimed("a", "ghost")]) == [("a", Code.UNKNOWN_DEP)]


def test_duplicated_dep_is_done_only_if_every_entry_is() -> None:
    """A dependency whose id has a DONE and an OPEN entry blocks a claim."""
    tasks = [claimed("a", "b"), done("b"), Task("b")]
    assert codes(tasks) == [("a", Code.BLOCKED_CLAIM), ("b", Code.DUPLICATE_ID)]


def test_dep_with_unknown_state_blocks() -> None:
    """A dependency in an unknown state is not DONE, so it blocks a claim."""
    tasks = [claimed("a", "b"), Task("b", state="finished")]  # type: ignore[arg-type]
    assert codes(tasks) == [("a", Code.BLOCKED_CLAIM), ("b", Code.UNKNOWN_STATE)]


# --- ordering --------------------------------------------------------------------------------


def test_problems_sorted_by_task_code_text() -> None:
    """Problems come sorted by (task, code, text) whatever the input order."""
    tasks = [
        Task("b", deps=("z", "y"), owner="w"),
        Task(""),
        Task("a", state="nope", deps=("a",)),  # type: ignore[arg-type]
        Task("b"),
    ]
    assert codes(tasks) == [
        ("", Code.EMPTY_ID),
        ("a", Code.SELF_DEP),
        ("a", Code.UNKNOWN_STATE),
        ("b", Code.DUPLICATE_ID),
        ("b", Code.LEASE_WITHOUT_CLAIM),
        ("b", Code.UNKNOWN_DEP),
        ("b", Code.UNKNOWN_DEP),
    ]
    assert [p.text for p in check(tasks)][-2:] == [
        "depends on unknown task 'y'",
        "depends on unknown task 'z'",
    ]


# --- the cycle each dep_cycle names ---------------------------------------------------------

CYCLE_TEXT = "on a dependency cycle: "


def named_cycle(text: str) -> tuple[list[str], int]:
    """The ids a dep_cycle text lists, from the task on, and the length it gives the cycle."""
    assert text.startswith(CYCLE_TEXT), text
    body = text.removeprefix(CYCLE_TEXT)
    head, cut, tail = body.partition(" -> ... (")
    if cut:
        assert tail.endswith(" tasks)"), text
        return head.split(" -> "), int(tail.removesuffix(" tasks)"))
    listed = body.split(" -> ")
    assert listed[-1] == listed[0], f"{text!r} does not close"
    return listed[:-1], len(listed) - 1


def named_cycles(tasks: list[Task]) -> dict[str, tuple[list[str], int]]:
    """Each dep_cycle task's named cycle, checked to be a real cycle of the graph through it.

    The ids listed must be distinct, each must depend on the next (and, when the
    whole cycle is listed, the last on the first), and a cut-short text must list
    eight of them; the length is returned for the caller to judge.
    """
    deps: dict[str, set[str]] = {}
    for task in tasks:
        deps.setdefault(task.id, set()).update(task.deps)
    named: dict[str, tuple[list[str], int]] = {}
    for problem in check(tasks):
        if problem.code != Code.DEP_CYCLE:
            continue
        listed, length = named_cycle(problem.text)
        assert listed[0] == problem.task, problem
        assert len(set(listed)) == len(listed), f"not a simple cycle: {problem}"
        assert 2 <= length <= len(deps), problem
        assert len(listed) == min(length, 8), problem
        hops = [*listed, listed[0]] if len(listed) == length else listed
        for task_id, dep in itertools.pairwise(hops):
            assert dep != task_id, problem
            assert dep in deps[task_id], f"no edge {task_id} -> {dep}: {problem}"
        named[problem.task] = (listed, length)
    return named


def on_cycles(tasks: list[Task]) -> set[str]:
    """The tasks in networkx's strongly connected components of two or more tasks."""
    digraph: nx.DiGraph[str] = nx.DiGraph()
    ids = {t.id for t in tasks}
    digraph.add_edges_from((t.id, d) for t in tasks for d in t.deps if d in ids and d != t.id)
    return {n for c in nx.strongly_connected_components(digraph) if len(c) > 1 for n in c}


def graph(**deps: str) -> list[Task]:
    """Tasks from ``id="dep dep ..."`` keywords."""
    return [Task(task_id, deps=tuple(listed.split())) for task_id, listed in deps.items()]


def chorded_cycle(n: int) -> list[Task]:
    """A cycle of n tasks where every third task also depends on the task five ahead."""
    return [
        Task(f"t{i}", deps=(f"t{(i + 1) % n}", *((f"t{(i + 5) % n}",) if i % 3 == 0 else ())))
        for i in range(n)
    ]


CYCLE_GRAPHS = {
    "bug report": graph(a="b", b="a c", c="b"),
    "figure eight": graph(hub="a1 b1", a1="a2", a2="hub", b1="b2", b2="hub"),
    "two cycles sharing two tasks": graph(s="p", p="x y", x="s", y="z", z="s"),
    "tail into a cycle, tail out of it": graph(
        t1="t2", t2="c1", c1="c2 o1", c2="c3", c3="c1", o1="o2", o2=""
    ),
    "self loops": graph(a="a b", b="a", solo="solo"),
    "complete graph": graph(a="b c d e", b="a c d e", c="a b d e", d="a b c e", e="a b c d"),
    "1000-task simple cycle": [Task(f"t{i}", deps=(f"t{(i + 1) % 1000}",)) for i in range(1000)],
    "300-task chorded cycle": chorded_cycle(300),
}

# Small components get a shortest cycle per task (BFS); a limit of 0 sends every component
# through the depth-first search that large ones take, so both ways are tested on each graph.
STRATEGIES = pytest.mark.parametrize(
    "bfs_limit", [_check._BFS_LIMIT, 0], ids=["shortest", "depth-first"]
)


@STRATEGIES
@pytest.mark.parametrize("name", CYCLE_GRAPHS)
def test_each_dep_cycle_names_a_real_cycle_through_its_task(
    name: str, bfs_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task on a cycle, and only those, names a simple cycle of the graph through it."""
    monkeypatch.setattr(_check, "_BFS_LIMIT", bfs_limit)
    tasks = CYCLE_GRAPHS[name]
    named = named_cycles(tasks)
    assert set(named) == on_cycles(tasks)
    assert check(reversed(tasks)) == check(tasks)


@STRATEGIES
def test_figure_eight_names_the_loop_each_task_is_on(
    bfs_limit: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a figure eight each task names its own loop; the shared task names one of the two."""
    monkeypatch.setattr(_check, "_BFS_LIMIT", bfs_limit)
    named = {task: cycle for task, (cycle, _) in named_cycles(CYCLE_GRAPHS["figure eight"]).items()}
    assert named["a1"] == ["a1", "a2", "hub"]
    assert named["b2"] == ["b2", "hub", "b1"]
    assert named["hub"] in (["hub", "a1", "a2"], ["hub", "b1", "b2"])


def test_tail_tasks_are_not_on_a_cycle() -> None:
    """Tasks on a tail into or out of a cycle are not dep_cycle; the cycle's tasks are."""
    tasks = CYCLE_GRAPHS["tail into a cycle, tail out of it"]
    assert codes(tasks) == [(task, Code.DEP_CYCLE) for task in ("c1", "c2", "c3")]


def test_self_loop_is_never_named_as_a_cycle() -> None:
    """A self loop is self_dep only; a task with one, on a cycle too, names the real cycle."""
    by_code = {(p.task, p.code): p.text for p in check(CYCLE_GRAPHS["self loops"])}
    assert by_code == {
        ("a", Code.DEP_CYCLE): "on a dependency cycle: a -> b -> a",
        ("a", Code.SELF_DEP): "depends on itself",
        ("b", Code.DEP_CYCLE): "on a dependency cycle: b -> a -> b",
        ("solo", Code.SELF_DEP): "depends on itself",
    }


def test_simple_cycle_names_itself_from_each_task() -> None:
    """Each task of a 1000-task cycle names that cycle read from it, cut short, with its length."""
    ring = [f"t{i}" for i in range(1000)]
    named = named_cycles(CYCLE_GRAPHS["1000-task simple cycle"])
    assert named == {ring[i]: ([ring[(i + k) % 1000] for k in range(8)], 1000) for i in range(1000)}


@given(st.data())
def test_small_component_names_a_shortest_cycle(data: st.DataObject) -> None:
    """In a small component each task names a real cycle through it, and a shortest one."""
    ids = [f"n{i}" for i in range(data.draw(st.integers(2, 8)))]
    tasks = [
        Task(task_id, deps=tuple(data.draw(st.lists(st.sampled_from(ids), max_size=3))))
        for task_id in ids
    ]
    named = named_cycles(tasks)
    assert set(named) == on_cycles(tasks)
    digraph: nx.DiGraph[str] = nx.DiGraph()
    digraph.add_edges_from((t.id, d) for t in tasks for d in t.deps if d != t.id)
    for task_id, (_, length) in named.items():
        back = [
            nx.shortest_path_length(digraph, dep, task_id)
            for dep in digraph.successors(task_id)
            if nx.has_path(digraph, dep, task_id)
        ]
        assert length == 1 + min(back)


@given(st.data())
def test_depth_first_cycles_are_real_cycles(data: st.DataObject) -> None:
    """The depth-first search names, for every task of every component, a whole simple cycle."""
    size = data.draw(st.integers(1, 40))
    succ = [
        data.draw(st.lists(st.integers(0, size - 1), max_size=4).map(sorted)) for _ in range(size)
    ]
    starts = [0, *itertools.accumulate(map(len, succ))]
    targets = list(itertools.chain.from_iterable(succ))
    members, bounds, texts = _check._cycles(starts, targets, [f"n{i}" for i in range(size)], size)
    digraph: nx.DiGraph[int] = nx.DiGraph()
    digraph.add_nodes_from(range(size))
    digraph.add_edges_from((v, d) for v, deps in enumerate(succ) for d in deps if d != v)
    components = [c for c in nx.strongly_connected_components(digraph) if len(c) > 1]
    found = [set(members[lo:hi]) for lo, hi in itertools.pairwise(bounds)]
    assert sorted(map(sorted, found)) == sorted(map(sorted, components))
    on_one = set().union(*components)
    for task, text in enumerate(texts):
        if task not in on_one:
            assert text is None
            continue
        assert text is not None
        listed = [int(name.removeprefix("n")) for name in text.split(" -> ")]
        assert listed[0] == listed[-1] == task
        assert len(set(listed[:-1])) == len(listed) - 1 >= 2
        assert all(digraph.has_edge(a, b) for a, b in itertools.pairwise(listed))


@pytest.mark.parametrize("n", [100, 1000])
def test_depth_first_cycles_of_a_long_chorded_cycle_are_whole_and_simple(n: int) -> None:
    """On long cycles with shortcuts, each task's cycle listed in full is a real simple cycle."""
    tasks = chorded_cycle(n)
    names = [t.id for t in tasks]
    number = {name: i for i, name in enumerate(names)}
    succ = [sorted(number[d] for d in t.deps) for t in tasks]
    starts = [0, *itertools.accumulate(map(len, succ))]
    targets = list(itertools.chain.from_iterable(succ))
    whole = _check._cycles(starts, targets, names, n)[2]
    cut = _check._cycles(starts, targets, names)[2]
    for task, text, short in zip(tasks, whole, cut, strict=True):
        assert text is not None
        listed = text.split(" -> ")
        assert listed[0] == listed[-1] == task.id
        assert len(set(listed[:-1])) == len(listed) - 1
        for name, dep in itertools.pairwise(listed):
            assert dep in tasks[number[name]].deps
        assert short == " -> ".join(listed[:8]) + f" -> ... ({len(listed) - 1} tasks)"


def cycles_both_ways(succ: list[list[int]], limit: int) -> None:
    """``_cycles`` names the same cycles whether it reads them off a child's text or walks.

    With plain names most tasks' texts are built from a child's; a name holding
    " -> " makes every task walk its way. With the names swapped back, the
    components and every text must be the same.
    """
    size = len(succ)
    starts = [0, *itertools.accumulate(map(len, succ))]
    targets = list(itertools.chain.from_iterable(succ))
    read = _check._cycles(starts, targets, [f"n{i}" for i in range(size)], limit)
    walked = _check._cycles(starts, targets, [f"[{i} -> ]" for i in range(size)], limit)
    assert read[:2] == walked[:2]
    assert read[2] == [
        None if text is None else re.sub(r"\[(\d+) -> \]", r"n\1", text) for text in walked[2]
    ]


@given(st.data())
def test_cycles_read_off_a_child_are_the_ones_walked(data: st.DataObject) -> None:
    """On any graph, a cycle read off a child's text is the one its way walks to."""
    size = data.draw(st.integers(1, 40))
    succ = [
        data.draw(st.lists(st.integers(0, size - 1), max_size=4).map(sorted)) for _ in range(size)
    ]
    cycles_both_ways(succ, data.draw(st.sampled_from([1, 2, 3, 8, size])))


@pytest.mark.parametrize(
    "limit",
    # Every cycle of a 3000-task chorded ring, read and walked: seconds, so a slow test.
    [2, 8, pytest.param(5000, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("shape", ["chorded cycle", "tangle"])
def test_long_cycles_read_off_a_child_are_the_ones_walked(shape: str, limit: int) -> None:
    """On large components with long cycles too, reading and walking name the same cycles."""
    if shape == "chorded cycle":
        tasks = chorded_cycle(3000)
        number = {task.id: i for i, task in enumerate(tasks)}
        succ = [sorted(number[dep] for dep in task.deps) for task in tasks]
    else:
        rng = random.Random(7)
        succ = [sorted(rng.randrange(3000) for _ in range(rng.randint(1, 3))) for _ in range(3000)]
    cycles_both_ways(succ, limit)


# --- garbage in: TypeError naming the item ---------------------------------------------------


@pytest.mark.parametrize(
    ("tasks", "needle"),
    [
        ("abc", "single str: 'abc'"),
        (b"abc", "single bytes"),
        (Task("a"), "single Task: Task(id='a'"),
        (42, "got int: 42"),
        (None, "got NoneType: None"),
        ([Task("a"), 3], "tasks[1] is not a Task (int); the item: 3"),
        ([{"id": "a"}], "tasks[0] is not a Task (dict)"),
        ([Task(7)], "tasks[0] has an id that is not a str: 7"),  # type: ignore[arg-type]
        ([Task("a", deps="b")], "tasks[0] has deps that are not a tuple"),  # type: ignore[arg-type]
        ([Task("a", deps=({"b"},))], "tasks[0] has a dependency that is not a str: {'b'}"),  # type: ignore[arg-type]
        ([Task("a", owner=None)], "tasks[0] has an owner that is not a str: None"),  # type: ignore[arg-type]
        ([Task("a", lease="tok")], "tasks[0] has a lease that is neither None nor a Lease"),  # type: ignore[arg-type]
        ([Task("a", lease=Lease(None, 1))], "tasks[0] has a lease token that is not a str"),  # type: ignore[arg-type]
    ],
)
def test_garbage_raises_type_error_naming_the_item(tasks: Any, needle: str) -> None:
    """Garbage input raises TypeError whose message names the offending item."""
    with pytest.raises(TypeError) as info:
        check(tasks)
    assert needle in str(info.value)


def test_garbage_item_repr_is_in_the_message() -> None:
    """The TypeError for a bad field quotes the whole item, so it can be found in storage."""
    with pytest.raises(TypeError, match=r"tasks\[2\].*Task\(id='bad'"):
        check([Task("a"), Task("b"), Task("bad", owner=3)])  # type: ignore[arg-type]


# --- scale: functional only, never timed ------------------------------------------------------

BIG = 100_000


def test_deep_chain_is_clean() -> None:
    """A single 100,000-long dependency chain is checked without recursion trouble."""
    tasks = [done("t0"), *(done(f"t{i}", f"t{i - 1}") for i in range(1, BIG))]
    assert check(tasks) == []


def test_huge_cycle_reports_every_task_with_bounded_text() -> None:
    """A 100,000-task cycle reports each task once, with texts of bounded length."""
    problems = check([Task(f"t{i}", deps=(f"t{(i + 1) % BIG}",)) for i in range(BIG)])
    assert len(problems) == BIG
    assert {p.code for p in problems} == {Code.DEP_CYCLE}
    assert max(len(p.text) for p in problems) < 200
    assert problems[0].text.endswith(f"... ({BIG} tasks)")


# --- properties ------------------------------------------------------------------------------

IDS = ["a", "b", "c", "d", "e", ""]
STATES: list[object] = [*State, "open", "claimed", "bogus", None]
leases = st.none() | st.builds(Lease, token=st.sampled_from(["", "tok"]), fence=st.just(1))
tasks_strategy = st.lists(
    st.builds(
        Task,
        id=st.sampled_from(IDS),
        deps=st.lists(st.sampled_from([*IDS, "x"]), max_size=3).map(tuple),
        state=st.sampled_from(STATES),
        owner=st.sampled_from(["", "w"]),
        lease=leases,
    ),
    max_size=8,
)


@given(st.data())
def test_output_is_sorted_and_order_independent(data: st.DataObject) -> None:
    """The result is sorted, one per (task, code) but unknown_dep, and input-order independent."""
    tasks = data.draw(tasks_strategy)
    problems = check(tasks)
    assert problems == sorted(problems, key=lambda p: (p.task, p.code, p.text))
    assert len({(p.task, p.code) for p in problems if p.code != Code.UNKNOWN_DEP}) == len(
        [p for p in problems if p.code != Code.UNKNOWN_DEP]
    )
    assert check(data.draw(st.permutations(tasks))) == problems


@given(tasks_strategy)
def test_dep_cycle_matches_strongly_connected_components(tasks: list[Task]) -> None:
    """dep_cycle flags exactly the tasks in networkx's components of two or more tasks."""
    graph: nx.DiGraph[str] = nx.DiGraph()
    ids = {t.id for t in tasks}
    graph.add_edges_from((t.id, d) for t in tasks for d in t.deps if d in ids and d != t.id)
    expected = {n for c in nx.strongly_connected_components(graph) if len(c) > 1 for n in c}
    assert {p.task for p in check(tasks) if p.code == Code.DEP_CYCLE} == expected


@given(st.lists(st.lists(st.integers(min_value=0), max_size=4), max_size=30))
def test_acyclic_graph_never_reports_cycles(raw: list[list[int]]) -> None:
    """A graph where each task depends only on earlier ones has no dep_cycle or self_dep."""
    tasks = [
        Task(f"t{i}", deps=tuple(f"t{d % i}" for d in deps) if i else ())
        for i, deps in enumerate(raw)
    ]
    assert check(tasks) == []


@pytest.mark.parametrize("enabled", [True, False], ids=["gc-enabled", "gc-disabled"])
def test_check_leaves_the_garbage_collector_alone(enabled: bool) -> None:
    """The collector is as the caller left it before, all through check() and after."""
    seen: list[bool] = []

    class Spy(str):
        # Hashed by every dict and set check() builds: it sees the collector's state throughout.
        def __hash__(self) -> int:
            seen.append(gc.isenabled())
            return str.__hash__(self)

    def tasks() -> Iterator[Task]:
        for i in range(50):
            seen.append(gc.isenabled())
            yield Task(Spy(f"t{i}"), deps=(Spy(f"t{(i + 1) % 50}"), Spy(f"t{(i + 7) % 50}")))

    was_enabled = gc.isenabled()
    if enabled:
        gc.enable()
    else:
        gc.disable()
    try:
        problems = check(tasks())
        after = gc.isenabled()
        with pytest.raises(TypeError):
            check([object()])  # type: ignore[list-item]
        after_error = gc.isenabled()
    finally:
        if was_enabled:
            gc.enable()
        else:
            gc.disable()
    assert len(problems) == 50
    assert len(seen) > 100
    assert set(seen) == {enabled}
    assert after is enabled
    assert after_error is enabled
