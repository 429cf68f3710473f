"""What the checker draws, for tests of your own that draw the same: task ids, agents, lease
lengths, the dependency graphs of the starting tasks, and the leases later steps act with.

``dependency_graphs()`` is the Hypothesis strategy of the acyclic graphs every run starts
from; ``TTL_TICKS`` and ``RENEW_TTL_TICKS`` draw lease lengths, in clock ticks, as the
machine's claims and renews do (``0``: no expiry; :data:`BELOW_RESOLUTION`: half the store's
resolution). See ``docs/testing-your-storage.md``.

This module only re-exports; the code lives in a private module.
"""

from taskboard.stateful._generation import (
    AGENTS,
    BELOW_RESOLUTION,
    GRAPH_PLANS,
    GRAPH_SHAPES,
    NEVER_ISSUED,
    OUTLIVING_TTL_TICKS,
    RENEW_TTL_TICKS,
    TASK_IDS,
    TTL_TICKS,
    UNKNOWN_TASK_ID,
    LeaseRef,
    dependency_graphs,
    graph_of,
    grid_start,
    is_acyclic,
)

__all__ = [
    "AGENTS",
    "BELOW_RESOLUTION",
    "GRAPH_PLANS",
    "GRAPH_SHAPES",
    "NEVER_ISSUED",
    "OUTLIVING_TTL_TICKS",
    "RENEW_TTL_TICKS",
    "TASK_IDS",
    "TTL_TICKS",
    "UNKNOWN_TASK_ID",
    "LeaseRef",
    "dependency_graphs",
    "graph_of",
    "grid_start",
    "is_acyclic",
]
