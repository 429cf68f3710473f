"""Races under controlled scheduling against today's threads, on the same seeds.

For each race mutant (taskboard.hosts.race_mutants; with TASKBOARD_POSTGRES_URL set, also
taskboard.hosts.postgres_race_mutants, on the wall clock; with ``--virtual``, those again on a
throwaway PostgreSQL on the checker's clock, taskboard.servers.Postgres, controlled only) and
each seed, the parallel mode
runs in each of ``--modes``: ``race_scheduling = "os"`` (threads as the operating system runs
them) and ``"controlled"`` (one thread at a time at the storage round trips, as drawn), the
latter once per exploration of ``--exploration``: ``random`` (a drawn choice at each point)
and ``pctD`` (``race_exploration = "pct"``, ``pct_depth = D``). It
prints, per mode, how many seeds caught the race, the median programs (Hypothesis examples)
and seconds to the first violation, the size of the shrunk program (threads, calls), and how
many of ``--replays`` replays of its trace fail on their first run of the program.

A board command's race (``--exec NAME=COMMAND``; the Go board whose claim is atomic only inside
one process, built from go/cmd/fileboard, whenever Go is installed) races each thread on a
client process of its own; under control each request is a point, and so is each
``yield_point`` the child marks mid-call.

Then each correct reference host (SQLiteBoard; RedisBoard when TASKBOARD_REDIS_URL is set;
PostgresBoard on its server's clock, on the wall clock, when TASKBOARD_POSTGRES_URL is)
runs ``--max-examples`` controlled programs per seed: the false alarms must be zero.

    python benchmarks/bench_races.py [--seeds 5] [--max-examples 200] [--replays 10] [--only NAME]
        [--modes os,controlled] [--exploration random,pct1,pct2,pct3]
        [--exec NAME=COMMAND ...] [--virtual]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, seed, settings

from taskboard import Clock, Task
from taskboard.hosts.memory import MemoryBoard
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

MODES = ("os", "controlled")
US = timedelta(microseconds=1)


def mode_settings(mode: str) -> dict[str, Any]:
    """The machine settings of a mode: ``os``, or a controlled exploration: ``random``
    (``controlled`` is the same) or ``pct1`` ... ``pct9``."""
    if mode == "os":
        return {"race_scheduling": "os"}
    if mode in ("random", "controlled"):
        return {"race_scheduling": "controlled", "race_exploration": "random"}
    if mode.startswith("pct") and mode[3:].isdigit():
        depth = int(mode[3:])
        return {"race_scheduling": "controlled", "race_exploration": "pct", "pct_depth": depth}
    raise SystemExit(f"--exploration: unknown {mode!r} (random, pct1, pct2, ...)")


def labels(modes: str, explorations: str) -> list[str]:
    """The modes to run: each of ``modes``, ``controlled`` once per exploration."""
    chosen = []
    for mode in (m.strip() for m in modes.split(",") if m.strip()):
        if mode == "controlled":
            chosen += [e.strip() for e in explorations.split(",") if e.strip()]
        else:
            chosen.append(mode)
    for mode in chosen:
        mode_settings(mode)  # an unknown one stops the run before it starts
    return chosen


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
    machine settings it needs; or, for a board command (``command``), the command."""

    name: str
    factory: Any
    attributes: dict[str, Any]
    command: str = ""
    #: The modes it runs in. On the virtual clock the threads meet one standing instant, so
    #: they cannot cross an until: only the controlled mode moves the clock inside a race.
    modes: tuple[str, ...] = MODES

    def machine(self, mode: str, directory: Path) -> Any:
        """The machine that races it in ``mode`` (see :func:`mode_settings`)."""
        if self.command:
            return BoardMachine.for_command(self.command, **mode_settings(mode))
        factory = self.factory(directory)
        return BoardMachine.for_board(
            factory, trace_target="", **mode_settings(mode), **self.attributes
        )

    def runs_in(self, mode: str) -> bool:
        """True when it races in ``mode`` (an exploration is the controlled mode)."""
        return ("os" if mode == "os" else "controlled") in self.modes


def races(commands: Sequence[str], directory: Path, virtual: Any = None) -> list[Race]:
    """The SQLite race mutants, the PostgreSQL ones when a server is configured (and on a
    ``virtual`` server, a started ``taskboard.servers.Postgres``, when given), the Go
    board whose claim is atomic only inside one process when Go is installed, and each of
    ``commands`` (``NAME=COMMAND``)."""
    found = [Race(b.__name__, functools.partial(files, b), {}) for b in RACE_MUTANTS]
    url = os.environ.get("TASKBOARD_POSTGRES_URL")
    if url or virtual is not None:
        from taskboard.hosts.postgres_race_mutants import POSTGRES_RACE_MUTANTS

        for board in POSTGRES_RACE_MUTANTS if url else ():
            on_server = functools.partial(on_postgres, board, url)
            found.append(Race(board.__name__, on_server, {"clock_mode": "wall"}))
        for board in POSTGRES_RACE_MUTANTS if virtual is not None else ():
            settings = {"clock_mode": "virtual", "server": virtual, "clock_resolution": US}
            on_virtual = functools.partial(on_postgres, board, virtual.url, clock="server")
            name = f"{board.__name__} (virtual)"
            found.append(Race(name, on_virtual, settings, modes=("controlled",)))
    fileboard = go_fileboard(directory)
    if fileboard is not None:
        mutant = f"{fileboard} -mutant claim-atomic-in-process"
        found.append(Race("go claim-atomic-in-process", None, {}, mutant))
    for named in commands:
        name, _, command = named.partition("=")
        found.append(Race(name, None, {}, command))
    return found


def go_fileboard(directory: Path) -> Path | None:
    """go/cmd/fileboard built into ``directory``; None without Go."""
    go = shutil.which("go")
    if go is None:
        return None
    built = directory / "fileboard"
    module = Path(__file__).resolve().parent.parent / "go"
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off"}
    subprocess.run(
        [go, "build", "-o", str(built), "./cmd/fileboard"], cwd=module, env=env, check=True
    )
    return built


def on_postgres(board: type, url: str, directory: Path, clock: str | None = None) -> Any:
    """A factory of ``board`` boards on the server at ``url`` (``directory`` is unused), on
    the machine's clock or on ``clock``."""
    return lambda tasks, machine_clock: board(tasks, clock or machine_clock, url)


def run(
    race: Race, mode: str, run_seed: int, max_examples: int, replays: int, directory: Path
) -> Catch | None:
    """One seed of one mode: the catch, or None when the race was not caught."""
    machine = race.machine(mode, directory / f"{race.name}-{mode}-{run_seed}")
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
            result = replay_trace(recorded[0], machine)
            failing += not result.passed and result.steps_run == 1
        calls = len(program.prefix) + sum(len(ops) for ops in program.threads)
        return Catch(first[0][0], first[0][1], len(program.threads), calls, failing)
    finally:
        _parallel.run_program = run_program  # type: ignore[assignment]
    return None


def median(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.3g}" if values else "-"


def false_alarms(
    seeds: int, max_examples: int, directory: Path, virtual: Any = None, mode: str = "random"
) -> list[str]:
    """Each correct reference host under control, with the exploration ``mode``: one line
    each, with its false alarms."""
    files_of_mode = files(SQLiteBoard, directory / f"ok-{mode}")
    hosts: list[tuple[str, Any]] = [("SQLiteBoard", files_of_mode)]
    hosts.append(("MemoryBoard", MemoryBoard))
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
    if virtual is not None:
        from taskboard.hosts.postgres import PostgresBoard

        def on_virtual(tasks: Sequence[Task], clock: Clock) -> Any:
            return PostgresBoard(tasks, "server", virtual.url)

        hosts.append(("PostgresBoard (server clock, virtual)", on_virtual))
    fileboard = go_fileboard(directory)
    if fileboard is not None:  # a command: its racing threads are client processes
        hosts.append(("go fileboard (client processes)", str(fileboard)))
    lines = []
    for name, factory in hosts:
        alarms, started = 0, time.perf_counter()
        wall: dict[str, Any] = {"clock_mode": "wall"} if "wall)" in name else {}
        if "virtual)" in name:
            wall = {"clock_mode": "virtual", "server": virtual, "clock_resolution": US}
        for run_seed in range(seeds):
            if isinstance(factory, str):
                machine = BoardMachine.for_command(factory, **mode_settings(mode))
            else:
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
    parser.add_argument(
        "--controls", type=int, default=100, help="programs per correct host (0: none)"
    )
    parser.add_argument("--only", default="", help="measure only the races whose name has this")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: os,controlled")
    parser.add_argument(
        "--exploration",
        default="random",
        help="the controlled mode's explorations, comma-separated: random, pct1, pct2, ...",
    )
    parser.add_argument(
        "--exec",
        action="append",
        default=[],
        metavar="NAME=COMMAND",
        help="also measure this board command's race (its clients are processes)",
    )
    parser.add_argument(
        "--virtual",
        action="store_true",
        help="also the PostgreSQL races and host on a throwaway server on the checker's clock",
    )
    args = parser.parse_args()
    labels(args.modes, args.exploration)  # an unknown exploration stops the run here
    with contextlib.ExitStack() as stack:
        virtual = None
        if args.virtual:
            import taskboard.servers

            virtual = stack.enter_context(taskboard.servers.Postgres())
        measure(args, virtual)


def measure(args: argparse.Namespace, virtual: Any) -> None:
    """Print the figures (see the module docstring)."""
    with tempfile.TemporaryDirectory(prefix="taskboard-races-") as temp:
        directory = Path(temp)
        print(
            f"races: {args.seeds} seeds, up to {args.max_examples} programs each; medians over "
            f"the seeds that caught the race; replays failing on their first run, of "
            f"{args.replays}"
        )
        for race in (r for r in races(args.exec, directory, virtual) if args.only in r.name):
            for mode in (m for m in labels(args.modes, args.exploration) if race.runs_in(m)):
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
            explorations = [m for m in labels(args.modes, args.exploration) if m != "os"]
            for mode in explorations or ["random"]:
                for line in false_alarms(args.seeds, args.controls, directory, virtual, mode):
                    print(line)


if __name__ == "__main__":
    main()
