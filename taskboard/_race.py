"""The one race engine: several participants' calls at once, from one start line.

A participant is a board to call and a sequence of call makers. Each maker is given the
participant's own latest token per task (from the claims and renews it made in this race) and
returns the :class:`~taskboard.model.Call` to make; every call then goes through
:func:`~taskboard._callpath.make_call`. The criteria, the parallel runner and the process races
of the host tests all race here.

* :func:`race_on_threads`: each participant on a daemon thread of this process. The threads
  wait at one barrier, and on a board driven on an event loop the driver also holds their
  first calls until all are in (:func:`taskboard._driver.start_line`), so racing coroutines
  meet at their first ``await``. Nothing runs between the barrier and a participant's first
  call but its maker and the call path's two clock reads.
* :class:`WorkerPool`: each participant in a worker process of its own, on a client it opens
  itself (SPEC 8), all starting at one instant on the system-wide monotonic clock. The pool's
  processes are spawned on its first race and kept until it closes; a run opens one for all
  its races (:func:`worker_pool`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import pickle
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from contextvars import ContextVar
from dataclasses import dataclass

from taskboard._callpath import Interceptor, Made, make_call
from taskboard._clock import Clock, SystemClock
from taskboard._contract import Board
from taskboard._driver import DirectDriver, LoopDriver, driven, is_async_board, start_line
from taskboard._roundtrips import round_trip_points
from taskboard._schedule import RaceScheduler, note_call
from taskboard.model._calls import Call

__all__ = [
    "POOL_SIZE",
    "START_DELAY",
    "Lane",
    "MakeCall",
    "Preset",
    "WorkerPool",
    "address_of",
    "race_on_threads",
    "worker_pool",
]

#: Given a participant's own latest token per task, the call it makes next.
MakeCall = Callable[[Mapping[str, str]], Call]
#: A picklable function that opens a client of the board in a worker process.
OpenClient = Callable[[], object]

#: Seconds between handing the participants to the worker processes and their common start.
START_DELAY = 0.05
#: The most participants a process race has, and so the most worker processes a pool keeps.
POOL_SIZE = 4
#: Seconds a pool's workers may take to start (and import taskboard) before it gives up.
SPAWN_TIMEOUT = 60.0


@dataclass(frozen=True)
class Lane:
    """What one participant of a race did.

    ``made`` holds its calls in order (so far, if it did not finish). ``started`` is False
    when it never left the start line (the others did not all arrive: ``crash`` says why).
    ``finished`` is False when it was still running at the race's deadline. ``crash`` is what
    ended it early besides a call's own exception (those are outcomes, in ``made``): a maker
    that raised, a ``BaseException`` from the board.
    """

    made: tuple[Made, ...]
    started: bool = True
    finished: bool = True
    crash: BaseException | None = None


@dataclass(frozen=True)
class Preset:
    """A call maker that pickles, for worker processes: ``call`` as drawn, but with
    ``own_token``, the participant's own latest token for the task once it has one."""

    call: Call
    own_token: bool = False

    def __call__(self, mine: Mapping[str, str]) -> Call:
        if self.own_token and self.call.task_id in mine:
            return dataclasses.replace(self.call, token=mine[self.call.task_id])
        return self.call


def _run_lane(
    board: Board,
    makers: Sequence[MakeCall],
    interceptors: Sequence[Interceptor],
    clock: Clock | None,
    made: list[Made],
) -> None:
    """Make the participant's calls in order, each from its maker, into ``made``."""
    mine: dict[str, str] = {}
    for number, make in enumerate(makers):
        note_call(number)
        record = make_call(make(mine), board, interceptors, clock)
        made.append(record)
        task = record.outcome.task
        if record.outcome.ok and task is not None and task.lease is not None:
            mine[record.call.task_id] = task.lease.token


class _Runner:
    """One participant on a thread; its fields are read once ``done`` is set."""

    def __init__(
        self,
        board: Board,
        makers: Sequence[MakeCall],
        interceptors: Sequence[Interceptor],
        clock: Clock | None,
        scheduler: RaceScheduler | None = None,
    ) -> None:
        self.board = board
        self.scheduler = scheduler
        self.makers = makers
        self.interceptors = interceptors
        self.clock = clock
        self.made: list[Made] = []
        self.started = True
        self.crash: BaseException | None = None
        self.done = threading.Event()

    def run(self, barrier: threading.Barrier, timeout: float, index: int) -> None:
        try:
            try:
                barrier.wait(timeout)
            except threading.BrokenBarrierError as broken:
                self.started, self.crash = False, broken
                return
            if self.scheduler is None:
                _run_lane(self.board, self.makers, self.interceptors, self.clock, self.made)
                return
            self.scheduler.enter(index)
            try:
                _run_lane(self.board, self.makers, self.interceptors, self.clock, self.made)
            finally:
                self.scheduler.leave()
        except BaseException as exc:  # SystemExit & co. would otherwise end the thread silently
            self.crash = exc
        finally:
            self.done.set()

    def lane(self) -> Lane:
        """What the participant did so far: a snapshot, so a late one changes nothing."""
        finished = self.done.is_set()
        return Lane(tuple(self.made), self.started, finished, self.crash if finished else None)


def race_on_threads(
    boards: Sequence[Board],
    makers: Sequence[Sequence[MakeCall]],
    *,
    timeout: float,
    deadline: float | None = None,
    clock: Clock | None = None,
    interceptors: Sequence[Interceptor] = (),
    names: Sequence[str] = (),
    scheduler: RaceScheduler | None = None,
) -> list[Lane]:
    """Run participant ``i``'s ``makers[i]`` on ``boards[i]`` in a daemon thread of its own,
    all from one start line; wait for them until ``deadline`` (a ``time.monotonic()`` value),
    or ``timeout`` seconds after they all started, and return each one's :class:`Lane`.

    A participant still running then is left running; its lane says it did not finish. One
    that does not reach the start line within ``timeout`` seconds calls the race off: no
    participant makes a call. On a board driven on an event loop, every board must be
    driven by the first one's driver, whose start line holds the participants' first calls.

    With a ``scheduler`` (for a synchronous board), the participants run one at a time at
    their storage round trips (:mod:`taskboard._roundtrips`), as it chooses, instead.

    Raises:
        RuntimeError: a thread could not be started (the race is called off).
    """
    runners = [
        _Runner(board, ops, interceptors, clock, scheduler)
        for board, ops in zip(boards, makers, strict=True)
    ]
    barrier = threading.Barrier(len(runners))
    threads = [
        threading.Thread(
            target=runner.run,
            args=(barrier, timeout, i),
            name=names[i] if i < len(names) else f"taskboard: race participant {i}",
            daemon=True,  # a hung board must not block interpreter exit
        )
        for i, runner in enumerate(runners)
    ]
    controlled = round_trip_points() if scheduler else contextlib.nullcontext()
    lined_up = 0 if scheduler else sum(1 for ops in makers if ops)
    with controlled, start_line(boards[0] if boards else None, lined_up):
        try:
            for thread in threads:
                thread.start()
        except RuntimeError:
            barrier.abort()
            raise
        if deadline is None:
            deadline = time.monotonic() + timeout
        if scheduler is not None:
            scheduler.run(deadline)
        for runner in runners:
            runner.done.wait(max(0.0, deadline - time.monotonic()))
        return [runner.lane() for runner in runners]


# -- worker processes --------------------------------------------------------------------------


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


def _in_worker(
    open_client: OpenClient,
    makers: Sequence[MakeCall],
    interceptors: Sequence[Interceptor],
    start_at: float,
) -> list[Made]:
    """In a worker process: open a client, wait for the start, make the calls."""
    board = open_client()
    driver = LoopDriver(None) if is_async_board(board) else DirectDriver(None)
    client = driven(board, driver)
    made: list[Made] = []
    try:
        while (left := start_at - time.monotonic()) > 0:
            time.sleep(left)
        _run_lane(client, makers, interceptors, SystemClock(), made)
    finally:
        own_close = getattr(board, "aclose", None) or getattr(board, "close", None)
        try:
            if callable(own_close):
                driver.call(own_close)
        finally:
            driver.close()
    return [record.portable() for record in made]


def _ready() -> None:
    """In a worker process, on the pool's first use: this module is imported, so the first
    race does not wait for it."""


class WorkerPool:
    """Worker processes for races in processes: spawned (never forked: each starts clean) on
    the first race, kept between races, stopped by :meth:`close`."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self._executor: ProcessPoolExecutor | None = None

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Tell the worker processes to stop, and return: they exit on their own (joining them
        would cost a run a third of a second, or forever if one is inside a hung call)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def _workers(self) -> ProcessPoolExecutor:
        if self._executor is None:
            context = multiprocessing.get_context("spawn")
            executor = ProcessPoolExecutor(max_workers=self.size, mp_context=context)
            # One job each, all at once: every worker is spawned now, not by a later race,
            # whose participants would then miss their start instant.
            try:
                for warming in [executor.submit(_ready) for _ in range(self.size)]:
                    warming.result(timeout=SPAWN_TIMEOUT)
            except BaseException:
                executor.shutdown(wait=False, cancel_futures=True)
                raise
            self._executor = executor
        return self._executor

    def race(
        self,
        open_client: OpenClient,
        makers: Sequence[Sequence[MakeCall]],
        *,
        timeout: float,
        interceptors: Sequence[Interceptor] = (),
    ) -> list[Lane]:
        """Run participant ``i``'s ``makers[i]`` in a worker process of its own, on a client
        from ``open_client()`` there, all from one start instant; wait for them up to
        ``timeout`` seconds and return each one's :class:`Lane` (without the raw ``value``
        and ``error`` of its calls; an unfinished one has no calls).

        ``open_client``, the makers and the interceptors must pickle.

        Raises:
            Exception: what a worker raised outside its calls (opening or closing its client,
                a maker); ``BrokenProcessPool`` when a worker died (the next race then starts
                a new pool); ``TimeoutError`` when the workers did not start within
                :data:`SPAWN_TIMEOUT` seconds.
        """
        executor = self._workers()
        start_at = time.monotonic() + START_DELAY
        futures = [
            executor.submit(_in_worker, open_client, list(ops), tuple(interceptors), start_at)
            for ops in makers
        ]
        deadline = time.monotonic() + timeout
        try:
            return [self._lane(future, deadline) for future in futures]
        except BrokenProcessPool:
            self.close()
            raise

    def _lane(self, future: Future[list[Made]], deadline: float) -> Lane:
        try:
            return Lane(tuple(future.result(timeout=max(0.0, deadline - time.monotonic()))))
        except FutureTimeout:
            return Lane((), finished=False)


_RUN_POOL: ContextVar[WorkerPool | None] = ContextVar("taskboard_worker_pool", default=None)


@contextlib.contextmanager
def worker_pool() -> Iterator[WorkerPool]:
    """The worker processes of the run under way: the pool a run opened further out, or a new
    one, closed when the block ends. A run that opens one first (``fuzz``, a parallel test)
    spawns its workers once for all its races."""
    outer = _RUN_POOL.get()
    if outer is not None:
        yield outer
        return
    with WorkerPool() as pool:
        token = _RUN_POOL.set(pool)
        try:
            yield pool
        finally:
            _RUN_POOL.reset(token)
