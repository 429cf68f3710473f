"""Faults, timeouts and async boards: what they cost and how fast they are reported.

Prints, over the same derandomized examples:

* steps/s of MemoryBoard with the per-call timeout on (the default, SIGALRM around each
  call) and off, and the ratio;
* steps/s of the same board driven as an async board (every call a coroutine on the
  machine's loop thread), and the ratio to the sync board;
* tolerant mode on SQLiteBoard behind 5% injected faults: steps/s, faults tolerated,
  violations (must be 0);
* how long a board whose claim hangs forever takes to be reported, against its timeout.

    python benchmarks/bench_faults.py [--examples N] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from bench_machine import measure  # the script's own folder is on sys.path
from hypothesis import settings

from taskboard import ClaimRequest, ManualClock, Task
from taskboard.faults import inject_faults
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import BoardMachine, InfrastructureFault


class AsyncMemoryBoard:
    """MemoryBoard's methods as coroutines."""

    def __init__(self, tasks: Sequence[Task], clock: ManualClock) -> None:
        self.board = MemoryBoard(tasks, clock)

    async def list_tasks(self) -> list[Task]:
        return self.board.list_tasks()

    async def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        return self.board.claim(task_id, agent, request)

    async def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        return self.board.renew(task_id, token, request)

    async def release(self, task_id: str, token: str) -> None:
        self.board.release(task_id, token)

    async def complete(self, task_id: str, token: str) -> None:
        self.board.complete(task_id, token)

    async def fail(self, task_id: str, token: str) -> None:
        self.board.fail(task_id, token)


class HangingClaim(MemoryBoard):
    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        threading.Event().wait()
        raise AssertionError("unreachable")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=1.0, help="for the hung call")
    args = parser.parse_args()
    print(f"{args.examples} derandomized examples per row, best of two runs")
    print(f"{'machine':<46}{'steps':>8}{'seconds':>9}{'steps/s':>9}")
    rates: dict[str, float] = {}

    boards: list[Any] = []

    def row(name: str, machine: type[BoardMachine]) -> None:
        # Best of two: the first run of a process also pays for warming up.
        runs = []
        for _ in range(2):
            boards.clear()  # the fault counts below are the last run's
            runs.append(measure(machine, args.examples))
        steps, seconds = min(runs, key=lambda r: r[1])
        rates[name] = steps / seconds
        print(f"{name:<46}{steps:>8}{seconds:>9.2f}{rates[name]:>9.0f}")

    policy: Any = "accept"
    row("MemoryBoard, call timeout on (default)", BoardMachine.for_board(MemoryBoard))
    row("MemoryBoard, call timeout off", BoardMachine.for_board(MemoryBoard, call_timeout=None))
    row(
        "MemoryBoard as an async board",
        BoardMachine.for_board(AsyncMemoryBoard, expired_lease_policy=policy),
    )

    def faulty(tasks: Sequence[Task], clock: ManualClock) -> Any:
        boards.append(inject_faults(SQLiteBoard(tasks, clock), rate=0.05, seed=1))
        return boards[-1]

    tolerant = BoardMachine.for_board(faulty, tolerate_faults=True, expired_lease_policy="reject")
    row("SQLiteBoard, 5% faults, tolerant mode", tolerant)
    injected = sum(len(board.injected) for board in boards)
    print(f"  faults injected and tolerated: {injected}; violations: 0 (the run passed)")
    on, off = (
        rates["MemoryBoard, call timeout on (default)"],
        rates["MemoryBoard, call timeout off"],
    )
    print(f"the per-call timeout costs {off / on:.2f}x")
    print(
        f"an async board runs at {rates['MemoryBoard as an async board'] / off:.2f}x the sync speed"
    )

    hang = BoardMachine.for_board(HangingClaim, call_timeout=timedelta(seconds=args.timeout))
    case = hang.TestCase
    case.settings = settings(max_examples=1000, database=None, derandomize=True)
    started = time.perf_counter()
    try:
        case("runTest").runTest()
    except InfrastructureFault:
        elapsed = time.perf_counter() - started
        print(
            f"a claim that hangs forever, timeout {args.timeout:g} s: reported after "
            f"{elapsed:.2f} s ({elapsed - args.timeout:+.2f} s over the timeout)"
        )


if __name__ == "__main__":
    main()
