"""Races under controlled scheduling against today's threads, on the same seeds.

For each race mutant (taskboard.hosts.race_mutants; with TASKBOARD_POSTGRES_URL set, also
taskboard.hosts.postgres_race_mutants, on the wall clock) and each seed, the parallel mode
runs once per exploration of ``--exploration``: ``os`` (``race_scheduling = "os"``,
threads as the operating system runs them), ``random`` (``"controlled"``, one thread at a
time at the storage round trips, a drawn choice at each) and ``pctD`` (controlled, with
``race_exploration = "pct"`` and ``pct_depth = D``). It prints, per exploration, how many
seeds caught the race, the median programs (Hypothesis examples) and seconds to the first
violation, the size of the shrunk program (threads, calls), and how many of ``--replays``
replays of its trace fail on their first run of the program.

Then each correct reference host (SQLiteBoard; RedisBoard when TASKBOARD_REDIS_URL is set;
PostgresBoard on its server's clock, on the wall clock, when TASKBOARD_POSTGRES_URL is)
runs ``--max-examples`` controlled programs per seed: the false alarms must be zero.

    python benchmarks/bench_races.py [--seeds 5] [--max-examples 200] [--replays 10] [--only NAME]
        [--exploration os,random,pct1,pct2,pct3] [--controls 100]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings

from taskboard import Clock, Task
from taskboard.hosts.race_mutants import RACE_MUTANTS
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.stateful import (
    BoardMachine,
    ContractViolation,
    InfrastructureFault,
    _parallel,
    replay_trace,
    run_parallel_state_machine,
    violations_in,
)
from taskboard.stateful._steps import ParallelProgram

#: The explorations ``--exploration`` takes by default.
MODES = ("os", "random")


def mode_settings(mode: str) -> dict[str, Any]:
    """The machine settings of an exploration: ``os``, ``random`` or ``pct1`` ... ``pct9``."""
    if mode == "os":
        return {"race_scheduling": "os"}
    if mode == "random":
        return {"race_scheduling": "controlled", "race_exploration": "random"}
    if mode.startswith("pct") and mode[3:].isdigit():
        depth = int(mode[3:])
        return {"race_scheduling": "controlled", "race_exploration": "pct", "pct_depth": depth}
    raise SystemExit(f"--exploration: unknown {mode!r} (os, random, pct1, pct2, ...)")


@dataclass
class Catch:
    programs: int
    seconds: float
    threads: int
    calls: int
    first_run_replays: int


def files(board: type, directory: Path) -> Any:
    """A factory of ``board`` boards, each on a fresh file in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / f"board{n}.db" for n in itertools.count())

    def make(tasks: Sequence[Task], clock: Clock) -> Any:
        return board(tasks, clock, next(paths))

    return make


@dataclass(frozen=True)
class Race:
    """A race mutant to measure: its name, how to make its factory in a directory, and the
    machine settings it needs."""

    name: str
    factory: Any
    attributes: dict[str, Any]


def races() -> list[Race]:
    """The SQLite race mutants, and the PostgreSQL ones when a server is configured."""
    found = [Race(b.__name__, functools.partial(files, b), {}) for b in RACE_MUTANTS]
    url = os.environ.get("TASKBOARD_POSTGRES_URL")
    if url:
        from taskboard.hosts.postgres_race_mutants import POSTGRES_RACE_MUTANTS

        for board in POSTGRES_RACE_MUTANTS:
            on_server = functools.partial(on_postgres, board, url)
            found.append(Race(board.__name__, on_server, {"clock_mode": "wall"}))
    return found


def on_postgres(board: type, url: str, directory: Path) -> Any:
    """A factory of ``board`` boards on the server at ``url`` (``directory`` is unused)."""
    return lambda tasks, clock: board(tasks, clock, url)


def run(
    race: Race, mode: str, run_seed: int, max_examples: int, replays: int, directory: Path
) -> Catch | None:
    """One seed of one mode: the catch, or None when the race was not caught."""
    factory = race.factory(directory / f"{race.name}-{mode}-{run_seed}")
    machine = BoardMachine.for_board(
        factory, trace_target="", **mode_settings(mode), **race.attributes
    )
    programs: list[ParallelProgram] = []
    first: list[tuple[int, float]] = []
    started = time.perf_counter()
    run_program = _parallel.run_program

    def counted(machine_cls: Any, program: ParallelProgram, **kwargs: Any) -> bool:
        if not programs or programs[-1] != program:
            programs.append(program)  # the runs of one program count once
        try:
            return run_program(machine_cls, program, **kwargs)
        except ContractViolation:
            if not first:
                first.append((len(programs), time.perf_counter() - started))
            raise

    run_settings = settings(
        max_examples=max_examples,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
    _parallel.run_program = counted  # type: ignore[assignment]
    try:
        run_parallel_state_machine(seed(run_seed)(machine), settings=run_settings)
    except InfrastructureFault as fault:
        # A hung race (a loaded machine, a lock wait): this seed did not catch the race.
        print(
            f"    seed {run_seed} {mode}: not caught: {str(fault).splitlines()[0]}", file=sys.stderr
        )
        return None
    except ContractViolation as caught:
        recorded = [
            v.recording
            for v in violations_in(caught)
            if v.recording is not None and v.recording.program is not None
        ]
        if not recorded:  # the shrunk failure is a sequential one: no program to replay
            print(f"    seed {run_seed} {mode}: {caught}", file=sys.stderr)
            return Catch(first[0][0], first[0][1], 0, 0, 0)
        program = recorded[0].program
        failing = 0
        for _ in range(replays):
            result = replay_trace(recorded[0], factory)
            failing += not result.passed and result.steps_run == 1
        calls = len(program.prefix) + sum(len(ops) for ops in program.threads)
        return Catch(first[0][0], first[0][1], len(program.threads), calls, failing)
    finally:
        _parallel.run_program = run_program  # type: ignore[assignment]
    return None


def median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.3g}" if values else "-"


def false_alarms(seeds: int, max_examples: int, directory: Path, mode: str) -> list[str]:
    """Each correct reference host under control: one line each, with its false alarms."""
    hosts: list[tuple[str, Any]] = [("SQLiteBoard", files(SQLiteBoard, directory / f"ok-{mode}"))]
    url = os.environ.get("TASKBOARD_REDIS_URL")
    if url:
        from taskboard.hosts.redis import RedisBoard

        hosts.append(("RedisBoard", lambda tasks, clock: RedisBoard(tasks, clock, url)))
    postgres = os.environ.get("TASKBOARD_POSTGRES_URL")
    if postgres:
        from taskboard.hosts.postgres import PostgresBoard

        def on_server_clock(tasks: Sequence[Task], clock: Clock) -> Any:
            return PostgresBoard(tasks, "server", postgres)

        hosts.append(("PostgresBoard (server clock, wall)", on_server_clock))
    lines = []
    for name, factory in hosts:
        alarms, started = 0, time.perf_counter()
        wall: dict[str, Any] = {"clock_mode": "wall"} if name.startswith("PostgresBoard") else {}
        for run_seed in range(seeds):
            machine = BoardMachine.for_board(factory, **mode_settings(mode), **wall)
            try:
                run_parallel_state_machine(
                    seed(run_seed)(machine),
                    settings=settings(max_examples=max_examples, database=None, deadline=None),
                )
            except ContractViolation:
                alarms += 1
        seconds = time.perf_counter() - started
        lines.append(
            f"  {name}: {alarms} false alarms in {seeds} x {max_examples} controlled programs "
            f"({mode}, {seconds:.1f} s)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--max-examples", type=int, default=200)
    parser.add_argument("--replays", type=int, default=10)
    parser.add_argument("--controls", type=int, default=100, help="programs per correct host")
    parser.add_argument("--only", default="", help="measure only the races whose name has this")
    parser.add_argument(
        "--exploration",
        default=",".join(MODES),
        help="the explorations to compare, comma-separated: os, random, pct1, pct2, pct3, ...",
    )
    args = parser.parse_args()
    modes = [mode.strip() for mode in args.exploration.split(",") if mode.strip()]
    for mode in modes:
        mode_settings(mode)  # an unknown one stops the run before it starts
    with tempfile.TemporaryDirectory(prefix="taskboard-races-") as temp:
        directory = Path(temp)
        print(
            f"races: {args.seeds} seeds, up to {args.max_examples} programs each; medians over "
            f"the seeds that caught the race; replays failing on their first run, of "
            f"{args.replays}"
        )
        for race in (r for r in races() if args.only in r.name):
            for mode in modes:
                catches = [
                    catch
                    for s in range(args.seeds)
                    if (catch := run(race, mode, s, args.max_examples, args.replays, directory))
                ]
                print(
                    f"  {race.name:<28} {mode:<11} caught {len(catches)}/{args.seeds}  "
                    f"programs to catch {median([c.programs for c in catches]):>5}  "
                    f"seconds {median([c.seconds for c in catches]):>6}  "
                    f"shrunk threads {median([c.threads for c in catches])} "
                    f"calls {median([c.calls for c in catches])}  "
                    f"replays failing at once "
                    f"{median([c.first_run_replays for c in catches])}/{args.replays}"
                )
        if args.controls:
            print("correct boards under controlled scheduling:")
            for mode in (m for m in modes if m != "os"):
                for line in false_alarms(args.seeds, args.controls, directory, mode):
                    print(line)


if __name__ == "__main__":
    main()
