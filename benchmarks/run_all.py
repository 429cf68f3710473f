"""Every performance figure, each as a ratio against its anchor measured in the same run.

- BoardMachine against a bare, hand-written Hypothesis RuleBasedStateMachine that drives
  the same MemoryBoard with the same kinds of calls (same settings; best of three,
  interleaved): the checker's price.
- An async board (MemoryBoard's methods as coroutines) against the same board called
  synchronously, both through BoardMachine.
- check() on 100,000 tasks, each shape against a chain.
- taskboard fuzz with 2 workers against 1 (steps per second).
- The linearizability check at 10,000 operations against 1,000.

    python benchmarks/run_all.py [--examples 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    multiple,
    rule,
    run_state_machine_as_test,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_check
import bench_linearizability
from bench_faults import AsyncMemoryBoard
from bench_machine import Checked

from taskboard import BoardError, ClaimRequest, ManualClock, Task, check
from taskboard._fuzz import fuzz
from taskboard.hosts.memory import MemoryBoard
from taskboard.model import BoardModel, check_history
from taskboard.stateful import BoardMachine
from taskboard.stateful._session import ExampleStats, on_example_end

TASK_IDS = ("t1", "t2", "t3")
AGENTS = ("a1", "a2")
MS = timedelta(milliseconds=1)


def run_settings(examples: int) -> settings:
    """The settings both machines run under: the same examples, generation only."""
    return settings(
        max_examples=examples,
        stateful_step_count=50,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )


# -- the bare machine ------------------------------------------------------------------------------


class BareMachine(RuleBasedStateMachine):
    """What a careful user writes by hand: claims, renews, releases and completes with the
    tokens claims returned, stale ones included, under a manual clock; each call's contract
    error is accepted, and a claim's lease must name its agent. No model, no snapshot."""

    leases = Bundle("leases")
    steps = 0

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
        self.board = MemoryBoard([Task(task_id) for task_id in TASK_IDS], self.clock)

    @rule(
        target=leases,
        task=st.sampled_from(TASK_IDS),
        agent=st.sampled_from(AGENTS),
        ttl=st.integers(0, 3),
    )
    def claim(self, task: str, agent: str, ttl: int) -> Any:
        BareMachine.steps += 1
        try:
            got = self.board.claim(task, agent, ClaimRequest(ttl * MS))
        except BoardError:
            return multiple()
        assert got.owner == agent
        assert got.lease is not None
        return (task, got.lease.token)

    @rule(lease=leases, ttl=st.integers(0, 3))
    def renew(self, lease: tuple[str, str], ttl: int) -> None:
        BareMachine.steps += 1
        try:
            got = self.board.renew(lease[0], lease[1], ClaimRequest(ttl * MS))
        except BoardError:
            return
        assert got.lease is not None
        assert got.lease.token == lease[1]

    @rule(lease=leases)
    def release(self, lease: tuple[str, str]) -> None:
        BareMachine.steps += 1
        with contextlib.suppress(BoardError):
            self.board.release(*lease)

    @rule(lease=leases)
    def complete(self, lease: tuple[str, str]) -> None:
        BareMachine.steps += 1
        with contextlib.suppress(BoardError):
            self.board.complete(*lease)

    @rule(ticks=st.integers(1, 5))
    def advance_clock(self, ticks: int) -> None:
        BareMachine.steps += 1
        self.clock.advance(ticks * MS)


class CheckedAsync(BoardMachine):
    """BoardMachine on MemoryBoard with coroutine methods (awaits that never block)."""

    def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> AsyncMemoryBoard:
        return AsyncMemoryBoard(tasks, clock)


def machine_rate(machine: type[RuleBasedStateMachine], examples: int) -> float:
    """Steps per second of one derandomized run of ``examples`` examples."""
    counted = [0]

    def count(finished: ExampleStats) -> None:
        counted[0] += finished.steps

    BareMachine.steps = 0
    with on_example_end(count):
        started = time.perf_counter()
        run_state_machine_as_test(machine, settings=run_settings(examples))
        seconds = time.perf_counter() - started
    steps = BareMachine.steps if machine is BareMachine else counted[0]
    return steps / seconds


def best_interleaved(
    runs: dict[str, Callable[[], float]], rounds: int, *, higher_is_better: bool = True
) -> dict[str, float]:
    """Each run ``rounds`` times, taking turns; the best figure of each."""
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, run in runs.items():
            figure = run()
            if name not in best:
                best[name] = figure
            else:
                best[name] = (
                    max(best[name], figure) if higher_is_better else min(best[name], figure)
                )
    return best


# -- the figures -----------------------------------------------------------------------------------


def section(title: str) -> None:
    print(f"\n{title}")


def compare_machines(
    title: str,
    anchor: tuple[str, type[RuleBasedStateMachine]],
    other: tuple[str, type[RuleBasedStateMachine]],
    examples: int,
    rounds: int,
    target: str,
) -> None:
    """Steps/s of two machines, best of ``rounds`` interleaved, and the other's ratio."""
    section(f"{title} ({examples} examples, best of {rounds}, interleaved)")
    best = best_interleaved(
        {
            name: functools.partial(machine_rate, machine, examples)
            for name, machine in (anchor, other)
        },
        rounds,
    )
    for name, rate in best.items():
        print(f"  {name:<28} {rate:8,.0f} steps/s")
    ratio = f"{other[0]} / {anchor[0]}"
    print(f"  {ratio:<28} x{best[other[0]] / best[anchor[0]]:.2f}  ({target})")


def check_figures(size: int) -> None:
    section(f"check() on {size:,} tasks (best of {bench_check.RUNS}), against a chain")
    shapes = {
        "chain": bench_check.chain,
        "random DAG": bench_check.random_dag,
        "one cycle": bench_check.cycle,
        "small cycles": bench_check.small_cycles,
        "tangle": bench_check.tangle,
        "chorded cycle": bench_check.chorded_cycle,
    }
    times = {name: bench_check.best_of(make(size))[0] for name, make in shapes.items()}
    for name, seconds in times.items():
        problems = len(check(shapes[name](size))) if name == "one cycle" else None
        extra = f", {problems:,} problems" if problems is not None else ""
        print(
            f"  {name:<28} {seconds * 1000:8.0f} ms  x{seconds / times['chain']:.2f}"
            f"{extra}{'' if seconds < 1 else '  (over 1 s)'}"
        )


def fuzz_figures(budget: float) -> None:
    section(f"taskboard fuzz on MemoryBoard, sequential, {budget:g} s each")
    rates = {}
    with tempfile.TemporaryDirectory() as traces:
        for workers in (1, 2):
            report = fuzz(
                "taskboard.hosts.memory:MemoryBoard",
                budget=budget,
                seed=1,
                workers=workers,
                mode="sequential",
                progress=None,
                database=None,
                trace_dir=traces,
            )
            rates[workers] = report.steps_per_second
            print(
                f"  {workers} worker{'s' if workers > 1 else ' '}{'':20}"
                f"{report.steps_per_second:8,.0f} steps/s"
            )
    print(f"  2 workers / 1                x{rates[2] / rates[1]:.2f}  (2 cores)")


def linearizability_figures() -> None:
    section("linearizability check of valid histories, 10,000 operations against 1,000")
    seconds = {}
    for size in (1_000, 10_000):
        tasks, history, final = bench_linearizability.generate(size, seed=size)
        model = BoardModel.start(tasks)
        started = time.perf_counter()
        result = check_history(model, history, bench_linearizability.NOW, final_snapshot=final)
        seconds[size] = time.perf_counter() - started
        print(
            f"  {size:>6,} operations            {seconds[size] * 1000:8.0f} ms  ({result.verdict})"
        )
    print(
        f"  10,000 / 1,000               x{seconds[10_000] / seconds[1_000]:.2f}"
        "  (10x the operations)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="examples per machine run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    parser.add_argument("--check-size", type=int, default=100_000)
    parser.add_argument("--fuzz-seconds", type=float, default=10.0)
    args = parser.parse_args()
    print(
        f"taskboard benchmarks on {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}"
    )
    compare_machines(
        "BoardMachine vs a bare Hypothesis machine, on MemoryBoard",
        ("BoardMachine", Checked),
        ("bare machine", BareMachine),
        args.examples,
        args.rounds,
        "target <= 1.20",
    )
    compare_machines(
        "async vs sync board through BoardMachine",
        ("sync MemoryBoard", Checked),
        ("async MemoryBoard", CheckedAsync),
        args.examples,
        args.rounds,
        "target >= 0.85",
    )
    check_figures(args.check_size)
    fuzz_figures(args.fuzz_seconds)
    linearizability_figures()


if __name__ == "__main__":
    main()
