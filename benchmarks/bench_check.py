"""Print how long ``taskboard.check`` takes on large snapshots (best of a few runs).

Usage: ``python benchmarks/bench_check.py [--sizes 1000,100000] [--shapes cycle,tangle]``.
The collector stays enabled, as in a caller's process (``check()`` leaves it alone).
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from taskboard import State, Task, check

SIZES = (1_000, 10_000, 100_000)
RUNS = 5


def chain(n: int) -> list[Task]:
    """t0 <- t1 <- ... <- t(n-1): one dependency chain as long as the snapshot."""
    return [Task(f"t{i}", deps=(f"t{i - 1}",) if i else ()) for i in range(n)]


def random_dag(n: int) -> list[Task]:
    """Each task depends on up to three earlier ones; states vary; input order shuffled."""
    rng = random.Random(n)
    tasks = [
        Task(
            f"t{i}",
            deps=tuple(f"t{rng.randrange(i)}" for _ in range(rng.randint(0, 3))) if i else (),
            state=rng.choice((State.OPEN, State.DONE, State.FAILED)),
        )
        for i in range(n)
    ]
    rng.shuffle(tasks)
    return tasks


def cycle(n: int) -> list[Task]:
    """The chain closed into one cycle of n tasks (every task reports dep_cycle)."""
    return [Task(f"t{i}", deps=(f"t{(i - 1) % n}",)) for i in range(n)]


def small_cycles(n: int) -> list[Task]:
    """n/3 separate cycles of three tasks (many small components, every task reports)."""
    return [Task(f"t{i}", deps=(f"t{i - i % 3 + (i + 1) % 3}",)) for i in range(n)]


def tangle(n: int) -> list[Task]:
    """Each task depends on one to three tasks anywhere: one big component of many cycles."""
    rng = random.Random(n)
    return [
        Task(f"t{i}", deps=tuple(f"t{rng.randrange(n)}" for _ in range(rng.randint(1, 3))))
        for i in range(n)
    ]


def chorded_cycle(n: int) -> list[Task]:
    """The cycle, where every tenth task also depends on the task five back (a shortcut)."""
    return [
        Task(f"t{i}", deps=(f"t{(i - 1) % n}", *((f"t{(i - 5) % n}",) if i % 10 == 0 else ())))
        for i in range(n)
    ]


SHAPES: dict[str, Callable[[int], list[Task]]] = {
    "chain": chain,
    "random DAG": random_dag,
    "cycle": cycle,
    "small cycles": small_cycles,
    "tangle": tangle,
    "chorded cycle": chorded_cycle,
}


def best_of(tasks: list[Task], runs: int = RUNS) -> tuple[float, int]:
    """The fastest of ``runs`` calls, in seconds, and the number of problems found."""
    best, found = float("inf"), 0
    for _ in range(runs):
        start = time.perf_counter()
        found = len(check(tasks))
        best = min(best, time.perf_counter() - start)
    return best, found


def main() -> None:
    """Print one row per shape and size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated")
    parser.add_argument("--runs", type=int, default=RUNS)
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    print(f"{'shape':<14} {'tasks':>8} {'best (ms)':>10} {'problems':>9}")
    for name in args.shapes.split(","):
        build = SHAPES[name]
        for n in sizes:
            seconds, found = best_of(build(n), args.runs)
            print(f"{name:<14} {n:>8} {seconds * 1000:>10.1f} {found:>9}")


if __name__ == "__main__":
    main()
