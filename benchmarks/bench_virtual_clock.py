"""Virtual mode against wall mode (issue 30): examples per second of the same server-clock
board on the same store.

The boards are the reference ``RedisBoard(clock="server")`` (now is Redis ``TIME``),
``PostgresBoard(clock="server")`` (now is ``clock_timestamp()``), and ``LockBoard``
(``tests/lock_boards.py``: redis-py's own ``Lock``, ``PX`` on Redis's clock), with
millisecond leases and with whole-second ones (``clock_resolution`` 1 s, what a store
that keeps whole seconds gets). In virtual mode each runs
on ``taskboard.servers.Redis()`` / ``Postgres()``, whose clock the machine moves; in wall
mode on a plain ``redis-server`` / PostgreSQL this script starts, on real time. The manual
row is the same board given the machine's clock (``RedisBoard(tasks, clock, url)``): the
floor. Same seed, same number of examples, generation only; the ratios are printed last.
Needs ``redis-server``, PostgreSQL's binaries (a store without them is skipped) and a C
compiler (Linux).

    python benchmarks/bench_virtual_clock.py [--examples N] [--store redis|postgres|lock|...]
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import redis
from bench_wall_clock import counting, machine_for, run

import taskboard.servers
from taskboard import Board, Clock, Task
from taskboard._virtual._postgres import _bindir
from taskboard.hosts.redis import RedisBoard
from taskboard.stateful import BoardMachine

#: As bench_wall_clock runs this board in wall mode.
POLICY = {"expired_lease_policy": "reject"}
_SECOND = timedelta(seconds=1)


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


@contextmanager
def plain_postgres() -> Iterator[str]:
    """A PostgreSQL on real time, in a new cluster on a free loopback port, no fsync: its
    URL (as root, run as the postgres user, which PostgreSQL needs)."""
    import psycopg

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    binaries = _bindir(None)
    user = "postgres" if os.geteuid() == 0 else None
    with tempfile.TemporaryDirectory(prefix="bench-postgres-") as directory:
        if user is not None:
            account = pwd.getpwnam(user)
            os.chown(directory, account.pw_uid, account.pw_gid)
        data = str(Path(directory) / "data")
        subprocess.run(
            [str(binaries / "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"],
            user=user,
            check=True,
            capture_output=True,
        )
        settings = ["listen_addresses=127.0.0.1", "fsync=off", "max_connections=200"]
        process = subprocess.Popen(
            [str(binaries / "postgres"), "-D", data, "-p", str(port), "-k", directory]
            + [option for setting in settings for option in ("-c", setting)],
            user=user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
            for _ in range(1000):
                try:
                    psycopg.connect(url).close()
                    break
                except psycopg.OperationalError:
                    time.sleep(0.01)
            yield url
        finally:
            process.send_signal(signal.SIGINT)
            process.wait()


#: ``make(url, clock)``: the board factory of a bench on the store at ``url``, reading the
#: server's clock (``clock="server"``) or given the machine's (``"injected"``); ``None``
#: for a board that cannot take the machine's clock (a lock library's).
BoardOn = Callable[[str, str], Any]


def board_on(url: str, clock: str = "server", board: Any = RedisBoard) -> Any:
    def make(tasks: Sequence[Task], given: Clock) -> Board:
        return board(tasks, given if clock == "injected" else "server", url)

    return make


def server_clock(board: Any) -> BoardOn:
    """A reference server-clock host (``RedisBoard``, ``PostgresBoard``) as a :data:`BoardOn`."""
    return lambda url, clock: board_on(url, clock, board)


def lock_board(url: str, clock: str) -> Any:
    """``tests/lock_boards.py``'s ``LockBoard``: redis-py's own ``redis.lock.Lock`` on the
    store at ``url`` (Redis keeps its time); it cannot take the machine's clock."""
    if clock == "injected":
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.lock_boards import LockBoard

    return lambda tasks, given: LockBoard(tasks, url)


def measure(machine: type[BoardMachine], examples: int) -> tuple[int, int, float]:
    """(examples, steps, seconds) of one generation-only run."""
    with counting() as steps:
        seconds = run(machine, examples, shrink=False, seed_=0)
    return len(steps), sum(steps), seconds


def bench(
    name: str,
    board: BoardOn,
    server: taskboard.servers.Redis | taskboard.servers.Postgres,
    plain: Callable[[], AbstractContextManager[str]],
    examples: int,
    **settings: Any,
) -> None:
    """Print one store's rows: manual (when the board can take the machine's clock), virtual
    and wall, and the ratios."""
    print(f"{name}, {examples} examples each (generation only)")
    print(f"{'clock':<9}{'examples':>9}{'steps':>8}{'seconds':>9}{'examples/s':>12}{'steps/s':>9}")
    rates: dict[str, float] = {}
    settings = {**POLICY, **settings}
    with server, plain() as wall_url:
        virtual = machine_for(board(server.url, "server"), "virtual", **settings)
        virtual.server = server  # type: ignore[attr-defined]
        wall = machine_for(board(wall_url, "server"), "wall", **settings)
        machines = [("virtual", virtual), ("wall", wall)]
        # The floor: the same board reading the machine's clock (no server clock at all).
        injected = board(server.url, "injected")
        if injected is not None:
            machines.insert(0, ("manual", machine_for(injected, "manual", **settings)))
        for _, machine in machines:  # warm up: connections, scripts, Hypothesis
            measure(machine, 2)
        for mode, machine in machines:
            done, steps, seconds = measure(machine, examples)
            rates[mode] = done / seconds
            print(
                f"{mode:<9}{done:>9}{steps:>8}{seconds:>9.2f}{rates[mode]:>12.1f}"
                f"{steps / seconds:>9.0f}"
            )
    print(f"virtual / wall: {rates['virtual'] / rates['wall']:.1f}x examples per second")
    if "manual" in rates:
        print(
            f"manual / virtual: {rates['manual'] / rates['virtual']:.2f}x "
            "(the cost of the server's clock)"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=30)
    parser.add_argument(
        "--store",
        choices=("redis", "postgres", "lock", "lock-seconds", "both", "all"),
        default="both",
        help="redis, postgres: the reference server-clock hosts (both: the two); lock: "
        "redis-py's own Lock (tests/lock_boards.py); lock-seconds: the same with whole-second "
        "leases, as a whole-second store (SET ... EX) gets; all: every one",
    )
    args = parser.parse_args(argv)
    chosen = {"both": {"redis", "postgres"}, "all": {"redis", "postgres", "lock", "lock-seconds"}}
    stores = chosen.get(args.store, {args.store})
    no_redis = shutil.which("redis-server") is None
    if "redis" in stores:
        if no_redis:
            print("RedisBoard skipped: redis-server is not on PATH")
        else:
            board = server_clock(RedisBoard)
            name = "RedisBoard(clock='server')"
            bench(name, board, taskboard.servers.Redis(), plain_redis, args.examples)
    if "postgres" in stores:
        if not (_bindir(None) / "initdb").exists():
            print("PostgresBoard skipped: no PostgreSQL binaries")
        else:
            from taskboard.hosts.postgres import PostgresBoard

            postgres = taskboard.servers.Postgres()
            name = "PostgresBoard(clock='server')"
            bench(name, server_clock(PostgresBoard), postgres, plain_postgres, args.examples)
    for store, resolution in (("lock", timedelta(milliseconds=1)), ("lock-seconds", _SECOND)):
        if store not in stores:
            continue
        name = f"LockBoard (redis-py's Lock), clock_resolution {resolution.total_seconds():g} s"
        if no_redis:
            print(f"{name} skipped: redis-server is not on PATH")
            continue
        bench(
            name,
            lock_board,
            taskboard.servers.Redis(),
            plain_redis,
            args.examples,
            clock_resolution=resolution,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
