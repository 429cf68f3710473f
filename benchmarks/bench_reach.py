"""Reach at the boundaries: of the renews that meet a live current lease, how many ask for each
boundary TTL, and how many releases and completes land at or after expiry with the current
token (the calls where a store's boundary bug shows), summed over seeds.

    python benchmarks/bench_reach.py [--examples 100] [--seeds 1 2 3 4 5] [TARGET]

Sequential programs only, a fresh example database per seed: the counts repeat on any
machine (the seconds do not).
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter

from taskboard._fuzz import FuzzOptions, fuzz
from taskboard._fuzz.report import RENEW_TTL_CLASSES

#: The (task state, operation) pairs of a release or complete with the current token at or
#: after its lease's expiry.
LATE = tuple(
    (state, f"{op} (current token)")
    for state in ("claimed, at until", "claimed, expired")
    for op in ("release", "complete")
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="?", default="taskboard.hosts.memory:MemoryBoard")
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    args = parser.parse_args()
    ttls: Counter[str] = Counter()
    late: Counter[tuple[str, str]] = Counter()
    steps = renews = 0
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as database:
            options = FuzzOptions(
                seed=seed, database=database, max_examples=args.examples, mode="sequential"
            )
            report = fuzz(args.target, options, progress=None)
        if report.failure is not None:
            raise SystemExit(f"seed {seed} found a failure: {report.failure[:500]}")
        steps += report.steps
        ttls.update(report.renew_ttls)
        for (state, op, _), count in report.transitions.items():
            renews += count if op.startswith("renew") else 0
            if (state, op) in LATE:
                late[state, op] += count
    live = sum(ttls.values())
    print(f"{args.target}: {len(args.seeds)} seeds x {args.examples} examples, {steps:,} steps")
    print(f"renews: {renews:,}; on a live current lease: {live:,}")
    for ttl in RENEW_TTL_CLASSES:
        share = f"{ttls[ttl] / live:.0%}" if live else "-"
        print(f"  ttl {ttl:<16} {ttls[ttl]:>7,}  ({share})")
    print(f"release/complete with the current token at or after expiry: {sum(late.values()):,}")
    for (state, op), count in sorted(late.items()):
        print(f"  {state:<18} {op:<26} {count:>7,}")


if __name__ == "__main__":
    main()
