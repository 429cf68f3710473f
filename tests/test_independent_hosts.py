"""Outside-user boards against BoardMachine: correct ones must pass, buggy ones must be caught."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard.stateful import BoardMachine, ContractViolation, InfrastructureFault
from tests.independent_hosts import BUGGY_BOARDS, CORRECT_BOARDS

pytestmark = pytest.mark.deep

SETTINGS = settings(
    max_examples=600,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    report_multiple_bugs=False,
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
)


def machine_for(board_cls: type) -> type[BoardMachine]:
    """Build a BoardMachine subclass for one board class, honouring its POLICY and RESOLUTION."""

    def make_board(self: BoardMachine, tasks: Any, clock: Any) -> Any:
        return board_cls(tasks, clock)

    def close_board(self: BoardMachine, board: Any) -> None:
        close = getattr(board, "close", None)
        if close is not None:
            close()

    attrs: dict[str, Any] = {"make_board": make_board, "close_board": close_board}
    if board_cls.POLICY is not None:
        attrs["expired_lease_policy"] = board_cls.POLICY
    if board_cls.RESOLUTION is not None:
        attrs["clock_resolution"] = board_cls.RESOLUTION
    return type(f"{board_cls.__name__}Machine", (BoardMachine,), attrs)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


@pytest.mark.parametrize("board_cls", CORRECT_BOARDS, ids=lambda c: c.__name__)
def test_correct_board_passes(board_cls: type) -> None:
    """A correct independent board raises no contract violation (no false alarm)."""
    run_state_machine_as_test(machine_for(board_cls), settings=SETTINGS)


@pytest.mark.parametrize("board_cls", BUGGY_BOARDS, ids=lambda c: c.__name__)
def test_buggy_board_is_caught(board_cls: type) -> None:
    """A buggy independent board is reported as a ContractViolation, or, where its bug is an
    exception the contract does not name, as an InfrastructureFault (no miss)."""
    caught = (ContractViolation, InfrastructureFault)
    with pytest.raises((*caught, BaseExceptionGroup)) as info:
        run_state_machine_as_test(machine_for(board_cls), settings=SETTINGS)
    leaves = _leaves(info.value)
    assert leaves
    assert all(isinstance(e, caught) for e in leaves), leaves
