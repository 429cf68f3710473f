"""The nemesis (SPEC 9): the storage restarted, or the board's connections dropped, through
the machine's hooks, as a rare rule on a machine that defines the hook, as a step of a
program's prefix, and as a recorded step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from taskboard.model import Step
from taskboard.stateful._fields import Reader
from taskboard.stateful._steps._base import (
    Machine,
    ProgramDraw,
    ProgramStep,
    Replay,
    Runner,
    StepKind,
)
from taskboard.stateful._trace import NEMESIS_HOOKS

__all__ = ["KIND", "NemesisStep"]


@precondition(lambda self: "restart" in self.config.nemesis)
@rule()
def restart(self: Machine) -> None:
    """Restart the storage (``restart_storage``), then judge the snapshot by SPEC 9."""
    self._session.run_nemesis("restart")


@precondition(lambda self: "drop" in self.config.nemesis)
@rule()
def drop(self: Machine) -> None:
    """Kill the board's connections (``drop_connections``); the next calls meet that."""
    self._session.run_nemesis("drop")


#: The nemesis rules, which a machine class with the hooks gets. No spacing rule: a
#: precondition on the trace would keep the shrinker from deleting the steps before a
#: restart. Rare enough: one rule of many.
_RULES = {"restart": restart, "drop": drop}


@dataclass(frozen=True)
class NemesisStep(ProgramStep):
    """A program's run of a nemesis hook: ``"restart"`` or ``"drop"``."""

    kind: str

    @property
    def op(self) -> str:
        return self.kind

    def run(self, session: Runner) -> None:
        session.run_nemesis(self.kind)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op}

    def __str__(self) -> str:
        return f"{NEMESIS_HOOKS[self.kind]}(board)"


class NemesisKind(StepKind):
    """Storage restarts and dropped connections (SPEC 9)."""

    names = tuple(NEMESIS_HOOKS)

    def rules(self, nemesis: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
        return {kind: rule for kind, rule in _RULES.items() if kind in nemesis}

    def program_strategies(self, draw: ProgramDraw) -> tuple[st.SearchStrategy[ProgramStep], ...]:
        # A restart or a drop in the prefix, so the threads race right after it.
        if not draw.in_prefix or not draw.nemesis:
            return ()
        return (st.sampled_from(draw.nemesis).map(NemesisStep),)

    def read_program_step(self, op: str, reader: Reader) -> ProgramStep:
        return NemesisStep(op)

    def write_step(self, step: Step) -> dict[str, Any]:
        return {"kind": "nemesis", "hook": step.nemesis}

    def read_step(self, name: str, reader: Reader, index: int, at: datetime) -> Step:
        return Step(index, at, nemesis=name, note=reader.get("note", str, optional=True) or "")

    def replay(self, replay: Replay, step: Step) -> None:
        replay.session.run_nemesis(step.nemesis)

    def describe(self, step: Step, start: datetime, label: Callable[[str], str]) -> str:
        text = f"{NEMESIS_HOOKS[step.nemesis]}(board)"
        return text + (f"  ({step.note})" if step.note else "")


KIND = NemesisKind()
