"""Power: how fast the checker catches each mutant of the bug gallery, and how short the trace is.

Sequential mutants run through BoardMachine under the given profile-like settings, once per
seed; the two concurrency-only mutants run through the criteria, round after round. For each
mutant it prints whether it was caught, the examples (boards) and seconds until the first
violation, and the length of the shrunk trace in steps; medians over seeds. Then totals and
medians over the gallery.

The nemesis mutants (SPEC 9) get a third table: each with the hooks off, then with them on.

The client-race mutants (SPEC 8) get a table of their own: each runs through the parallel
mode on SQLite files, once with every thread sharing one client (the control, which must
pass) and once per seed with a client per thread; and through concurrent_claim or
duplicate_token_submit with a client per participant.

    python benchmarks/bench_power.py [--seeds 3] [--max-examples 100] [--markdown docs/power.md]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, Clock, Task, concurrent_claim, duplicate_token_submit
from taskboard.hosts import client_mutants, mutants, nemesis_mutants
from taskboard.model import Step
from taskboard.stateful import (
    BoardMachine,
    ContractViolation,
    _parallel,
    run_parallel_state_machine,
    violations_in,
)
from taskboard.stateful._hypothesis import shrinking_for_at_most
from taskboard.stateful._session import Session

#: Correct boards run with the nemesis too: a false alarm there would void the table.
#: Seconds Hypothesis may shrink one failure, as `taskboard fuzz --shrink-budget` bounds it.
SHRINK_BUDGET = 20.0
#: A wall-clock mutant runs with at most this many seeds and examples.
WALL_SEEDS = 5
WALL_EXAMPLES = 40
NEMESIS_CONTROLS = (nemesis_mutants.FileBoard, nemesis_mutants.PeriodicSnapshotBoard)


@dataclass
class Result:
    name: str
    caught: int
    runs: int
    examples: float | None
    seconds: float | None
    steps: float | None
    how: str


def run_machine(
    board: type,
    run_seed: int,
    max_examples: int,
    steps: int = 50,
    base: type[BoardMachine] = BoardMachine,
) -> tuple[int, float, int] | None:
    """(examples until caught, seconds until caught, shrunk steps), or None if not caught.
    ``base`` is the machine class to run (its hooks and attributes), making ``board``s."""
    made = 0
    first: list[tuple[int, float]] = []
    started = time.perf_counter()

    class TimedSession(Session):
        def fail_with(
            self,
            violation: ContractViolation,
            step: Step | None,
            *,
            cause: BaseException | None = None,
        ) -> NoReturn:
            if not first:
                first.append((made, time.perf_counter() - started))
            super().fail_with(violation, step, cause=cause)

    class Machine(base):  # type: ignore[valid-type,misc]
        _session_class = TimedSession

        def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
            nonlocal made
            made += 1
            result: Board = board(tasks, clock)
            return result

    run_settings = settings(
        max_examples=max_examples,
        stateful_step_count=steps,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
    try:
        # As `taskboard fuzz --shrink-budget` does: a wall-clock replay costs its sleeps.
        with shrinking_for_at_most(SHRINK_BUDGET):
            run_state_machine_as_test(seed(run_seed)(Machine), settings=run_settings)
    except (ContractViolation, Flaky) as caught:
        # A board whose bug depends on its own random tokens can make Hypothesis's replay
        # diverge (Flaky...); the violation is then inside the group or the context.
        violations = violations_in(caught)
        shortest = min((len(v.trace) for v in violations), default=0)
        return first[0][0], first[0][1], shortest
    return None


def run_criteria(board: type, rounds: int) -> tuple[int, float] | None:
    """(rounds until more than one winner, seconds), or None if every round had one."""
    from taskboard import ManualClock

    started = time.perf_counter()
    race = concurrent_claim if board is mutants.NonAtomicClaim else None
    for round_ in range(1, rounds + 1):
        instance = board([Task("race")], ManualClock())
        if race is not None:
            winners = race(instance, "race", ["a1", "a2"] * 4)
        else:
            winners = duplicate_token_submit(instance, "race", 8)
        if winners > 1:
            return round_, time.perf_counter() - started
    return None


@dataclass
class ClientResult:
    name: str
    shared_programs: int
    shared_caught: bool
    caught: int
    runs: int
    programs: float | None
    seconds: float | None
    calls: float | None
    criterion: str
    rounds: int | None


def _sqlite_files(board: type, directory: Path, with_clients: bool) -> Any:
    """A factory of ``board`` boards, each on a fresh file; it opens clients when asked,
    and counts the boards it made (one per run of a program)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = (directory / f"board{n}.db" for n in itertools.count())

    def make(tasks: Sequence[Task], clock: Clock) -> Any:
        make.made += 1  # type: ignore[attr-defined]
        return board(tasks, clock, next(paths))

    make.made = 0  # type: ignore[attr-defined]
    if with_clients:
        make.open_client = lambda made: made.open_client()  # type: ignore[attr-defined]
    return make


def run_parallel(
    board: type, directory: Path, *, with_clients: bool, run_seed: int, max_examples: int
) -> tuple[int, float, int] | int:
    """Parallel mode on SQLite files: (programs until caught, seconds until caught, calls in
    the reported program) if caught, else the programs run."""
    factory = _sqlite_files(board, directory, with_clients)
    machine = BoardMachine.for_board(factory, trace_target="")
    first: list[tuple[int, float]] = []
    started = time.perf_counter()
    run_program = _parallel.run_program

    def timed(*args: Any, **kwargs: Any) -> None:
        try:
            run_program(*args, **kwargs)
        except ContractViolation:
            if not first:
                runs = factory.made
                first.append(
                    (-(-runs // _parallel.RUNS_PER_PROGRAM), time.perf_counter() - started)
                )
            raise

    run_settings = settings(
        max_examples=max_examples,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate, Phase.shrink],
        report_multiple_bugs=False,
    )
    _parallel.run_program = timed  # type: ignore[assignment]
    try:
        run_parallel_state_machine(seed(run_seed)(machine), settings=run_settings)
    except (ContractViolation, Flaky) as caught:
        recorded = [v.recording for v in violations_in(caught) if v.recording is not None]
        programs = [r.program for r in recorded if r.program is not None]
        calls = min(
            (len(p.prefix) + sum(len(ops) for ops in p.threads) for p in programs), default=0
        )
        return first[0][0], first[0][1], calls
    finally:
        _parallel.run_program = run_program  # type: ignore[assignment]
    return -(-factory.made // _parallel.RUNS_PER_PROGRAM)


def run_criterion_with_clients(board: type, directory: Path, rounds: int) -> tuple[str, int | None]:
    """(the criterion, the first round with more than one winner or success, or None)."""
    from taskboard import ManualClock

    agents = ["a1", "a2"] * 4
    name = (
        "duplicate_token_submit"
        if board is client_mutants.PooledReadThenWrite
        else ("concurrent_claim")
    )
    tasks = [Task(f"race{n}") for n in range(rounds)]
    with board(tasks, ManualClock(), directory / f"{board.__name__}-criteria.db") as instance:
        clients = [instance.open_client() for _ in agents]
        try:
            for round_, task in enumerate(tasks, start=1):
                if name == "concurrent_claim":
                    wins = concurrent_claim(instance, task.id, agents, clients=clients)
                else:
                    wins = duplicate_token_submit(instance, task.id, len(agents), clients=clients)
                if wins > 1:
                    return name, round_
        finally:
            for client in clients:
                client.close()
    return name, None


def measure_clients(seeds: int, max_examples: int, directory: Path) -> list[ClientResult]:
    results = []
    for board in client_mutants.CLIENT_MUTANTS:
        name = board.__name__
        shared = run_parallel(
            board,
            directory / f"{name}-shared",
            with_clients=False,
            run_seed=0,
            max_examples=max_examples,
        )
        runs = [
            run_parallel(
                board,
                directory / f"{name}-{s}",
                with_clients=True,
                run_seed=s,
                max_examples=max_examples,
            )
            for s in range(seeds)
        ]
        hits = [r for r in runs if isinstance(r, tuple)]
        criterion, rounds = run_criterion_with_clients(board, directory, rounds=20)
        results.append(
            ClientResult(
                name,
                shared if isinstance(shared, int) else shared[0],
                isinstance(shared, tuple),
                len(hits),
                seeds,
                median([h[0] for h in hits]),
                median([h[1] for h in hits]),
                median([h[2] for h in hits]),
                criterion,
                rounds,
            )
        )
        print(f"  measured {name}: {len(hits)}/{seeds} with clients", file=sys.stderr)
    return results


def client_table(results: list[ClientResult], seeds: int, max_examples: int) -> str:
    lines = [
        f"Client-race mutants (SPEC 8): {len(results)} mutants, on SQLite files. The parallel "
        f"mode runs up to {max_examples} programs (each three times), first with every thread "
        f"sharing one client, then with a client per thread over {seeds} seeds (medians); "
        "the criterion races 8 participants, each on a client of its own, up to 20 rounds.",
        "",
        "| mutant | shared client | clients: caught | programs to catch | seconds to catch "
        "| calls in trace | criterion with clients |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        shared = "CAUGHT (false alarm)" if r.shared_caught else f"passed {r.shared_programs}"
        criterion = f"{r.criterion}: round {r.rounds}" if r.rounds else f"{r.criterion}: not caught"
        lines.append(
            f"| {r.name} | {shared} | {r.caught}/{r.runs} | {fmt(r.programs, '.0f')} "
            f"| {fmt(r.seconds, '.2f')} | {fmt(r.calls, '.0f')} | {criterion} |"
        )
    return "\n".join(lines)


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def caught_and_medians(
    runs: Sequence[tuple[int, float, int] | None],
) -> tuple[int, int, float | None, float | None, float | None]:
    """How many of ``runs`` (one per seed, ``None`` if not caught) caught the mutant, out of
    how many, and the medians of the catches' examples, seconds and shrunk steps."""
    hits = [r for r in runs if r is not None]
    return (
        len(hits),
        len(runs),
        median([h[0] for h in hits]),
        median([h[1] for h in hits]),
        median([h[2] for h in hits]),
    )


def measure(seeds: int, max_examples: int, only: Sequence[str] = ()) -> list[Result]:
    results = []
    for board in mutants.MUTANTS:
        if only and board.__name__ not in only:
            continue
        name = board.__name__
        if board.concurrent:
            outcome = run_criteria(board, rounds=20)
            caught = outcome is not None
            results.append(
                Result(
                    name,
                    int(caught),
                    1,
                    outcome[0] if outcome else None,
                    outcome[1] if outcome else None,
                    None,
                    "criteria",
                )
            )
        else:
            # The mutant's own clock_mode, clock_resolution and client_clock_skew.
            own = BoardMachine.for_board(board)
            # A wall-clock example sleeps through its leases (seconds, with a keep-alive's
            # 50 ms ones): fewer seeds and examples, or one mutant takes an hour.
            wall = getattr(board, "clock_mode", "manual") == "wall"
            runs = [
                run_machine(
                    board, s, min(max_examples, WALL_EXAMPLES) if wall else max_examples, base=own
                )
                for s in range(min(seeds, WALL_SEEDS) if wall else seeds)
            ]
            results.append(Result(name, *caught_and_medians(runs), "machine"))
        last = results[-1]
        print(f"  measured {name}: {last.caught}/{last.runs}", file=sys.stderr)
    return results


@dataclass
class NemesisResult:
    name: str
    passed_without: bool
    caught: int
    runs: int
    examples: float | None
    seconds: float | None
    steps: float | None


def nemesis_machine(board: type, nemesis: tuple[str, ...] | None) -> type[BoardMachine]:
    """A tolerant machine on ``board``, its hooks from the class, running ``nemesis``."""
    return BoardMachine.for_board(board, tolerate_faults=(ConnectionResetError,), nemesis=nemesis)


def measure_nemesis(seeds: int, max_examples: int) -> list[NemesisResult]:
    """Each nemesis mutant once with the hooks off (it must pass), then once per seed with
    them on; and the two correct file boards with the hooks on (they must pass)."""
    results = []
    for board in (*nemesis_mutants.NEMESIS_MUTANTS, *NEMESIS_CONTROLS):
        off = run_machine(board, 0, max_examples, base=nemesis_machine(board, ()))
        runs = [
            run_machine(board, s, max_examples, base=nemesis_machine(board, None))
            for s in range(seeds)
        ]
        results.append(NemesisResult(board.__name__, off is None, *caught_and_medians(runs)))
        print(f"  measured {board.__name__}: {results[-1].caught}/{seeds}", file=sys.stderr)
    return results


def nemesis_table(results: list[NemesisResult], seeds: int, max_examples: int) -> str:
    lines = [
        f"Nemesis mutants (SPEC 9): {len(NEMESIS_CONTROLS)} correct boards and "
        f"{len(results) - len(NEMESIS_CONTROLS)} mutants on a JSON file, in tolerant mode. "
        f"Each runs {max_examples} examples with the nemesis off (a mutant must pass: its "
        f"bug needs a restart or a dropped connection), then {seeds} seeds with "
        "restart_storage and drop_connections on (medians over seeds).",
        "",
        "| board | nemesis off | nemesis on: caught | examples to catch | seconds to catch "
        "| shrunk steps |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    controls = {board.__name__ for board in NEMESIS_CONTROLS}
    for r in results:
        off = "passed" if r.passed_without else "CAUGHT"
        if r.name in controls:  # a correct board: every run must pass
            r.name += " (correct)"
        lines.append(
            f"| {r.name} | {off} | {r.caught}/{r.runs} | {fmt(r.examples, '.0f')} "
            f"| {fmt(r.seconds, '.2f')} | {fmt(r.steps, '.0f')} |"
        )
    return "\n".join(lines)


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(results: list[Result], seeds: int, max_examples: int) -> str:
    lines = [
        f"Bug gallery power: {len(results)} mutants; machine mutants run with {seeds} seeds "
        f"at max_examples={max_examples} (medians over seeds), wall-clock ones with "
        f"{min(seeds, WALL_SEEDS)} seeds at max_examples={min(max_examples, WALL_EXAMPLES)}; "
        "concurrent mutants through the criteria, up to 20 rounds.",
        "",
        "| mutant | caught by | caught | examples to catch | seconds to catch | shrunk steps |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(
            f"| {r.name} | {r.how} | {r.caught}/{r.runs} | {fmt(r.examples, '.0f')} "
            f"| {fmt(r.seconds, '.2f')} | {fmt(r.steps, '.0f')} |"
        )
    every = all(r.caught == r.runs for r in results)
    caught = sum(1 for r in results if r.caught == r.runs)
    seconds = [r.seconds for r in results if r.seconds is not None]
    steps = [r.steps for r in results if r.steps is not None]
    lines += [
        "",
        f"- caught every run: {caught} of {len(results)} mutants"
        + (" (all)" if every else " (NOT all)"),
        f"- median seconds to catch: {fmt(median(seconds), '.2f')}"
        f" (max {fmt(max(seconds) if seconds else None, '.2f')})",
        f"- median shrunk trace: {fmt(median(steps), '.0f')} steps"
        f" (max {fmt(max(steps) if steps else None, '.0f')})",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="machine runs per mutant")
    parser.add_argument("--max-examples", type=int, default=100)
    parser.add_argument("--markdown", help="also write the table as a docs page to this path")
    parser.add_argument("--only", default="", help="comma-separated mutant names (default: all)")
    parser.add_argument(
        "--client-programs", type=int, default=100, help="parallel programs per client run"
    )
    args = parser.parse_args()
    only = [n for n in args.only.split(",") if n]
    results = measure(args.seeds, args.max_examples, only)
    text = table(results, args.seeds, args.max_examples)
    if not only:
        with tempfile.TemporaryDirectory() as directory:
            clients = measure_clients(args.seeds, args.client_programs, Path(directory))
        text += "\n\n" + client_table(clients, args.seeds, args.client_programs)
        nemesis = measure_nemesis(args.seeds, args.max_examples)
        text += "\n\n" + nemesis_table(nemesis, args.seeds, args.max_examples)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as page:
            page.write(
                "# Bug gallery and power\n\n"
                f"Generated by `python benchmarks/bench_power.py --seeds {args.seeds} "
                f"--max-examples {args.max_examples} --markdown {args.markdown}`; "
                "do not edit by hand. The mutants are documented in "
                "`taskboard/hosts/mutants.py`, `taskboard/hosts/client_mutants.py` and "
                "`taskboard/hosts/nemesis_mutants.py`.\n\n" + text + "\n"
            )


if __name__ == "__main__":
    main()
