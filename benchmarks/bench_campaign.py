"""Campaigns on Redis: what publishing costs a worker, and how a fleet's rate grows.

- Overhead: one in-process worker on ``MemoryBoard`` fuzzing a fixed number of examples
  with the same seeds, with and without ``--campaign`` (best of the rounds, interleaved).
- Scale: 1, 2 and 4 ``taskboard fuzz`` processes on one campaign for the same time, against
  one redis-server; the fleet's examples/s is read back from the campaign's totals.

    TASKBOARD_REDIS_URL=redis://127.0.0.1:6379/0 python benchmarks/bench_campaign.py \
        [--examples 300] [--rounds 3] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid

import redis

from taskboard._fuzz import fuzz
from taskboard._fuzz.fleet import read_campaign

MEMORY = "taskboard.hosts.memory:MemoryBoard"


def forget(url: str, name: str) -> None:
    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(f"taskboard:campaign:{name}:*"))
    if keys:
        client.delete(*keys)


def worker_rate(url: str, examples: int, *, campaign: bool, directory: str) -> float:
    """Steps/s of one in-process worker over ``examples`` sequential examples."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    report = fuzz(
        MEMORY,
        progress=None,
        budget=600,
        max_examples=examples,
        seed=1,
        mode="sequential",
        database=url,
        trace_dir=directory,
        campaign=name if campaign else None,
    )
    elapsed = time.perf_counter() - started
    forget(url, name)
    return report.steps / elapsed


def fleet_rate(url: str, workers: int, seconds: float, directory: str) -> float:
    """Examples/s of ``workers`` processes on one campaign, read from the campaign."""
    name = f"bench-{uuid.uuid4().hex[:8]}"
    command = [sys.executable, "-m", "taskboard", "fuzz", MEMORY, "--quiet", "--mode"]
    command += ["sequential", "--budget", f"{seconds}s", "--campaign", name, "--database", url]
    command += ["--trace-dir", directory]
    processes = [
        subprocess.Popen(
            [*command, "--seed", str(i)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for i in range(workers)
    ]
    for process in processes:
        process.wait()
    view = read_campaign(url, name)
    forget(url, name)
    total = view.totals.get("examples", 0) + view.totals.get("programs", 0)
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="examples per overhead run")
    parser.add_argument("--rounds", type=int, default=3, help="overhead rounds (best kept)")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of a fleet run")
    args = parser.parse_args()
    url = os.environ.get("TASKBOARD_REDIS_URL")
    if not url:
        sys.exit("set TASKBOARD_REDIS_URL to a redis-server (redis://127.0.0.1:6379/0)")
    with tempfile.TemporaryDirectory() as directory:
        without, with_ = 0.0, 0.0
        for _ in range(args.rounds):
            without = max(
                without, worker_rate(url, args.examples, campaign=False, directory=directory)
            )
            with_ = max(with_, worker_rate(url, args.examples, campaign=True, directory=directory))
        print(f"publishing cost, one worker, {args.examples} examples, best of {args.rounds}")
        print(f"  without --campaign  {without:8,.0f} steps/s")
        print(f"  with --campaign     {with_:8,.0f} steps/s  x{with_ / without:.3f}")
        print(f"fleet on one campaign, {args.seconds:g} s each (cores: {os.cpu_count()})")
        one = 0.0
        for workers in (1, 2, 4):
            rate = fleet_rate(url, workers, args.seconds, directory)
            one = one or rate
            print(f"  {workers} worker(s)  {rate:8,.1f} examples/s  x{rate / one:.2f}")


if __name__ == "__main__":
    main()
