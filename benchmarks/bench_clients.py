"""Clients (SPEC 8): parallel programs per second with threads sharing one client, with a client
per thread, and with each thread in a process of its own.

Each reference host runs the same drawn programs (fixed seed, generation only) three ways,
interleaved over the rounds; the figures are the best round of each, and the ratios are
against threads sharing one client. SQLite runs on database files; PostgreSQL and Redis run
when ``TASKBOARD_POSTGRES_URL`` and ``TASKBOARD_REDIS_URL`` are set.

    python benchmarks/bench_clients.py [--programs 60] [--rounds 3]
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings

from taskboard import Clock, Task
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.redis import RedisBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import BoardMachine, run_parallel_state_machine
from taskboard.stateful._parallel import RUNS_PER_PROGRAM

#: How each way runs a program's threads: (name, clients per thread, processes).
WAYS = (
    ("threads, one shared client", False, False),
    ("threads, a client each", True, False),
    ("processes, a client each", True, True),
)


def hosts(directory: Path) -> dict[str, Callable[[Sequence[Task], Clock], Any]]:
    """Factories of the reference hosts this machine can run, by name."""
    paths = (directory / f"board{n}.db" for n in itertools.count())
    made: dict[str, Callable[[Sequence[Task], Clock], Any]] = {
        "SQLite (file)": lambda tasks, clock: SQLiteBoard(tasks, clock, next(paths)),
    }
    if postgres := os.environ.get("TASKBOARD_POSTGRES_URL"):
        made["PostgreSQL"] = lambda tasks, clock: PostgresBoard(tasks, clock, postgres)
    if redis := os.environ.get("TASKBOARD_REDIS_URL"):
        made["Redis"] = lambda tasks, clock: RedisBoard(tasks, clock, redis)
    return made


def programs_per_second(
    factory: Callable[[Sequence[Task], Clock], Any],
    *,
    with_clients: bool,
    processes: bool,
    programs: int,
) -> float:
    """Programs per second of one run of ``programs`` drawn programs (seed 0, no shrinking)."""
    made = 0

    def counted(tasks: Sequence[Task], clock: Clock) -> Any:
        nonlocal made
        made += 1
        return factory(tasks, clock)

    hooks: dict[str, Any] = {"close": lambda board: board.close()}
    if with_clients:
        hooks["open_client"] = lambda board: board.open_client()
    machine = BoardMachine.for_board(
        counted, parallel_processes=processes, trace_target="", **hooks
    )
    run_settings = settings(
        max_examples=programs,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    started = time.perf_counter()
    run_parallel_state_machine(seed(0)(machine), settings=run_settings)
    elapsed = time.perf_counter() - started
    return made / RUNS_PER_PROGRAM / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--programs", type=int, default=60, help="programs per measured run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        for name, factory in hosts(Path(directory)).items():
            best = {way: 0.0 for way, _, _ in WAYS}
            for _ in range(args.rounds):
                for way, with_clients, processes in WAYS:
                    rate = programs_per_second(
                        factory,
                        with_clients=with_clients,
                        processes=processes,
                        programs=args.programs,
                    )
                    best[way] = max(best[way], rate)
            anchor = best[WAYS[0][0]]
            print(f"{name}: programs/s (best of {args.rounds}, {args.programs} programs a run)")
            for way, rate in best.items():
                print(f"  {way:<28} {rate:7.1f}   x{rate / anchor:.2f}")


if __name__ == "__main__":
    main()
