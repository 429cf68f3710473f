"""Machine throughput: steps per second against MemoryBoard, and the checker's own overhead.

Runs the same BoardMachine rules twice over the same derandomized examples: once as shipped
(model, snapshot reconcile, check(), live-holder check after every step) and once with all of
that switched off (the board is only called). The ratio is the price of checking.

    python benchmarks/bench_machine.py [--examples N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from datetime import datetime

from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, Clock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.model import Call, Outcome, Step
from taskboard.stateful import BoardMachine
from taskboard.stateful._session import Session


class Checked(BoardMachine):
    """The machine as shipped."""

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return MemoryBoard(tasks, clock)


class UncheckedSession(Session):
    """A session that only calls the board: no model, no snapshot, no checks."""

    def perform(self, call: Call, ref: str = "") -> Outcome:
        now = self.clock.now()
        try:
            outcome = Outcome.returned(call.invoke(self.board))
        except Exception as exc:
            outcome = Outcome.raised(exc)
        if outcome.ok and outcome.task is not None and outcome.task.lease is not None:
            self.labels.setdefault(outcome.task.lease.token, f"L{len(self.labels) + 1}")
        self.trace.append(Step(len(self.trace) + 1, now, call, outcome))
        return outcome

    def observe(self, step: Step | None, snapshot: list[Task] | None = None) -> None:
        pass

    def expiring(self) -> list[tuple[str, str, datetime]]:
        now = self.clock.now()
        return [
            (t.id, t.lease.token, t.lease.until)
            for t in self.board.list_tasks()
            if t.lease is not None and t.lease.until is not None and now < t.lease.until
        ]


class Unchecked(Checked):
    """The same rules and board calls, with the model and every check switched off."""

    _session_class = UncheckedSession


def measure(machine: type[BoardMachine], examples: int) -> tuple[int, float]:
    """Steps run and seconds taken over ``examples`` derandomized examples, generation only."""
    steps = 0

    class Counted(machine):  # type: ignore[valid-type,misc]
        def teardown(self) -> None:
            nonlocal steps
            steps += len(self.trace)
            super().teardown()

    run_settings = settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    started = time.perf_counter()
    run_state_machine_as_test(Counted, settings=run_settings)
    return steps, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=500)
    args = parser.parse_args()
    print(f"BoardMachine against MemoryBoard, {args.examples} derandomized examples")
    print(f"{'mode':<28}{'steps':>8}{'seconds':>10}{'steps/s':>10}")
    rates = {}
    for name, machine in (("checked (as shipped)", Checked), ("unchecked (board only)", Unchecked)):
        steps, seconds = measure(machine, args.examples)
        rates[name] = steps / seconds
        print(f"{name:<28}{steps:>8}{seconds:>10.2f}{rates[name]:>10.0f}")
    ratio = rates["unchecked (board only)"] / rates["checked (as shipped)"]
    print(f"checking costs {ratio:.2f}x: the checked machine runs at {1 / ratio:.0%} of the speed")


if __name__ == "__main__":
    main()
