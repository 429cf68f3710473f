"""The run under way: who hears of its examples, what stops it, and what it failed with first.

A :class:`RunState` is what one run of the checker carries (model: trio's ``Instruments``,
which a run carries and notifies): the listeners that hear of each example as it ends
(:func:`~taskboard.stateful._session.on_example_end`), the conditions that stop it
(:func:`~taskboard.stateful._session.stop_when`) and the first failure each machine class
reported in it (:func:`~taskboard.stateful._reports.failures_reported`). Nothing of it is
process-wide: two runs in one process, in two threads or one inside the other, do not hear
each other's examples, stop each other, or see each other's failures.

The run under way is held in a :class:`~contextvars.ContextVar`:

* The first of those context managers entered where no run is under way begins one for its
  block; the others, entered inside it, join it (:func:`joined_run`).
* :func:`separate_run` begins a run apart from any around it: a replay, or a fuzzing run,
  started inside another run is a run of its own.
* A thread begins with no run under way (Python does not hand a thread its starter's context
  by default), so a run in one thread is no part of a run in another.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from taskboard.model import Step

__all__ = ["ExampleStats", "RunState", "current_run", "joined_run", "separate_run"]


@dataclass(frozen=True)
class ExampleStats:
    """What one example did, as its listeners hear of it when it ends."""

    #: True for a run of a parallel program (its threads' calls are not in ``trace``).
    parallel: bool
    trace: tuple[Step, ...]
    #: The lease labels of the run (token: ``L3``).
    labels: Mapping[str, str]
    #: How often each (task state, operation, outcome) transition ran.
    transitions: Counter[tuple[str, str, str]]
    #: In a parallel program: each thread call's (operation, outcome).
    concurrent_calls: Counter[tuple[str, str]]
    #: The optional operations the board has (``renew``, ``fail``); ``None``: no board made.
    operations: frozenset[str] | None
    #: True when the example ended with a violation or a fault.
    failed: bool = False
    #: Of the renews that met their task's live lease with its own token, how many asked
    #: for each boundary TTL (see :func:`~taskboard.stateful._config.ttl_class`).
    renew_ttls: Counter[str] = field(default_factory=Counter)
    #: Calls the board answered ``unsupported`` (``NotImplementedError``): a lease it cannot
    #: hold; and calls whose TTL was changed to one it holds before they were made.
    refused: int = 0
    adapted: int = 0
    #: The lease limits declared, and those in force when the example ended (learned ones
    #: too), in words (empty: any lease).
    declared_limits: str = ""
    limits: str = ""

    @property
    def steps(self) -> int:
        """How many steps the example ran."""
        return len(self.trace)


class RunState:
    """What one run carries: its listeners, its stop conditions and its first failures."""

    def __init__(self) -> None:
        #: Called with the stats of every example of the run as it ends.
        self.listeners: list[Callable[[ExampleStats], None]] = []
        #: The run stops (at the next call or clock move) once any of these is true.
        self.stop_conditions: list[Callable[[], bool]] = []
        #: The first failure each machine class reported in the run, as its
        #: :class:`~taskboard.stateful._reports.Report` (which module imports this one).
        self.first_failures: dict[type, Any] = {}
        #: What each machine class's boards were found unable to hold in the run: their
        #: :class:`~taskboard.stateful._limits.LeaseLimits`, learned from their answers.
        self.lease_limits: dict[type, Any] = {}

    def example_ended(self, stats: ExampleStats) -> None:
        """Tell every listener of the run about the example that just ended."""
        # A copy: a listener may register or remove one (its own block) while it is told.
        for listener in tuple(self.listeners):
            listener(stats)

    def stop_requested(self) -> bool:
        """True once any of the run's stop conditions is."""
        return any(condition() for condition in self.stop_conditions)


_CURRENT: ContextVar[RunState | None] = ContextVar("taskboard_run", default=None)


def current_run() -> RunState | None:
    """The run under way in this context (thread), or ``None``."""
    return _CURRENT.get()


@contextlib.contextmanager
def joined_run() -> Iterator[RunState]:
    """The run under way, or, when there is none, a run begun for the block (and ended
    with it)."""
    run = _CURRENT.get()
    if run is not None:
        yield run
        return
    with separate_run() as run:
        yield run


@contextlib.contextmanager
def separate_run() -> Iterator[RunState]:
    """A new run for the block, apart from any under way: the run around it does not hear
    its examples, its stop conditions do not stop it, and its failures are its own (and the
    other way round). The run around it is under way again after the block."""
    run = RunState()
    token = _CURRENT.set(run)
    try:
        yield run
    finally:
        _CURRENT.reset(token)
