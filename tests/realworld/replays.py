"""Replay a trace several times in this process, or run a hand-written race program:
``python -m tests.realworld.replays TARGET TRACE_OR_PROGRAM RUNS`` prints ``failed K of N``.

The corpus runs it in a subprocess whose ``PYTHONPATH`` puts one release of a library first
(see :mod:`tests.realworld.corpus`): a replay that fails on its first run of the program
counts (a controlled race is replayed exactly: it fails on every run or on none). A
``PROGRAM`` is the name of a :class:`~taskboard.stateful._steps.ParallelProgram` in this
module, run with :func:`~taskboard.stateful._parallel.run_program`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from taskboard._fuzz.targets import resolve_target
from taskboard.stateful import ContractViolation, load_trace, replay_trace
from taskboard.stateful._generation import TASK_IDS
from taskboard.stateful._parallel import run_program
from taskboard.stateful._steps import ActStep, ClaimStep, ExpiryStep, ParallelProgram

__all__ = ["RELEASE_ACROSS_EXPIRY", "main"]

#: A lease of one tick, the clock one tick before its until. The holder's release WATCHes and
#: GETs its key; the clock then moves to the until (the key expires) and a second agent
#: claims the task; the release's DEL comes next, and a third agent claims the task while
#: the second still holds it.
RELEASE_ACROSS_EXPIRY = ParallelProgram(
    dict.fromkeys(TASK_IDS, ()),
    (ClaimStep(TASK_IDS[0], "a1", 1), ExpiryStep(TASK_IDS[0], 3)),
    (
        (ActStep("release", TASK_IDS[0], "latest"),),
        (ClaimStep(TASK_IDS[0], "a2", 5), ClaimStep(TASK_IDS[0], "a3", 5)),
    ),
    schedule=(0, 1, 1, 0, 1, 1, 1, 0),
)


def main(argv: Sequence[str] | None = None) -> int:
    target, what, runs = argv or sys.argv[1:]
    machine = resolve_target(target)
    failed = 0
    for _ in range(int(runs)):
        if what in __all__:
            try:
                run_program(machine, globals()[what], record=False)
            except ContractViolation:
                failed += 1
            continue
        result = replay_trace(load_trace(what), machine)
        failed += not result.passed and result.steps_run == 1
    print(f"failed {failed} of {runs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
