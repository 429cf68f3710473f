"""Power: how fast the checker catches each mutant of the bug gallery, and how short the trace is.

Sequential mutants run through BoardMachine under the given profile-like settings, once per
seed; the two concurrency-only mutants run through the criteria, round after round. For each
mutant it prints whether it was caught, the examples (boards) and seconds until the first
violation, and the length of the shrunk trace in steps; medians over seeds. Then totals and
medians over the gallery.

    python benchmarks/bench_power.py [--seeds 3] [--max-examples 100] [--markdown docs/power.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, Clock, Task, concurrent_claim, duplicate_token_submit
from taskboard.hosts import mutants
from taskboard.model import Step
from taskboard.stateful import BoardMachine, ContractViolation, violations_in


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
    board: type, run_seed: int, max_examples: int, steps: int = 50
) -> tuple[int, float, int] | None:
    """(examples until caught, seconds until caught, shrunk steps), or None if not caught."""
    made = 0
    first: list[tuple[int, float]] = []
    started = time.perf_counter()

    class Machine(BoardMachine):
        def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
            nonlocal made
            made += 1
            result: Board = board(tasks, clock)
            return result

        def _report(self, violation: ContractViolation, step: Step | None) -> ContractViolation:
            if not first:
                first.append((made, time.perf_counter() - started))
            return super()._report(violation, step)

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


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


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
            runs = [run_machine(board, s, max_examples) for s in range(seeds)]
            hits = [r for r in runs if r is not None]
            results.append(
                Result(
                    name,
                    len(hits),
                    seeds,
                    median([h[0] for h in hits]),
                    median([h[1] for h in hits]),
                    median([h[2] for h in hits]),
                    "machine",
                )
            )
        last = results[-1]
        print(f"  measured {name}: {last.caught}/{last.runs}", file=sys.stderr)
    return results


def fmt(value: float | None, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def table(results: list[Result], seeds: int, max_examples: int) -> str:
    lines = [
        f"Bug gallery power: {len(results)} mutants; machine mutants run with {seeds} seeds "
        f"at max_examples={max_examples} (medians over seeds); concurrent mutants through the "
        "criteria, up to 20 rounds.",
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
    args = parser.parse_args()
    results = measure(args.seeds, args.max_examples, [n for n in args.only.split(",") if n])
    text = table(results, args.seeds, args.max_examples)
    print(text)
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as page:
            page.write(
                "# Bug gallery and power\n\n"
                "Generated by `python benchmarks/bench_power.py --markdown docs/power.md`; "
                "do not edit by hand. The mutants are documented in "
                "`taskboard/hosts/mutants.py`.\n\n" + text + "\n"
            )


if __name__ == "__main__":
    main()
