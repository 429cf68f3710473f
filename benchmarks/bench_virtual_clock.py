"""Virtual mode against wall mode (issue 30): examples per second of the same server-clock
board on the same store.

The board is the reference ``RedisBoard(clock="server")`` (now is Redis ``TIME``). In virtual
mode it runs on ``taskboard.servers.Redis()``, whose clock the machine moves; in wall mode
on a plain ``redis-server`` this script starts, on real time. The manual row is the same
board given the machine's clock (``RedisBoard(tasks, clock, url)``): the floor. Same seed,
same number of examples, generation only; the ratios are printed last. Needs
``redis-server`` and a C compiler (Linux).

    python benchmarks/bench_virtual_clock.py [--examples N]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import redis
from bench_wall_clock import counting, machine_for, run

import taskboard.servers
from taskboard import Board, Clock, Task
from taskboard.hosts.redis import RedisBoard
from taskboard.stateful import BoardMachine

#: As bench_wall_clock runs this board in wall mode.
POLICY = {"expired_lease_policy": "reject"}


@contextmanager
def plain_redis() -> Iterator[str]:
    """A redis-server on real time, on a free loopback port, no persistence: its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="bench-redis-") as directory:
        arguments = ["--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
        process = subprocess.Popen(
            ["redis-server", *arguments, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )
        try:
            url = f"redis://127.0.0.1:{port}/0"
            for _ in range(1000):
                try:
                    if redis.Redis.from_url(url).ping():
                        break
                except redis.ConnectionError:
                    time.sleep(0.01)
            yield url
        finally:
            process.terminate()
            process.wait()


def board_on(url: str, clock: str = "server") -> Any:
    def make(tasks: Sequence[Task], given: Clock) -> Board:
        return RedisBoard(tasks, given if clock == "injected" else "server", url)

    return make


def measure(machine: type[BoardMachine], examples: int) -> tuple[int, int, float]:
    """(examples, steps, seconds) of one generation-only run."""
    with counting() as steps:
        seconds = run(machine, examples, shrink=False, seed_=0)
    return len(steps), sum(steps), seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=30)
    args = parser.parse_args(argv)
    if shutil.which("redis-server") is None:
        print("skipped: redis-server is not on PATH")
        return 0
    print(f"RedisBoard(clock='server'), {args.examples} examples each (generation only)")
    print(f"{'clock':<9}{'examples':>9}{'steps':>8}{'seconds':>9}{'examples/s':>12}{'steps/s':>9}")
    rates: dict[str, float] = {}
    with taskboard.servers.Redis() as server, plain_redis() as wall_url:
        virtual = machine_for(board_on(server.url), "virtual", **POLICY)
        virtual.server = server  # type: ignore[attr-defined]
        wall = machine_for(board_on(wall_url), "wall", **POLICY)
        # The floor: the same board reading the machine's clock (no server clock at all).
        manual = machine_for(board_on(server.url, "injected"), "manual", **POLICY)
        machines = (("manual", manual), ("virtual", virtual), ("wall", wall))
        for _, machine in machines:  # warm up: connections, scripts, Hypothesis
            measure(machine, 2)
        for mode, machine in machines:
            done, steps, seconds = measure(machine, args.examples)
            rates[mode] = done / seconds
            print(
                f"{mode:<9}{done:>9}{steps:>8}{seconds:>9.2f}{rates[mode]:>12.1f}"
                f"{steps / seconds:>9.0f}"
            )
    print(f"virtual / wall: {rates['virtual'] / rates['wall']:.1f}x examples per second")
    print(
        f"manual / virtual: {rates['manual'] / rates['virtual']:.2f}x "
        "(the cost of the server's clock)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
