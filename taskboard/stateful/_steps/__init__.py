"""The kinds of step, in the one list where the machine, parallel programs, replay, trace
files and reports find them.

A new kind of step is a module beside these (a :class:`StepKind` with what it has: machine
rules, program steps, recorded steps) whose ``KIND`` is added to :data:`STEP_KINDS`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from hypothesis import strategies as st

from taskboard.model import Op, Step
from taskboard.stateful._fields import Reader
from taskboard.stateful._steps import act, claim, clock, expiry, misuse, nemesis
from taskboard.stateful._steps._base import (
    LEASES,
    ParallelProgram,
    ProgramDraw,
    ProgramStep,
    Replay,
    StepKind,
)
from taskboard.stateful._steps.act import ActStep
from taskboard.stateful._steps.claim import ClaimStep
from taskboard.stateful._steps.clock import AdvanceStep
from taskboard.stateful._steps.expiry import ExpiryStep
from taskboard.stateful._steps.nemesis import NemesisStep
from taskboard.stateful._trace import NEMESIS_HOOKS, signed_offset

__all__ = [
    "LEASES",
    "STEP_KINDS",
    "ActStep",
    "AdvanceStep",
    "ClaimStep",
    "ExpiryStep",
    "NemesisStep",
    "ParallelProgram",
    "ProgramDraw",
    "ProgramStep",
    "Replay",
    "StepKind",
    "kind_named",
    "kind_of",
    "machine_rules",
    "program_ops",
    "program_steps",
    "read_program_step",
    "read_step",
    "render_step",
    "replay_step",
    "write_step",
]

#: Every kind of step. The order is the order program steps are drawn in (a failure
#: shrinks towards the first).
STEP_KINDS: tuple[StepKind, ...] = (
    claim.KIND,
    act.KIND,
    misuse.KIND,
    clock.KIND,
    expiry.KIND,
    nemesis.KIND,
)


@functools.cache
def _by_name(kinds: tuple[StepKind, ...]) -> dict[str, StepKind]:
    return {name: kind for kind in kinds for name in kind.names}


def kind_named(name: str) -> StepKind | None:
    """The kind that answers to ``name`` (a program step's ``op``, a recorded step's name)."""
    return _by_name(STEP_KINDS).get(name)


def program_ops() -> tuple[str, ...]:
    """What a program step may be called in a trace file."""
    return tuple(_by_name(STEP_KINDS))


def kind_of(step: Step) -> StepKind:
    """The kind that recorded ``step``: by its nemesis hook, its call's operation, or else
    the clock's."""
    by_name = _by_name(STEP_KINDS)
    if step.nemesis:
        return by_name[step.nemesis]
    return by_name[str(step.call.op) if step.call is not None else "advance"]


def machine_rules(nemesis: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
    """Every kind's machine rules, by name, for a machine that defines ``nemesis``'s hooks."""
    rules: dict[str, Callable[..., Any]] = {}
    for kind in STEP_KINDS:
        rules.update(kind.rules(nemesis))
    return rules


def program_steps(draw: ProgramDraw) -> st.SearchStrategy[ProgramStep]:
    """One step of a program's prefix or of a racing thread, of any kind that has one."""
    return st.one_of(*(s for kind in STEP_KINDS for s in kind.program_strategies(draw)))


def write_step(step: Step) -> dict[str, Any]:
    """A recorded step as trace files write it."""
    record: dict[str, Any] = {"index": step.index, "at": step.at.isoformat()}
    record.update(kind_of(step).write_step(step))
    if step.note:
        record["note"] = step.note
    return record


def read_step(reader: Reader, expected_index: int) -> Step:
    """A recorded step, as :func:`write_step` wrote it.

    Raises:
        TraceFileError: a field is missing or wrong, named by its path.
    """
    index = reader.get("index", int)
    if index != expected_index:
        raise reader.error("index", f"expected {expected_index}, got {index}")
    at = reader.when("at")
    assert at is not None
    written = reader.get("kind", str)
    if written == "call":
        name = reader.get("op", str)
        if name not in Op.__members__.values():
            ops = ", ".join(o.value for o in Op)
            raise reader.error("op", f"{name!r} is not one of {ops}")
    elif written == "nemesis":
        name = reader.get("hook", str)
        if name not in NEMESIS_HOOKS:
            raise reader.error("hook", f"expected 'restart' or 'drop', got {name!r}")
    elif written == "clock":
        name = "advance"
    elif kind_named(written) is not None:  # a kind that writes steps of its own
        name = written
    else:
        raise reader.error("kind", f"expected 'call', 'clock' or 'nemesis', got {written!r}")
    kind = kind_named(name)
    assert kind is not None
    return kind.read_step(name, reader, index, at)


def read_program_step(reader: Reader) -> ProgramStep:
    """A step of a program's prefix or thread, as :meth:`ProgramStep.to_json` wrote it.

    Raises:
        TraceFileError: a field is missing or wrong, named by its path.
    """
    op = reader.get("op", str)
    kind = kind_named(op)
    if kind is None:
        raise reader.error("op", f"{op!r} is not one of {', '.join(program_ops())}")
    return kind.read_program_step(op, reader)


def replay_step(replay: Replay, step: Step) -> None:
    """Run the recorded ``step`` again on ``replay``'s session, as its kind replays it."""
    kind_of(step).replay(replay, step)


def render_step(
    step: Step, start: datetime, token_label: Callable[[str], str], *, marker: str = ""
) -> str:
    """One line of a trace: index, clock offset, what was done, what the board did."""
    when = signed_offset(step.at - start)
    text = kind_of(step).describe(step, start, token_label)
    return f"{marker:>3}{step.index:>4}  {when:>9}  {text}"
