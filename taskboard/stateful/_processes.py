"""Parallel programs whose threads are OS processes, each on a client of its own (SPEC 8).

A thread of a parallel program shares the interpreter, the GIL and every module-level
object with the others. A process shares only the storage. This reaches races that
threads cannot: a driver that is not fork-safe, state a client keeps per process, a lock
that is only a lock inside one interpreter.

A worker process reaches the storage by address: the parent pickles the board as
``make_board`` returned it, and the worker unpickles it as a new client of the same
storage. The reference hosts pickle that way (``__reduce__`` to their file path or URL
and board id). The workers come from a pool of spawned processes, kept between programs,
and start together at an instant on the system-wide monotonic clock.
"""

from __future__ import annotations

import atexit
import math
import multiprocessing
import pickle
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime

from taskboard._clock import SystemClock
from taskboard._driver import DirectDriver, LoopDriver, driven, is_async_board
from taskboard.model import Call, Outcome
from taskboard.model._calls import is_infrastructure_fault
from taskboard.stateful._steps import ProgramStep

__all__ = ["ProcessRecord", "address_of", "run_in_processes"]

#: Seconds between handing the threads to the workers and their common start.
START_DELAY = 0.05
#: The most threads a program has, and so the most worker processes the pool keeps.
POOL_SIZE = 4

_pool: ProcessPoolExecutor | None = None


@dataclass(frozen=True)
class ProcessRecord:
    """One call a worker process made: what, with what outcome, and when (``None``: an
    infrastructure fault, effect unknown). ``started`` and ``ended`` are wall-clock reads."""

    call: Call
    outcome: Outcome | None
    invoked: float
    returned: float
    started: datetime
    ended: datetime


def address_of(board: object) -> bytes:
    """``board`` pickled: how a worker process opens a client of the same storage.

    Raises:
        TypeError: the board does not pickle (a connection, a lock, an in-memory store);
            the message says what a host must do.
    """
    try:
        return pickle.dumps(board)
    except Exception as exc:
        raise TypeError(
            f"parallel programs in processes need a board that pickles as a new client of the "
            f"same storage (a __reduce__ to its file path or URL), and {board!r} does not: "
            f"{type(exc).__name__}: {exc}. See docs/clients.md."
        ) from exc


def _run_thread(
    address: bytes, ops: Sequence[tuple[ProgramStep, Call]], start_at: float
) -> list[ProcessRecord]:
    """In a worker process: open a client from ``address``, wait for the start, make the calls."""
    board = pickle.loads(address)
    driver = LoopDriver(None) if is_async_board(board) else DirectDriver(None)
    client = driven(board, driver)
    clock = SystemClock()
    mine: dict[str, str] = {}
    records = []
    try:
        while (left := start_at - time.monotonic()) > 0:
            time.sleep(left)
        for op, call in ops:
            call = op.own_token(call, mine)
            started = clock.now()
            invoked = time.monotonic()
            outcome: Outcome | None
            try:
                outcome = Outcome.returned(call.invoke(client))
            except Exception as exc:
                outcome = None if is_infrastructure_fault(exc) else Outcome.raised(exc)
            returned = time.monotonic() if outcome is not None else math.inf
            ended = clock.now()
            if outcome is not None and outcome.ok and outcome.task and outcome.task.lease:
                mine[call.task_id] = outcome.task.lease.token
            records.append(ProcessRecord(call, outcome, invoked, returned, started, ended))
    finally:
        own_close = getattr(board, "aclose", None) or getattr(board, "close", None)
        try:
            if callable(own_close):
                driver.call(own_close)
        finally:
            driver.close()
    return records


def _worker_pool() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        context = multiprocessing.get_context("spawn")  # no fork: each worker starts clean
        _pool = ProcessPoolExecutor(max_workers=POOL_SIZE, mp_context=context)
        atexit.register(_pool.shutdown, cancel_futures=True)
    return _pool


def run_in_processes(
    board: object, threads: Sequence[Sequence[tuple[ProgramStep, Call]]], timeout: float
) -> list[list[ProcessRecord]] | None:
    """Run each thread's calls in a worker process of its own, all from one start instant.

    Returns each thread's records, or ``None`` when some worker did not finish within
    ``timeout`` seconds (a hang).

    Raises:
        TypeError: the board does not pickle as a client (see :func:`address_of`).
    """
    address = address_of(board)
    pool = _worker_pool()
    start_at = time.monotonic() + START_DELAY
    futures = [pool.submit(_run_thread, address, list(ops), start_at) for ops in threads]
    deadline = time.monotonic() + timeout
    try:
        return [future.result(timeout=max(0.0, deadline - time.monotonic())) for future in futures]
    except FutureTimeout:
        return None
