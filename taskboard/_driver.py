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
  the loop in that thread, with no hand-off, and a call's task takes its first step
  at once, so a coroutine that never has to wait costs no turn of the loop; once
  another thread calls, the loop moves to a thread of its own, where every call runs
  as a task, so calls from several threads interleave at their ``await`` points as
  they would in an async service. A call past its timeout is cancelled.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from types import FrameType
from typing import Any, Generic, Protocol, TypeVar, cast

from taskboard._contract import Board
from taskboard._operations import (
    BOARD_METHODS,
    CORE_METHODS,
    OPERATIONS,
    OPTIONAL_NAMES,
    operations_of,
)

__all__ = [
    "BOARD_METHODS",
    "CORE_METHODS",
    "CallTimeoutError",
    "DirectDriver",
    "Driver",
    "LoopDriver",
    "WrapperClasses",
    "close_driven",
    "driven",
    "is_async_board",
    "make_driven",
    "shaped",
    "start_line",
    "wrapper_classes",
]

T = TypeVar("T")

#: The real monotonic clock, bound before anything patches ``time.monotonic``: in virtual
#: mode a board call reads the machine's clock there (``taskboard._virtual._process_time``),
#: and a call's timeout, measured in that call's thread, must stay real.
_monotonic = time.monotonic


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
        self.deadline = _monotonic() + self.timeout
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


def _raw_getsignal() -> Callable[[int], Any]:
    # signal.getsignal turns the handler into a Handlers member if it is one, by trying
    # Handlers(handler): for a handler that is a function, a ValueError raised and caught,
    # some microseconds on every watched call. The C function it wraps answers as is.
    try:
        raw: Callable[[int], Any] = importlib.import_module("_signal").getsignal
    except (ImportError, AttributeError):  # not CPython
        return signal.getsignal
    return raw


_getsignal = _raw_getsignal()


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
        if _getsignal(signal.SIGALRM) != self.on_alarm:  # bound methods: == not is
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
            and _getsignal(signal.SIGALRM) == self.on_alarm
        ):
            signal.signal(signal.SIGALRM, self._previous or signal.SIG_DFL)

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        """The ``SIGALRM`` handler: the cut-off when this watchdog sent the alarm and the call
        under watch has overrun, else the handler there was before."""
        if self._sent:
            self._sent = False
            driver = self._driver
            deadline = driver.deadline if driver is not None else None
            if driver is not None and deadline is not None and _monotonic() >= deadline:
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
            if deadline is not None and _monotonic() >= deadline and not self._sent:
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


#: How long after a call's deadline the watchdog waits, once the call's coroutine awaits,
#: for the loop's own timer to cancel it, before cutting the loop off itself.
_LOOP_FIRST = 0.1


class LoopDriver:
    """Runs calls on an event loop it owns; see the module docstring.

    Calls from the thread that made the driver (the machine's, say) run the loop right
    there, one call at a time, with no hand-off to another thread; the call's task takes
    its first step in place, and the loop turns only if the coroutine waits (see
    :func:`_step_now`). The first call from any other thread (the parallel mode's, the
    criteria's) starts the loop on a thread of its own, where every later call runs, from
    any thread, so calls interleave at their ``await`` points as in an async service. The
    loop stops at :meth:`close`: anything a board binds to the loop (connections, pools)
    must be made by calls through the driver and released by calls through it before
    :meth:`close`.
    """

    def __init__(self, timeout: timedelta | None) -> None:
        self.timeout = _seconds(timeout)
        self.wedged = False
        self.loop = asyncio.new_event_loop()
        # The loop's timers (a library's asyncio.sleep, a call's timeout) stay on real time
        # while a virtual-mode call patches time.monotonic.
        self.loop.time = _monotonic  # type: ignore[method-assign]
        #: The loop's queue of ready callbacks when it is one whose first task step
        #: :func:`_step_now` can run (asyncio's own loops); ``None`` otherwise.
        self._ready = _ready_queue(self.loop)
        #: The async generator hooks the loop sets while it runs (for :func:`_step_now`).
        self._hooks: tuple[Any, Any] = (
            getattr(self.loop, "_asyncgen_firstiter_hook", None),
            getattr(self.loop, "_asyncgen_finalizer_hook", None),
        )
        self._home = threading.current_thread()
        #: Whether the watchdog can cut off a call the home thread runs (it is the main one).
        self._watched = self._home is threading.main_thread() and hasattr(signal, "pthread_kill")
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
        # The loop runs in this thread for the call. The call's task takes its first step
        # at once (see _step_now); the loop runs only if it awaits something that is not
        # ready. A coroutine past the timeout is cancelled at its next await; one that
        # blocks the loop itself is cut off, in the main thread, by the watchdog's SIGALRM,
        # as a direct call is.
        timeout = self.timeout
        deadline = None if timeout is None else _monotonic() + timeout
        if deadline is not None and self._watched:
            _WATCHDOG.watch(self)
            self.deadline = deadline
        task: asyncio.Task[Any] | None = None
        try:
            task = self._started(function, args)
            if not task.done():
                self._finish(task, deadline, function)
            return task.result()
        except _Interrupted as stuck:
            assert timeout is not None
            if task is not None:
                task.cancel()  # if it was cut off waiting, it must not go on at the next call
            raise CallTimeoutError(_timed_out(function, timeout)) from stuck
        finally:
            self.deadline = None
            # The board's exception, raised here, keeps this frame in its traceback; the
            # task keeps the exception: let go of the task, or each failed call is a
            # reference cycle that only the garbage collector frees.
            task = None

    def _started(self, function: Callable[..., Any], args: tuple[Any, ...]) -> asyncio.Task[Any]:
        """The call's task, its first step already taken when that can be done here."""
        loop = self.loop
        ready = self._ready
        if (
            ready is None
            or ready  # callbacks from an earlier call go first: the loop runs them
            or loop.get_debug()  # debug mode's checks are in the loop's own run
            or loop.get_task_factory() is not None
            or asyncio._get_running_loop() is not None  # this loop's, or another's
        ):
            return loop.create_task(_awaited(function, args))
        task: asyncio.Task[Any] | None = loop.create_task(_awaited(function, args))
        assert task is not None
        try:
            if len(ready) != 1:  # not the one step of a task we know: leave it to the loop
                return task
            _step_now(loop, ready.popleft(), self._hooks)
            if task.done() and ready:
                # It finished, but scheduled callbacks (a task it started, say): give them
                # the turn of the loop they would have had had the loop run the call.
                loop.call_soon(loop.stop)
                loop.run_forever()
            return task
        finally:
            # This frame ran the step: a frame of the coroutine may link back to it (in
            # the traceback of an exception the task keeps), so it must not keep the task.
            task = None

    def _finish(
        self, task: asyncio.Task[Any], deadline: float | None, function: Callable[..., Any]
    ) -> None:
        """Run the loop until ``task`` is done, cancelling it at ``deadline``."""
        loop = self.loop
        if deadline is None:
            loop.run_until_complete(task)
            return
        expired = False

        def expire() -> None:
            nonlocal expired
            expired = True
            task.cancel()

        timer = loop.call_later(max(deadline - _monotonic(), 0), expire)
        if self.deadline is not None:
            # From here on the timer cuts the call off, cancelling the coroutine at its
            # await (so its clean-up runs now); the watchdog, a little later, only if the
            # loop itself is blocked.
            self.deadline = deadline + _LOOP_FIRST
        try:
            loop.run_until_complete(task)
        except asyncio.CancelledError:
            if expired and task.cancelled():
                assert self.timeout is not None
                raise CallTimeoutError(_timed_out(function, self.timeout)) from None
            raise
        finally:
            timer.cancel()

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


def _ready_queue(loop: asyncio.AbstractEventLoop) -> deque[asyncio.Handle] | None:
    """``loop``'s queue of ready callbacks if :func:`_step_now` knows how to run its
    first task step (an asyncio loop, not uvloop's, say), else ``None``."""
    ready = getattr(loop, "_ready", None)
    known = (
        isinstance(loop, asyncio.BaseEventLoop)
        and all(
            hasattr(loop, name)
            for name in ("_thread_id", "_asyncgen_firstiter_hook", "_asyncgen_finalizer_hook")
        )
        and {"_context", "_callback", "_args"} <= set(getattr(asyncio.Handle, "__slots__", ()))
    )
    return ready if known and isinstance(ready, deque) else None


def _step_now(
    loop: asyncio.AbstractEventLoop, step: asyncio.Handle, hooks: tuple[Any, Any]
) -> None:
    """Run ``step``, a new task's first step that ``create_task`` scheduled on the idle
    ``loop``, right here, as the loop's first turn would: with the loop set up as running
    (so the coroutine finds it, ``asyncio.current_task()`` is its task, async generators
    hook to it), but without the turn's select, timers and second turn to see the task
    done. A call whose coroutine never waits (a board on memory, a cache hit) costs a
    task and one step; one that waits is left to the loop, mid-way, as it would be after
    the loop's first turn.

    Mirrors ``BaseEventLoop.run_forever``'s set-up and clean-up (Python 3.11 to 3.13),
    ``hooks`` being the loop's async generator hooks. The step runs as ``Handle._run``
    would run it, less its report of an exception that escapes: a task's step lets
    none escape but ``KeyboardInterrupt`` and ``SystemExit`` (re-raised there too) and
    the watchdog's cut-off, which must reach the caller, not the loop's exception handler.
    """
    base: Any = loop
    handle: Any = step
    del step  # the step holds its task, and this frame must not: see LoopDriver._started
    outer = sys.get_asyncgen_hooks()
    base._thread_id = threading.get_ident()
    try:
        sys.set_asyncgen_hooks(*hooks)
        asyncio._set_running_loop(loop)
        handle._context.run(handle._callback, *handle._args)
    finally:
        handle = None
        base._thread_id = None
        asyncio._set_running_loop(None)
        sys.set_asyncgen_hooks(*outer)


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


class WrapperClasses(Generic[T]):
    """Subclasses of ``base`` whose Board methods ``method(name)`` makes: one for each set of
    optional operations (see ``taskboard._operations``) a wrapped board has, made the first
    time a board of that shape is wrapped and kept.

    A wrapper of a board without ``renew`` has no ``renew`` attribute at all, so
    ``isinstance(wrapper, RenewingBoard)`` (which asks ``hasattr``) answers as it would for
    the board, and nothing asks again per call.
    """

    def __init__(
        self, name: str, base: type[T], method: Callable[[str], Callable[..., Any]]
    ) -> None:
        self.name = name
        self.base = base
        self.method = method
        self._made: dict[frozenset[str], type[T]] = {}

    def having(self, optional: Iterable[str]) -> type[T]:
        """The class with every core method and exactly the ``optional`` operations (any
        other name in it is ignored)."""
        present = frozenset(optional) & OPTIONAL_NAMES
        made = self._made.get(present)
        if made is None:  # two threads may both make it: the first one kept wins
            made = self._made.setdefault(present, self._make(present))
        return made

    def shaped(self, board: object) -> type[T]:
        """The class with exactly the optional methods ``board`` has."""
        return self.having(operations_of(board))

    def _make(self, present: frozenset[str]) -> type[T]:
        rows = [row for row in OPERATIONS if not row.optional or row.name in present]
        extras = [_title(row.name) for row in rows if row.optional]
        name = self.name + ("With" + "And".join(extras) if extras else "")
        made = type(name, (self.base,), {row.method: self.method(row.method) for row in rows})
        made.__module__ = self.base.__module__
        return cast(type[T], made)


def _title(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def wrapper_classes(
    name: str, base: type[T], method: Callable[[str], Callable[..., Any]]
) -> WrapperClasses[T]:
    """The subclasses of ``base`` whose Board methods ``method(name)`` makes, one for each set
    of optional methods a board may have (see :class:`WrapperClasses`; :func:`shaped` picks)."""
    return WrapperClasses(name, base, method)


def shaped(board: object, classes: WrapperClasses[T]) -> type[T]:
    """Of ``classes``, the one with exactly the optional methods ``board`` has, so that
    ``isinstance(wrapper, RenewingBoard)`` answers as it would for ``board``."""
    return classes.shaped(board)


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
