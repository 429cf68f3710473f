"""Clock moves: forward by a few TTL units (on the wall clock, a sleep), as a rule, as a step
of a program's prefix, and as the recorded clock steps of every kind that moves the clock
(a landing at a lease's expiry is one too)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import rule

from taskboard.model import Step
from taskboard.stateful._fields import Reader, micros, read_count
from taskboard.stateful._steps._base import (
    Machine,
    ProgramDraw,
    ProgramStep,
    Replay,
    Runner,
    StepKind,
)
from taskboard.stateful._trace import format_offset

__all__ = ["KIND", "AdvanceStep"]


@rule(ticks=st.integers(1, 5))
def advance_clock(self: Machine, ticks: int) -> None:
    """Move the clock forward by a few ticks (long leases end by ``at_expiry``); on the wall
    clock, sleep a few TTL units and a half (on a coarse unit, one and a half), to land
    between expiry boundaries rather than on one (``at_expiry`` covers the boundaries)."""
    session = self._session
    unit = session.config.ttl_unit
    ticks = min(ticks, session.config.longest_clock_step)
    step = ticks * unit + (unit / 2 if session.config.wall else timedelta(0))
    session.move_clock(session.clock.now() + step, "", blind=True)


@dataclass(frozen=True)
class AdvanceStep(ProgramStep):
    """A program's move of the clock by ``ticks`` TTL units (on the wall clock, a sleep)."""

    ticks: int

    @property
    def op(self) -> str:
        return "advance"

    def run(self, session: Runner) -> None:
        ahead = session.clock.now() + self.ticks * session.config.ttl_unit
        session.move_clock(ahead, "", blind=True)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "ticks": self.ticks}

    def __str__(self) -> str:
        return f"advance({self.ticks} ticks)"


class ClockKind(StepKind):
    """Moves of the clock (SPEC 7 on the wall clock: sleeps)."""

    names = ("advance",)

    def rules(self, nemesis: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
        return {"advance_clock": advance_clock}

    def program_strategies(self, draw: ProgramDraw) -> tuple[st.SearchStrategy[ProgramStep], ...]:
        if not draw.in_prefix:
            return ()
        return (st.builds(AdvanceStep, st.integers(1, 5)),)

    def read_program_step(self, op: str, reader: Reader) -> ProgramStep:
        # Traces of schema 3 named the count ttl_ticks.
        return AdvanceStep(read_count(reader, "ticks" if "ticks" in reader.value else "ttl_ticks"))

    def write_step(self, step: Step) -> dict[str, Any]:
        return {"kind": "clock", "advance_us": micros(step.advance or timedelta(0))}

    def read_step(self, name: str, reader: Reader, index: int, at: datetime) -> Step:
        advance = reader.duration("advance_us")
        return Step(index, at, advance=advance, note=reader.get("note", str, optional=True) or "")

    def replay(self, replay: Replay, step: Step) -> None:
        session = replay.session
        target = step.at + replay.shift + (step.advance or timedelta(0))
        if session.config.wall:  # land as far from the replayed lease's until as recorded
            target = replay.untils.anchored(step, session) or target
        session.move_clock(max(target, session.clock.now()), step.note)

    def describe(self, step: Step, start: datetime, label: Callable[[str], str]) -> str:
        moved = format_offset(step.advance or timedelta(0))
        what = f"clock advances {moved}" if step.advance else "clock stays"
        return what + (f"  ({step.note})" if step.note else "")


KIND = ClockKind()
