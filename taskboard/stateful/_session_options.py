"""What ``pytest --taskboard-seed N --taskboard-budget 5m`` asks of the machine runs of a test
session: a machine's ``TestCase`` and ``ParallelTestCase``, and BoardContract's state machine
and parallel tests.

The pytest plugin (:mod:`taskboard._pytest_plugin`) reads the options and records them here
with :func:`choose`; each of those tests runs inside :func:`session_run`. A run that a
test of your own starts with ``run_state_machine_as_test`` is left as it is, and so is
``taskboard fuzz``, which has its own ``--seed`` and ``--budget``.

* The **seed** is each machine's ``@seed``, unless the class has one of its own: the same
  examples on every run, also under a derandomized profile (where ``--hypothesis-seed`` is
  ignored), so that a failure seen once can be had again.
* The **budget** is how long each such test runs: examples go on until it is spent, not
  for a count (``max_examples``). A failure found before then is shrunk and reported
  however long that takes; a budget spent with none found is a pass.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import hypothesis
from hypothesis import settings

from taskboard.stateful._hypothesis import seed_of
from taskboard.stateful._runstate import ExampleStats
from taskboard.stateful._session import StopRequested, on_example_end, stop_when

__all__ = [
    "BUDGETED_EXAMPLES",
    "SessionOptions",
    "SessionRun",
    "choose",
    "chosen",
    "session_run",
]

#: The example count a run with a budget asks Hypothesis for: more than a budget allows, so
#: that the budget ends it.
BUDGETED_EXAMPLES = 100_000_000


@dataclass(frozen=True)
class SessionOptions:
    """The options of a test session's machine runs (``None``: not given)."""

    #: The ``@seed`` of every machine that has none of its own.
    seed: int | None = None
    #: Seconds each machine run goes on for.
    budget: float | None = None


_chosen = SessionOptions()


def choose(options: SessionOptions) -> None:
    """Make ``options`` those of the session's machine runs from now on."""
    global _chosen
    _chosen = options


def chosen() -> SessionOptions:
    """The options of the session's machine runs."""
    return _chosen


def session_run(machine_cls: type, chosen_settings: settings) -> SessionRun:
    """Run ``machine_cls`` as the session's options say, inside the block: seeded, and with
    the Hypothesis settings the block gets (``chosen_settings``, asking for as many examples
    as the budget allows when there is one), stopped when the budget is spent."""
    return SessionRun(machine_cls, chosen_settings, _chosen)


class SessionRun:
    """The context manager :func:`session_run` returns. A class, not a generator: the
    failure of a run leaves it as it came, with the traceback ``failures_reported`` gave it
    (``contextlib`` would put the one it had back)."""

    def __init__(
        self, machine_cls: type, chosen_settings: settings, options: SessionOptions
    ) -> None:
        self.machine_cls, self.settings, self.options = machine_cls, chosen_settings, options
        self.found = False
        self.deadline = 0.0
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> settings:
        options = self.options
        if options.seed is not None and seed_of(self.machine_cls) is None:
            hypothesis.seed(options.seed)(self.machine_cls)
        if options.budget is None:
            return self.settings
        self.deadline = time.monotonic() + options.budget
        self.stack.enter_context(on_example_end(self._heard))
        self.stack.enter_context(stop_when(self._spent))
        return settings(self.settings, max_examples=BUDGETED_EXAMPLES)

    def __exit__(self, kind: type[BaseException] | None, error: object, tb: object) -> bool:
        self.stack.close()  # the listener and the stop condition go, whatever ended the run
        # The budget spent with nothing found: the run passes.
        return kind is not None and issubclass(kind, StopRequested)

    def _heard(self, example: ExampleStats) -> None:
        self.found = self.found or example.failed

    def _spent(self) -> bool:
        # Once a failure is found, it is shrunk and reported whatever the budget says.
        return not self.found and time.monotonic() >= self.deadline
