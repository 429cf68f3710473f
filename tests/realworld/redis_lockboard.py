"""``tests/lock_boards.py``'s ``LockBoard`` on whichever redis-py is first on ``sys.path``:
``tests.realworld.redis_lockboard:board``.

The evidence for an entry that is out of reach (``docs/real-bugs.md``): redis-py 8.1.0's
``extend`` deletes a lock given a non-positive TTL (REPORT #4, fixed in 8.2.0), but the
machine never asks for one, so 8.1.0 passes like 8.2.0. Needs ``TASKBOARD_REDIS_URL``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from taskboard import Clock, Task
from tests.lock_boards import LockBoard

__all__ = ["board"]


def board(tasks: Sequence[Task], clock: Clock) -> LockBoard:
    """A LockBoard over the installed redis-py's Lock; the clock is ignored (Redis's)."""
    return LockBoard(tasks, os.environ["TASKBOARD_REDIS_URL"])


board.clock_mode = "wall"  # type: ignore[attr-defined]
board.clock_resolution = LockBoard.clock_resolution  # type: ignore[attr-defined]
board.expired_lease_policy = LockBoard.expired_lease_policy  # type: ignore[attr-defined]
