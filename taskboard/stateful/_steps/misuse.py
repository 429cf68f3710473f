"""Misuse: any operation on an id no task has, a claim with an empty agent, or an action with
a token nobody issued. Its recorded steps are the calls it made (see the claim and act
kinds)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis.stateful import rule

from taskboard.model import Call, Op
from taskboard.stateful._generation import BOOLEANS, TASK_IDS, TOKEN_OPS, UNKNOWN_TASK_ID
from taskboard.stateful._hypothesis import choice
from taskboard.stateful._steps._base import Machine, StepKind

__all__ = ["KIND"]


@rule(op=choice(("claim", *TOKEN_OPS)), task=choice(TASK_IDS), unknown=BOOLEANS)
def misuse(self: Machine, op: str, task: str, unknown: bool) -> None:
    """Any operation on an id no task has (``unknown``); else a claim with an empty agent,
    or an action with a token nobody issued."""
    session = self._session
    if not session.supports(op):
        return
    task_id = UNKNOWN_TASK_ID if unknown else task
    agent = "a1" if unknown else ""
    unit = session.config.ttl_unit
    session.perform(Call(Op(op), task_id, agent=agent, token="", ttl=unit))


class MisuseKind(StepKind):
    """Calls the contract must refuse (SPEC 3.6): a rule only."""

    def rules(self, nemesis: tuple[str, ...]) -> dict[str, Callable[..., Any]]:
        return {"misuse": misuse}


KIND = MisuseKind()
