"""Print how long ``taskboard.check`` takes on large snapshots (best of a few runs)."""

from __future__ import annotations

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


SHAPES: dict[str, Callable[[int], list[Task]]] = {
    "chain": chain,
    "random DAG": random_dag,
    "cycle": cycle,
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
    print(f"{'shape':<12} {'tasks':>8} {'best (ms)':>10} {'problems':>9}")
    for name, build in SHAPES.items():
        for n in SIZES:
            seconds, found = best_of(build(n))
            print(f"{name:<12} {n:>8} {seconds * 1000:>10.1f} {found:>9}")


if __name__ == "__main__":
    main()
