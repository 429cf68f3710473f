"""How the checker calls a board: sync or async, with a per-call timeout.

A host's board may be synchronous, or its methods may be coroutines (a board on
``redis.asyncio``, ``asyncpg`` or psycopg's async connection). The checker drives
either through a :class:`Driver` and sees a synchronous :class:`~taskboard.Board`
(:func:`driven`), so the machine, the parallel mode, the criteria and the replay
have one code path.

* :class:`DirectDriver` calls a synchronous board in the caller's thread. In the
  main thread a hung call is cut off by ``SIGALRM`` after the timeout (sent by a
  watchdog thread, not a timer armed per call), which interrupts sleeps, lock waits
  and socket reads; other threads get no timeout (the criteria and the parallel
  mode bound their threads themselves).
* :class:`LoopDriver` owns an event loop. Calls from the thread that made it run
  the loop in that thread, with no hand-off; once another thread calls, the loop
  moves to a thread of its own, where every call runs as a task, so calls from
  several threads interleave at their ``await`` points as they would in an async
  service. A call past its timeout is cancelled.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from types import FrameType
from typing import Any, Protocol, TypeVar

from taskboard._contract import Board

__all__ = [
    "BOARD_METHODS",
    "CallTimeoutError",
    "DirectDriver",
    "Driver",
    "LoopDriver",
    "close_driven",
    "driven",
    "is_async_board",
    "make_driven",
    "shaped",
    "start_line",
    "wrapper_classes",
]

#: The Board protocol's own methods.
CORE_METHODS = ("list_tasks", "claim", "release", "complete")
#: Those and the two optional extensions' (RenewingBoard, FailingBoard).
BOARD_METHODS = (*CORE_METHODS, "renew", "fail")

T = TypeVar("T")


class CallTimeoutError(TimeoutError):
    """A board call did not return within the per-call timeout, and was cut off."""


def is_async_board(board: object) -> bool:
    """True when any Board method of ``board`` is a coroutine function."""
    return any(inspect.iscoroutinefunction(getattr(board, name, None)) for name in BOARD_METHODS)


class Driver(Protocol):
    """Runs board calls; see the module docstring."""

    #: True once a call hung beyond recall: the board must not be called again, not even
    #: to close it.
    wedged: bool

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)``; an awaitable it returns is awaited on a loop driver.

        Raises:
            CallTimeoutError: it ran longer than the timeout.
            TypeError: a driver without a loop got an awaitable back.
        """
        ...

    def close(self) -> None:
        """Release the driver's thread and loop, if it has them; idempotent."""
        ...


def _seconds(timeout: timedelta | None) -> float | None:
    return None if timeout is None else timeout.total_seconds()


class _Interrupted(BaseException):
    # A BaseException, so a board's own ``except Exception`` cannot swallow the cut-off.
    pass


class DirectDriver:
    """Calls a synchronous board in the caller's thread; see the module docstring.

    The timeout costs a call two attribute writes: no interval timer is armed per call.
    :data:`_WATCHDOG`, one daemon thread for the process, sends ``SIGALRM`` to the main
    thread when a call overruns, and this driver's handler turns it into the cut-off
    (an alarm that is not ours goes on to the handler that was there before).
    """

    wedged = False

    def __init__(self, timeout: timedelta | None) -> None:
        self.timeout = _seconds(timeout)
        #: The monotonic deadline of the call running now; ``None`` between calls.
        self.deadline: float | None = None

    def call(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)``, cut off after the timeout when called in the main thread."""
        if (
            self.timeout is None
            or threading.current_thread() is not threading.main_thread()
            or not hasattr(signal, "pthread_kill")
        ):
            return _synchronous(function(*args), function)
        _WATCHDOG.watch(self)
        self.deadline = time.monotonic() + self.timeout
        try:
            result = function(*args)
        except _Interrupted as stuck:  # its traceback shows where the board was waiting
            raise CallTimeoutError(_timed_out(function, self.timeout)) from stuck
        finally:
            self.deadline = None
        return _synchronous(result, function)

    def close(self) -> None:
        """Stop watching this driver's calls."""
        _WATCHDOG.unwatch(self)


class _Watchdog:
    """One daemon thread that cuts off the main thread's overrunning board call: it polls
    the driver under watch and sends ``SIGALRM`` to the main thread when its deadline has
    passed, which interrupts a blocking wait as an interval timer would. One handler,
    :meth:`on_alarm`, turns that alarm into the cut-off; an alarm it did not send goes on
    to the handler that was there before (pytest-timeout's, say)."""

    #: How often the thread looks, at most: a cut-off comes this much late at worst.
    POLL = 0.05

    def __init__(self) -> None:
        self._driver: DirectDriver | LoopDriver | None = None
        self._sent = False
        self._previous: Any = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, driver: DirectDriver | LoopDriver) -> None:
        """Watch ``driver``'s calls (until another driver is watched); from the main thread."""
        self._driver = driver
        if signal.getsignal(signal.SIGALRM) != self.on_alarm:  # bound methods: == not is
            self._previous = signal.signal(signal.SIGALRM, self.on_alarm)
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(
                        target=self._run, name="taskboard call timeout", daemon=True
                    )
                    self._thread.start()

    def unwatch(self, driver: DirectDriver | LoopDriver) -> None:
        """Stop watching ``driver``; put back the ``SIGALRM`` handler there was before."""
        if self._driver is not driver:
            return
        self._driver = None
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGALRM) == self.on_alarm
        ):
            signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        """The ``SIGALRM`` handler: the cut-off when this watchdog sent the alarm and the call
        under watch has overrun, else the handler there was before."""
        if self._sent:
            self._sent = False
            driver = self._driver
            deadline = driver.deadline if driver is not None else None
            if driver is not None and deadline is not None and time.monotonic() >= deadline:
                driver.deadline = None
                raise _Interrupted("the board was here when the per-call timeout ran out")
            return
        previous = self._previous
        if callable(previous):
            previous(signum, frame)
        elif previous in (signal.SIG_DFL, None):
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGALRM)

    def _run(self) -> None:
        main = threading.main_thread()
        while main.is_alive():
            driver = self._driver
            timeout = driver.timeout if driver is not None else None
            time.sleep(self.POLL if timeout is None else min(self.POLL, timeout / 4))
            deadline = driver.deadline if driver is not None else None
            if deadline is not None and time.monotonic() >= deadline and not self._sent:
                self._sent = True
                assert main.ident is not None
                signal.pthread_kill(main.ident, signal.SIGALRM)


_WATCHDOG = _Watchdog()


def _synchronous(result: T, function: Callable[..., Any]) -> T:
    if inspect.isawaitable(result):
        close = getattr(result, "close", None)
        if callable(close):
            close()  # never awaited: say so here, not in a RuntimeWarning at exit
        name = getattr(function, "__qualname__", repr(function))
        raise TypeError(
            f"{name}() returned an awaitable, but it is not a coroutine function, so the "
            "board was taken for a sync one: make every Board method async def, or none"
        )
    return result


class LoopDriver:
    """Runs calls on an event loop it owns; see the module docstring.

    Calls from the thread that made the driver (the machine's, say) run the loop right
    there, one call at a time, with no hand-off to another thread. The first call from
    any other thread (the parallel mode's, the criteria's) starts the loop on a thread of
    its own, where every later call runs, from any thread, so calls interleave at their
    ``await`` points as in an async service. The loop stops at :meth:`close`: anything a
    board binds to the loop (connections, pools) must be made by calls through the driver
    and released by calls through it before :meth:`close`.
    """

    def __init__(self, timeout: timedelta | None) -> None:
        self.timeout = _seconds(timeout)
        self.wedged = False
        self.loop = asyncio.new_event_loop()
        self._home = threading.current_thread()
        self._thread: threading.Thread | None = None
        self._here = threading.Lock()  # held while the home thread runs the loop
        self._closed = False
        self._start_line: _StartLine | None = None
        self._start_line_lock = threading.Lock()
        #: The monotonic deadline of a call the home thread runs now (for :data:`_WATCHDOG`).
        self.deadline: float | None = None

    @contextmanager
    def start_line(self, participants: int) -> Iterator[None]:
        """Hold the next ``participants`` calls, from any threads, until all have arrived,
        then start them in one turn of the loop: racing coroutines meet at their first
        ``await`` instead of in the order their threads happened to submit them. The line
        is gone when the block ends, whoever arrived."""
        self._serve()
        line = _StartLine(participants) if participants > 1 else None
        with self._start_line_lock:
            self._start_line = line
        try:
            yield
        finally:
            with self._start_line_lock:
                if self._start_line is line:
                    self._start_line = None
            if line is not None:
                self.loop.call_soon_threadsafe(line.everyone_here.set)  # release late waiters

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        """``function(*args)`` on the loop, awaited if it returns an awaitable."""
        if self.wedged:
            raise CallTimeoutError("an earlier board call hung; the board's loop is blocked")
        if self._thread is None and threading.current_thread() is self._home:
            with self._here:
                if self._thread is None:
                    return self._call_here(function, args)
        self._serve()
        with self._start_line_lock:
            line = self._start_line
            if line is not None and line.admit():
                self._start_line = None
        work = _awaited(function, args) if line is None else line.gated(function, args)
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        try:
            return future.result(self.timeout)
        except TimeoutError:
            if future.done() and not future.cancelled():
                return future.result()  # finished as the wait ran out
            future.cancel()  # a coroutine stops at its next await
            self.wedged = not self._responds()
            assert self.timeout is not None
            raise CallTimeoutError(_timed_out(function, self.timeout)) from None

    def _call_here(self, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        # The loop runs in this thread for the call. A coroutine past the timeout is
        # cancelled at its next await; one that blocks the loop itself is cut off, in the
        # main thread, by the watchdog's SIGALRM, as a direct call is.
        task = self.loop.create_task(_awaited(function, args))
        if self.timeout is None:
            return self.loop.run_until_complete(task)
        watched = threading.current_thread() is threading.main_thread() and hasattr(
            signal, "pthread_kill"
        )
        if watched:
            _WATCHDOG.watch(self)
            self.deadline = time.monotonic() + self.timeout
        try:
            return self.loop.run_until_complete(asyncio.wait_for(task, self.timeout))
        except TimeoutError:
            if not task.cancelled():
                raise  # the board's own TimeoutError
            raise CallTimeoutError(_timed_out(function, self.timeout)) from None
        except _Interrupted as stuck:
            raise CallTimeoutError(_timed_out(function, self.timeout)) from stuck
        finally:
            self.deadline = None

    def _serve(self) -> None:
        """Run the loop on a thread of its own from now on (see the class docstring)."""
        if self._thread is not None:
            return
        with self._here:  # not while the home thread runs the loop for a call
            if self._thread is None:
                thread = threading.Thread(
                    target=self.loop.run_forever, name="taskboard board loop", daemon=True
                )
                thread.start()
                self._thread = thread

    def _responds(self) -> bool:
        # A blocking call inside a coroutine holds the loop itself: nothing can stop it.
        ping = asyncio.run_coroutine_threadsafe(asyncio.sleep(0), self.loop)
        try:
            ping.result(0.5)
        except TimeoutError:
            ping.cancel()
            return False
        return True

    def close(self) -> None:
        """Cancel what still runs, stop the loop and join its thread; never raises.

        A loop that does not answer (wedged, or a task that ignores cancellation) is
        left to its daemon thread, which dies with the process.
        """
        if self._closed:
            return
        self._closed = True
        _WATCHDOG.unwatch(self)
        if self.wedged:
            return
        if self._thread is None and threading.current_thread() is self._home:
            with self._here:
                self.loop.run_until_complete(_cancel_pending())
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
                self.loop.close()
            return
        self._serve()
        assert self._thread is not None
        try:
            asyncio.run_coroutine_threadsafe(_cancel_pending(), self.loop).result(5)
        except TimeoutError:
            self.wedged = True
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self._thread.is_alive():
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()


class _StartLine:
    """See :meth:`LoopDriver.start_line`."""

    def __init__(self, participants: int) -> None:
        self.unadmitted = participants
        self.waiting = participants
        self.everyone_here = asyncio.Event()

    def admit(self) -> bool:
        """Count one more participant in; True once the last one is (the line is full)."""
        self.unadmitted -= 1
        return self.unadmitted == 0

    async def gated(self, function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        self.waiting -= 1  # on the loop's thread: no lock needed
        if self.waiting == 0:
            self.everyone_here.set()
        else:
            await self.everyone_here.wait()
        return await _awaited(function, args)


def start_line(board: object, participants: int) -> AbstractContextManager[None]:
    """If ``board`` is driven on a loop, :meth:`LoopDriver.start_line` for its next
    ``participants`` calls; otherwise nothing (threads already start at a barrier)."""
    driver = getattr(board, "driver", None) if isinstance(board, _Driven) else None
    return driver.start_line(participants) if isinstance(driver, LoopDriver) else nullcontext()


async def _awaited(function: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    result = function(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def _cancel_pending() -> None:
    current = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() if t is not current]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def _timed_out(function: Callable[..., Any], seconds: float) -> str:
    name = getattr(function, "__qualname__", repr(function))
    return f"{name}() did not return within the per-call timeout of {seconds:g} s"


def open_driver(make: Callable[..., Any], timeout: timedelta | None) -> Driver:
    """The driver to make a board with: a loop for an ``async def`` factory, else direct."""
    if inspect.iscoroutinefunction(make):
        return LoopDriver(timeout)
    return DirectDriver(timeout)


def make_driven(
    make: Callable[..., Any], args: tuple[Any, ...], timeout: timedelta | None
) -> tuple[Any, Board, Driver]:
    """Make a board with ``make(*args)`` (sync or async) and drive it.

    Returns the board as made (for the host's ``close_board``), the board as the
    checker calls it, and the driver; an async board made by a sync factory gets a
    loop of its own, which binds its client on first use.
    """
    driver = open_driver(make, timeout)
    try:
        if isinstance(driver, DirectDriver):
            # Boxed: a plain factory may return a coroutine (an async factory in disguise).
            def boxed() -> list[Any]:
                return [make(*args)]

            boxed.__qualname__ = getattr(make, "__qualname__", "make_board")
            raw = driver.call(boxed)[0]
        else:
            raw = driver.call(make, *args)
        if isinstance(driver, DirectDriver) and (inspect.isawaitable(raw) or is_async_board(raw)):
            driver = LoopDriver(timeout)
            if inspect.isawaitable(raw):  # a plain function that returned a coroutine
                awaitable = raw
                raw = driver.call(lambda: awaitable)
    except BaseException:
        driver.close()
        raise
    return raw, driven(raw, driver), driver


def close_driven(close: Callable[[Any], Any], raw: object, driver: Driver) -> None:
    """Close a board made by :func:`make_driven`, then its driver; skipped if it hung."""
    try:
        if not driver.wedged:
            driver.call(close, raw)
    finally:
        driver.close()


class _Driven:
    """A board whose every call goes through a driver."""

    def __init__(self, board: Any, driver: Driver) -> None:
        self.board = board
        self.driver = driver

    def __repr__(self) -> str:
        return repr(self.board)


def wrapper_classes(
    name: str, base: type[T], method: Callable[[str], Callable[..., Any]]
) -> tuple[type[T], type[T], type[T], type[T]]:
    """Four subclasses of ``base`` whose Board methods ``method(name)`` makes: with neither
    optional method, with ``renew``, with ``fail``, with both (for :func:`shaped`)."""

    def variant(suffix: str, names: tuple[str, ...]) -> type[T]:
        return type(f"{name}{suffix}", (base,), {n: method(n) for n in names})

    return (
        variant("", CORE_METHODS),
        variant("WithRenew", (*CORE_METHODS, "renew")),
        variant("WithFail", (*CORE_METHODS, "fail")),
        variant("WithRenewAndFail", (*CORE_METHODS, "renew", "fail")),
    )


def shaped(board: object, classes: tuple[type[T], type[T], type[T], type[T]]) -> type[T]:
    """Of :func:`wrapper_classes`' four, the one with exactly the optional methods ``board``
    has, so ``isinstance(wrapper, RenewingBoard)`` answers as it would for ``board``."""
    plain, renew, fail, both = classes
    has_renew = callable(getattr(board, "renew", None))
    has_fail = callable(getattr(board, "fail", None))
    return (both if has_fail else renew) if has_renew else (fail if has_fail else plain)


def _through_driver(name: str) -> Callable[..., Any]:
    def method(self: _Driven, *args: Any) -> Any:
        return self.driver.call(getattr(self.board, name), *args)

    method.__name__ = method.__qualname__ = name
    return method


_DRIVEN = wrapper_classes("Driven", _Driven, _through_driver)


def driven(board: object, driver: Driver) -> Board:
    """``board`` as a synchronous Board whose calls go through ``driver``."""
    wrapper = shaped(board, _DRIVEN)(board, driver)
    assert isinstance(wrapper, Board)
    return wrapper
