"""What the machine and the parallel runner draw: task ids, agents, lease lengths, tokens to act
with, and the dependency graphs of the initial tasks."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import networkx as nx
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from taskboard._operations import OPERATIONS
from taskboard.stateful._hypothesis import choice
from taskboard.stateful._trace import FORGERIES

__all__ = [
    "AGENTS",
    "AT_EXPIRY",
    "BELOW_RESOLUTION",
    "BOOLEANS",
    "CLAIM_TICKS",
    "GRAPH_PLANS",
    "GRAPH_SHAPES",
    "HOLDERS",
    "NEVER_ISSUED",
    "OUTLIVING_TTL_TICKS",
    "RENEW_TICKS",
    "RENEW_TTL_TICKS",
    "TASK_IDS",
    "TOKEN_OPS",
    "TTL_TICKS",
    "UNKNOWN_TASK_ID",
    "WRONG_TOKENS",
    "LeaseRef",
    "dependency_graphs",
    "graph_of",
    "grid_start",
    "is_acyclic",
    "renew_ticks",
]

#: Task ids of every generated board. Few, so operations collide on the same task.
TASK_IDS = ("t1", "t2", "t3")
#: The token an action uses on a task that never had a lease.
NEVER_ISSUED = "never-issued"
#: An id no generated board has.
UNKNOWN_TASK_ID = "t404"
#: Agent names repeat on purpose: agents are not identities, tokens are. The long
#: non-ASCII name catches stores that truncate or re-encode the owner.
AGENTS = ("a1", "a2", "a1", "ü-agent with a rather long name")
#: A lease length in clock ticks that outlives any example unless ``at_expiry`` jumps to its
#: end.
OUTLIVING_TTL_TICKS = 10_000
#: A lease length, in place of a tick count, that is half the store's resolution (one
#: resolution where that is a microsecond): a TTL the store cannot keep exactly. It must
#: round it, not truncate it to 0 and read that as "no expiry" (``expire=int(ttl)`` on a
#: store where 0 means "never").
BELOW_RESOLUTION = -1
#: Lease lengths in clock ticks: mostly short, so leases expire within an example; 0 never
#: expires.
CLAIM_TICKS = (1, 2, 5, 20, 0, OUTLIVING_TTL_TICKS, BELOW_RESOLUTION)
TTL_TICKS = choice(CLAIM_TICKS)
#: Renewal lengths: as for claims, but "no expiry" twice as often, since a renew to ttl 0
#: must clear ``until`` (a store that keeps the old one leaves a lease that still expires).
#: (Three times in eight, with the sub-resolution TTL once, asked for ttl 0 in 22% of the
#: renews on a live current lease instead of 15%, but caught a dependency mutant,
#: FailedDepCountsAsDone, in 34 of 40 seeds instead of 36: docs/power.md.)
RENEW_TICKS = (1, 0, 5, 20, 0, OUTLIVING_TTL_TICKS, BELOW_RESOLUTION)
RENEW_TTL_TICKS = choice(RENEW_TICKS)
_AS_RENEW = dict(zip(CLAIM_TICKS, RENEW_TICKS, strict=True))


def renew_ticks(ticks: int) -> int:
    """The TTL a renew asks for where a step drew ``ticks`` from :data:`TTL_TICKS` (one draw
    serving a claim or a renew: ``at_expiry``, ``act_with_lease``): what the renew rule draws
    at the same place, so those renews ask for no expiry as often as the rule's. On a coarse
    wall-clock unit they are half the renews that meet a live current lease (a renew just
    before its lease's until), and with one ttl 0 in seven they asked for it half as often
    as the rule's (python-redis-lock's ``extend(0)``, docs/power.md)."""
    return _AS_RENEW.get(ticks, ticks)


#: Either way of a two-way argument, ``False`` first (what a failure shrinks to).
BOOLEANS = choice((False, True))
#: Whose token a holder action uses: the task's latest lease's, or the one before it.
HOLDERS = ("latest", "previous")
#: What happens on the lease's task right after a jump to (just before) its expiry. Claim and
#: renew are listed twice: the boundary decides their outcome, so they matter most there.
AT_EXPIRY = ("claim", "renew", "claim", "renew", "release", "complete", "fail", "nothing")
#: Operations that act with a token, by name (names keep Hypothesis's printed steps runnable),
#: in the table's order: release, complete, renew, fail.
TOKEN_OPS = tuple(row.name for row in OPERATIONS if row.token)
#: Ways to act with a token that is not the task's lease's: another task's lease's token, or
#: a forgery close to the real one.
WRONG_TOKENS = ("another task's", *FORGERIES)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_START = datetime(2026, 1, 1, tzinfo=UTC)


def grid_start(tick: timedelta) -> datetime:
    """The first instant from 2026-01-01 UTC that is a whole number of ``tick`` since the
    Unix epoch: a start from which every drawn time is on the host's resolution grid."""
    return _EPOCH + ((_START - _EPOCH) // tick) * tick


@dataclass(frozen=True)
class LeaseRef:
    """A lease some claim returned, kept so later steps can act with its token."""

    label: str
    task_id: str
    token: str
    fence: int
    agent: str

    def __repr__(self) -> str:
        return f"<{self.label}: lease of {self.task_id!r} for {self.agent!r}, fence {self.fence}>"


#: Shapes of dependency graph over three tasks, as (dependent, dependency) positions. Every
#: acyclic graph on three tasks is one of these up to a relabelling, which is drawn too.
GRAPH_SHAPES: dict[str, tuple[tuple[int, int], ...]] = {
    "independent": (),
    "one edge": ((1, 0),),
    "chain": ((1, 0), (2, 1)),
    "fan-in": ((2, 0), (2, 1)),
    "fan-out": ((1, 0), (2, 0)),
    "chain with shortcut": ((1, 0), (2, 1), (2, 0)),
}


#: The shapes as drawn: fan-in twice, since a task with two dependencies (one done, one not)
#: is where partial dependency checks fail, and only that shape has one claimable in between.
SHAPE_CHOICES = (*GRAPH_SHAPES, "fan-in")


#: Every (shape, relabelling) pair, shape first: one choice draws a graph, and a failure
#: shrinks towards ``"independent"`` with the tasks in order.
GRAPH_PLANS = tuple(itertools.product(SHAPE_CHOICES, itertools.permutations(TASK_IDS)))


def graph_of(plan: tuple[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The dependency graph of a (shape, relabelling) plan."""
    shape, order = plan
    deps: dict[str, tuple[str, ...]] = dict.fromkeys(TASK_IDS, ())
    for dependent, dependency in GRAPH_SHAPES[shape]:
        deps[order[dependent]] += (order[dependency],)
    return deps


def dependency_graphs() -> SearchStrategy[dict[str, tuple[str, ...]]]:
    """An acyclic dependency graph over :data:`TASK_IDS`: a shape, and which task is which.

    Drawing the shape (with a relabelling, uniformly) makes two-dependency tasks and
    chains as likely as no dependencies at all; a failure that needs no edges shrinks to
    ``"independent"``.
    """
    return st.sampled_from(GRAPH_PLANS).map(graph_of)


def _graph_key(deps: dict[str, tuple[str, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted(deps.items()))


def is_acyclic(deps: dict[str, tuple[str, ...]], *, known: bool = True) -> bool:
    """True if ``deps`` has no cycle; the drawn graphs were all checked once, on import."""
    if known and _graph_key(deps) in _ACYCLIC_PLANS:
        return True
    graph: nx.DiGraph[str] = nx.DiGraph([(t, d) for t, ds in deps.items() for d in ds])
    graph.add_nodes_from(deps)
    return bool(nx.is_directed_acyclic_graph(graph))


_ACYCLIC_PLANS = frozenset(
    _graph_key(deps)
    for deps in map(graph_of, GRAPH_PLANS)
    if is_acyclic(deps, known=False)  # every one, or start() asserts
)
