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
from collections.abc import Iterator
from dataclasses import dataclass

import hypothesis
from hypothesis import settings

from taskboard.stateful._hypothesis import seed_of
from taskboard.stateful._runstate import ExampleStats
from taskboard.stateful._session import StopRequested, on_example_end, stop_when

__all__ = ["BUDGETED_EXAMPLES", "SessionOptions", "choose", "chosen", "session_run"]

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


@contextlib.contextmanager
def session_run(machine_cls: type, chosen_settings: settings) -> Iterator[settings]:
    """Run ``machine_cls`` as the session's options say, inside the block: seeded, and with
    the Hypothesis settings it yields (``chosen_settings``, asking for as many examples as
    the budget allows when there is one) and stopped when the budget is spent."""
    options = _chosen
    if options.seed is not None and seed_of(machine_cls) is None:
        hypothesis.seed(options.seed)(machine_cls)
    if options.budget is None:
        yield chosen_settings
        return
    deadline = time.monotonic() + options.budget
    found = False

    def heard(example: ExampleStats) -> None:
        nonlocal found
        found = found or example.failed

    def spent() -> bool:
        # Once a failure is found, it is shrunk and reported whatever the budget says.
        return not found and time.monotonic() >= deadline

    with on_example_end(heard), stop_when(spent), contextlib.suppress(StopRequested):
        yield settings(chosen_settings, max_examples=BUDGETED_EXAMPLES)
