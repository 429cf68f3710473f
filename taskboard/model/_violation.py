"""The verdict that a board broke the contract, and how to find it inside other errors.

It sits below both the model and the rules a returned task must obey, which raise it.
"""

from __future__ import annotations

from typing import Any, TypeVar

from taskboard.model._calls import Step

__all__ = ["ContractViolation", "errors_in", "violations_in"]

E = TypeVar("E", bound=BaseException)


class ContractViolation(AssertionError):
    """The board did something the contract does not allow.

    Raised by the model (and, with the step and trace added, by the machine).
    ``clause`` names the SPEC clause, ``expected`` what the contract allowed and
    why, ``observed`` what the board did. It is an ``AssertionError`` so test
    runners report it as a test failure, not as an error in the test itself.
    """

    #: The step that broke the contract (``None`` for the initial snapshot), when known.
    step: Step | None = None
    #: Every step of the run up to and including :attr:`step`, when known.
    trace: tuple[Step, ...] = ()
    #: The JSON trace file written for this failure, if one was.
    trace_file: str | None = None
    #: The run as a ``taskboard.stateful.Trace``, kept by the machine in case it does not recur.
    recording: Any = None
    #: The machine's whole report of it (a value of ``taskboard.stateful``), when it made one.
    report: Any = None

    def __init__(self, clause: str, expected: str, observed: str, *, report: str = "") -> None:
        self.clause = clause
        self.expected = expected
        self.observed = observed
        # ``report``: the whole text a checker made of it (the step, the trace, ...).
        super().__init__(report or f"{clause}: expected {expected}; the board {observed}")


def violations_in(error: BaseException | None) -> list[ContractViolation]:
    """The contract violations in an error: itself, its group members, or what it interrupted.

    Hypothesis may wrap a violation: in an ``ExceptionGroup`` when it reports several bugs,
    or in a ``Flaky...`` error, raised while handling the violation, when a board whose bug
    depends on its own random tokens makes a replay diverge.
    """
    return errors_in(error, ContractViolation)


def errors_in(error: BaseException | None, kind: type[E]) -> list[E]:
    """The errors of ``kind`` in an error, found as :func:`violations_in` finds violations."""
    if error is None:
        return []
    if isinstance(error, kind):
        return [error]
    found = [e for inner in getattr(error, "exceptions", ()) for e in errors_in(inner, kind)]
    return found or errors_in(error.__context__, kind)
