"""Wall-clock mode (SPEC 7): steps per second, time to catch each server-clock mutant, and
false alarms over a long run.

Boards that keep their own time are run with ``clock_mode = "wall"``: MemoryBoard and
SQLiteBoard on the SystemClock the machine hands them, and, when ``TASKBOARD_REDIS_URL`` and
``TASKBOARD_POSTGRES_URL`` are set, the server-clock reference hosts (Redis ``TIME``,
PostgreSQL ``clock_timestamp()``) and the server-clock mutants. The manual clock's rate on
MemoryBoard is printed beside them for the ratio.

    python benchmarks/bench_wall_clock.py [--examples N] [--long SECONDS] [--seeds K]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, Clock, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import BoardMachine, ContractViolation
from taskboard.stateful._reports import failures_reported
from taskboard.stateful._session import ExampleStats, on_example_end

Factory = Callable[[Sequence[Task], Clock], Board]


@contextmanager
def counting() -> Iterator[list[int]]:
    """Steps per example of every machine run inside the block."""
    steps: list[int] = []

    def listen(example: ExampleStats) -> None:
        steps.append(example.steps)

    with on_example_end(listen):
        yield steps


def run(machine: type[BoardMachine], examples: int, *, shrink: bool, seed_: int) -> float:
    """Seconds to run ``examples`` examples (or to find and, with ``shrink``, shrink a failure)."""
    phases = [Phase.generate, Phase.shrink] if shrink else [Phase.generate]
    chosen = settings(
        max_examples=examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=phases,
        report_multiple_bugs=False,
    )
    started = time.perf_counter()
    with failures_reported(machine):
        seed(seed_)(machine)
        run_state_machine_as_test(machine, settings=chosen)
    return time.perf_counter() - started


def machine_for(factory: Any, mode: str, **attributes: Any) -> type[BoardMachine]:
    return BoardMachine.for_board(factory, clock_mode=mode, trace_target="", **attributes)


def server_targets() -> list[tuple[str, Factory, dict[str, Any]]]:
    redis_url = os.environ.get("TASKBOARD_REDIS_URL")
    postgres_url = os.environ.get("TASKBOARD_POSTGRES_URL")
    targets: list[tuple[str, Factory, dict[str, Any]]] = []
    if redis_url:
        from taskboard.hosts.redis import RedisBoard

        def redis_board(tasks: Sequence[Task], clock: Clock) -> Board:
            return RedisBoard(tasks, "server", redis_url)

        targets.append(
            ("RedisBoard(clock='server')", redis_board, {"expired_lease_policy": "reject"})
        )
    if postgres_url:
        from taskboard.hosts.postgres import PostgresBoard

        def postgres_board(tasks: Sequence[Task], clock: Clock) -> Board:
            return PostgresBoard(tasks, "server", postgres_url)

        targets.append(
            ("PostgresBoard(clock='server')", postgres_board, {"expired_lease_policy": "reject"})
        )
    return targets


def throughput(examples: int) -> None:
    print(f"\nthroughput, {examples} examples each (generation only)")
    print(f"{'board':<32}{'clock':>7}{'steps':>8}{'seconds':>9}{'steps/s':>9}{'ms/example':>12}")
    rows: list[tuple[str, str, Any, dict[str, Any]]] = [
        ("MemoryBoard", "manual", MemoryBoard, {}),
        ("MemoryBoard", "wall", MemoryBoard, {}),
        ("SQLiteBoard", "wall", SQLiteBoard, {}),
    ]
    rows += [(name, "wall", factory, extra) for name, factory, extra in server_targets()]
    manual_rate = None
    for name, mode, factory, extra in rows:
        with counting() as steps:
            seconds = run(machine_for(factory, mode, **extra), examples, shrink=False, seed_=0)
        rate = sum(steps) / seconds
        manual_rate = manual_rate or rate
        per_example = 1000 * seconds / max(len(steps), 1)
        print(f"{name:<32}{mode:>7}{sum(steps):>8}{seconds:>9.1f}{rate:>9.0f}{per_example:>12.0f}")
    print(f"(the manual clock runs at {manual_rate:.0f} steps/s: wall mode costs the sleeps)")


def time_to_catch(seeds: int) -> None:
    url = os.environ.get("TASKBOARD_REDIS_URL")
    if not url:
        print("\nserver-clock mutants: skipped (TASKBOARD_REDIS_URL is not set)")
        return
    from taskboard.hosts.server_mutants import SERVER_CLOCK_MUTANTS

    print(f"\nserver-clock mutants in wall mode, {seeds} seeds, up to 300 examples each")
    print(f"{'mutant':<30}{'caught':>8}{'to find (s)':>13}{'with shrink (s)':>17}{'steps':>7}")
    for mutant in SERVER_CLOCK_MUTANTS:

        def factory(tasks: Sequence[Task], clock: Clock, mutant: Any = mutant) -> Board:
            return mutant(tasks, clock, url)

        found, shrunk, lengths, caught = [], [], [], 0
        for k in range(seeds):
            for shrink, times in ((False, found), (True, shrunk)):
                started = time.perf_counter()
                try:
                    run(machine_for(factory, "wall"), 300, shrink=shrink, seed_=k)
                except ContractViolation as violation:
                    times.append(time.perf_counter() - started)
                    if shrink:
                        caught += 1
                        lengths.append(violation.step.index if violation.step else 0)
        median = sorted(found)[len(found) // 2] if found else float("nan")
        median_shrunk = sorted(shrunk)[len(shrunk) // 2] if shrunk else float("nan")
        steps = max(lengths, default=0)
        print(
            f"{mutant.__name__:<30}{caught:>5}/{seeds:<2}{median:>13.2f}{median_shrunk:>17.1f}{steps:>7}"
        )


def false_alarms(seconds: float) -> None:
    print(f"\nfalse alarms: each correct board in wall mode for {seconds:.0f} s")
    targets: list[tuple[str, Any, dict[str, Any]]] = [
        ("MemoryBoard", MemoryBoard, {}),
        ("SQLiteBoard", SQLiteBoard, {}),
        *server_targets(),
    ]
    for name, factory, extra in targets:
        machine = machine_for(factory, "wall", **extra)
        deadline = time.monotonic() + seconds
        alarms, batch = 0, 0
        with counting() as steps:
            while time.monotonic() < deadline:
                try:
                    run(machine, 100, shrink=False, seed_=1000 + batch)
                except ContractViolation as violation:
                    alarms += 1
                    print(str(violation).splitlines()[0], file=sys.stderr)
                batch += 1
        print(f"{name:<32}{len(steps):>7} examples {sum(steps):>8} steps  {alarms} false alarms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--long", type=float, default=60.0, help="seconds per board, false alarms")
    args = parser.parse_args()
    throughput(args.examples)
    time_to_catch(args.seeds)
    false_alarms(args.long)


if __name__ == "__main__":
    main()
