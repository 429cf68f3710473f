"""Boards served over the board protocol (SPEC 10), for the protocol's tests.

    python tests/protocol_boards.py NAME [PATH]

NAME is ``memory``, a board on ``taskboard fuzz --server``'s store (``redis-own-time``,
``postgres-server-clock``, ...: see ``ON_SERVER``), ``sqlite`` (a file board whose clients
``connect`` to PATH's file),
``sqlite-split-claim`` (the same, with a claim that is atomic only inside one process and a
``yield_point`` between its check and its write), ``sqlite-yield-holding-lock`` (a correct
claim that yields while it holds a lock the other processes' claims wait for),
``memory-yielding`` (MemoryBoard with a point in its claim, one process for every caller),
``memory-undeclared`` (MemoryBoard declaring no ``expired_lease_policy`` in hello), a
mutant of the gallery, or a misbehaving child: ``exit`` (dies at start), ``silent`` (never
answers), ``garbage`` (answers claims with a line that is not JSON).

Two more, which break at the first look at the board, so that a failing run is found and
shrunk at once (a few processes, not hundreds): ``blind`` (lists no tasks: a contract
violation) and ``garbage-list`` (answers ``list`` with a line that is not JSON: a fault).

For tests of the processes a run starts (tests/test_protocol_lifecycle.py): when
``TASKBOARD_TEST_PIDDIR`` names a directory, the process first writes an empty file there
named after its pid, so that a test learns every process a run started; and when its input
ends without ``close`` after its parent (the checker) is gone, it stays alive for a while
instead of exiting, as a board that does not notice would, so that a process the checker
left running is still there for the test to see.
"""

# ruff: noqa: E402 - the pid is recorded before the imports, which take a while

from __future__ import annotations

import os
import sys

#: Where a process records its pid (see the docstring); unset outside the lifecycle tests.
PIDDIR = os.environ.get("TASKBOARD_TEST_PIDDIR")
#: The process that started this one (the checker), as long as it runs.
PARENT = os.getppid()
if PIDDIR and __name__ == "__main__":
    os.close(os.open(os.path.join(PIDDIR, str(os.getpid())), os.O_CREAT | os.O_WRONLY))

import fcntl
import importlib
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from taskboard import ClaimRequest, Clock, State, TakenError, Task
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import MUTANTS
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.protocol import serve
from taskboard.races import yield_point


class OwnedFileBoard(SQLiteBoard):
    """A SQLite file board that removes its file when closed: the process that ran ``init``
    removes its storage (SPEC 10)."""

    def close(self) -> None:
        super().close()
        os.unlink(self._path)


def _in_a_new_file(board: type[OwnedFileBoard], tasks: Sequence[Task], clock: Clock) -> SQLiteBoard:
    """``board`` on a database file of its own, which it removes when closed."""
    fd, path = tempfile.mkstemp(suffix=".sqlite", prefix="taskboard-protocol-")
    os.close(fd)
    return board(tasks, clock, path)


def sqlite_file(tasks: Sequence[Task], clock: Clock) -> SQLiteBoard:
    return _in_a_new_file(OwnedFileBoard, tasks, clock)


class SplitClaimBoard(SQLiteBoard):
    """Bug: claim checks the task in one transaction and takes it in later ones, under a lock
    of this process only: atomic among one process's calls, not between processes (the Go
    board's ``claim-atomic-in-process`` mutant, in Python)."""

    _in_process = threading.Lock()

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._in_process:
            seen = {task.id: task for task in self.list_tasks()}.get(task_id)
            if seen is not None and seen.state == State.CLAIMED and seen.lease is not None:
                until = seen.lease.until
                if until is None or until > self._clock.now():
                    raise TakenError(f"task {task_id!r} is held by a live lease of {seen.owner!r}")
            time.sleep(0.002)  # the round trip between the check and the write
            # Another process's claim may come in here: a point the checker can schedule.
            yield_point("claim checked, not yet written")
            with self._transaction() as conn:  # the check said it is free: take it as such
                conn.execute(
                    "UPDATE tasks SET state = ? WHERE id = ? AND state = ?",
                    (State.OPEN.value, task_id, State.CLAIMED.value),
                )
            return super().claim(task_id, agent, request)


class OwnedSplitClaimBoard(SplitClaimBoard, OwnedFileBoard):
    """The SplitClaimBoard that ran ``init``: it removes its file when closed."""


def split_claim_file(tasks: Sequence[Task], clock: Clock) -> SQLiteBoard:
    return _in_a_new_file(OwnedSplitClaimBoard, tasks, clock)


class LockHoldingYieldBoard(SQLiteBoard):
    """A correct claim that stops at a point of its own while it holds a lock every other
    process's claim needs (an flock of the database file): the scheduler's step timeout, not
    a deadlock, is what lets the others on."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with open(self._path, "rb") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            yield_point("holding the file lock")
            return super().claim(task_id, agent, request)


class OwnedLockHoldingYieldBoard(LockHoldingYieldBoard, OwnedFileBoard):
    """The LockHoldingYieldBoard that ran ``init``: it removes its file when closed."""


def lock_holding_file(tasks: Sequence[Task], clock: Clock) -> SQLiteBoard:
    return _in_a_new_file(OwnedLockHoldingYieldBoard, tasks, clock)


#: How long a process the checker left running outlives it (seconds).
LINGER = 30.0


class Requests:
    """The requests on stdin, noting whether they ran out rather than ending with ``close``."""

    def __init__(self) -> None:
        self.ran_out = False

    def __iter__(self) -> Iterator[bytes]:
        yield from sys.stdin.buffer
        self.ran_out = True


#: stdin for ``serve``, which only iterates over it.
REQUESTS: Any = Requests()


def linger_if_left_running() -> None:
    """With ``TASKBOARD_TEST_PIDDIR`` set: stay alive for :data:`LINGER` seconds when stdin
    ran out because the checker (:data:`PARENT`) is gone, not because it ended this process.

    A parent that exits closes the pipe a moment before its children are handed to another
    parent, so the parent's pid is watched for a short while after the end of input.
    """
    if not PIDDIR or not REQUESTS.ran_out:
        return
    deadline = time.monotonic() + 0.5
    while os.getppid() == PARENT:
        if time.monotonic() > deadline:
            return  # the checker closed stdin to end this process: exit now
        time.sleep(0.01)
    time.sleep(LINGER)


def main(name: str) -> None:
    if name == "exit":
        print("cannot open the store: permission denied", file=sys.stderr)
        sys.exit(3)
    if name == "silent":
        print("waiting for something that never comes", file=sys.stderr, flush=True)
        time.sleep(60)
        return
    sqlite_boards = {
        "sqlite": (sqlite_file, SQLiteBoard),
        "sqlite-split-claim": (split_claim_file, SplitClaimBoard),
        "sqlite-yield-holding-lock": (lock_holding_file, LockHoldingYieldBoard),
    }
    if name in sqlite_boards:
        factory, board_cls = sqlite_boards[name]
        serve(
            factory,
            shape=SQLiteBoard,
            connect=lambda storage, clock: board_cls((), clock, storage),
            storage_of=lambda board: board._path,
            stdin=REQUESTS,
            yield_points=True,
        )
        return
    if name == "memory-yielding":

        class Yielding(MemoryBoard):
            def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
                yield_point("before the claim")
                return super().claim(task_id, agent, request)

        serve(Yielding, stdin=REQUESTS, yield_points=True)
        return
    if name == "garbage":

        class Garbage(MemoryBoard):
            def claim(self, *args: Any) -> Any:
                sys.stdout.write("this is not json\n")
                sys.stdout.flush()
                time.sleep(60)

        serve(Garbage, stdin=REQUESTS)
        return
    if name == "garbage-list":

        class GarbageList(MemoryBoard):
            def list_tasks(self) -> Any:
                sys.stdout.write("this is not json either\n")
                sys.stdout.flush()
                return super().list_tasks()

        serve(GarbageList, stdin=REQUESTS)
        return
    if name == "blind":

        class Blind(MemoryBoard):
            def list_tasks(self) -> Any:
                return []

        serve(Blind, stdin=REQUESTS)
        return
    if name == "memory-undeclared":

        class Undeclared(MemoryBoard):
            expired_lease_policy = None  # says nothing of SPEC 3.4 in hello

        serve(Undeclared, stdin=REQUESTS)
        return
    if name in ON_SERVER:
        board_class, factory = _on_server(name)
        serve(factory, shape=board_class, stdin=REQUESTS)
        return
    boards = {"memory": MemoryBoard, **{m.__name__: m for m in MUTANTS}}
    serve(boards[name], stdin=REQUESTS)


def _on_server(name: str) -> tuple[type, Any]:
    """The board class and factory of a board on ``fuzz --server``'s store (its URL in
    ``TASKBOARD_SERVER_URL``): ``postgres-own-time`` and ``redis-own-time`` keep their own
    time on the protocol's ``set_time`` (as a Go board does), the others read the server's
    clock (``tests.virtual_boards``)."""
    from taskboard.hosts.postgres import PostgresBoard
    from taskboard.hosts.redis import RedisBoard

    # This script's directory is the first on sys.path: the module next to it.
    virtual_boards = importlib.import_module("virtual_boards")

    store, kind = name.split("-", 1)
    board_class = PostgresBoard if store == "postgres" else RedisBoard
    if kind == "own-time":

        def own_time(tasks: Sequence[Task], clock: Clock) -> Any:
            return board_class(tasks, clock, os.environ["TASKBOARD_SERVER_URL"])

        return board_class, own_time
    return board_class, getattr(virtual_boards, name.replace("-", "_"))


#: Boards on the ``--server``'s store (see :func:`_on_server`).
ON_SERVER = (
    "redis-own-time",
    "redis-server-clock",
    "redis-expiry-inclusive",
    "postgres-own-time",
    "postgres-server-clock",
    "postgres-expiry-inclusive",
)


if __name__ == "__main__":
    main(sys.argv[1])
    linger_if_left_running()
