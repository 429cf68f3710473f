"""Fault injection: a board wrapper that fails on purpose, reproducibly."""

from __future__ import annotations

import asyncio
import inspect
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, get_args

from taskboard._contract import Board
from taskboard._driver import is_async_board, shaped, wrapper_classes
from taskboard._operations import BOARD_METHODS

__all__ = ["FAULT_KINDS", "FaultKind", "InjectedFault", "InjectedFaultRecord", "inject_faults"]

#: ``before``: the call fails without reaching the board. ``after``: the call reaches the
#: board and takes effect, then its reply is lost. ``latency``: the call is delayed.
FaultKind = Literal["before", "after", "latency"]
FAULT_KINDS: tuple[FaultKind, ...] = get_args(FaultKind)


class InjectedFault(ConnectionError):
    """A fault :func:`inject_faults` raised on purpose.

    A ``ConnectionError``, so code under test treats it as the network failure it
    stands for. ``took_effect`` says whether the call reached the board and the
    board accepted it, before the reply was lost.
    """

    def __init__(self, message: str, *, method: str, took_effect: bool) -> None:
        super().__init__(message)
        self.method = method
        self.took_effect = took_effect


@dataclass(frozen=True)
class InjectedFaultRecord:
    """One fault a wrapper injected: the ``call``-th call (from 1), to ``method``."""

    call: int
    method: str
    kind: FaultKind


class _Faulty:
    """The wrapper: every Board method may fail; anything else is the wrapped board's."""

    def __init__(
        self,
        board: Any,
        rate: float,
        seed: int,
        kinds: tuple[FaultKind, ...],
        latency: float,
        methods: frozenset[str],
    ) -> None:
        self.board = board
        self.rate = rate
        self.seed = seed
        self.kinds = kinds
        self.latency = latency
        self.methods = methods
        #: Every fault injected so far, in order.
        self.injected: list[InjectedFaultRecord] = []
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._calls = 0

    def __repr__(self) -> str:
        return f"inject_faults({self.board!r}, rate={self.rate}, seed={self.seed})"

    def __getattr__(self, name: str) -> Any:
        # close(), clock_resolution, a host's own helpers: the wrapped board's.
        if name == "board":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.board, name)

    def _draw(self, method: str) -> tuple[int, FaultKind | None]:
        """This call's number (from 1) and the fault it meets, if any."""
        with self._lock:
            self._calls += 1
            hit = self._random.random() < self.rate
            kind = self._random.choice(self.kinds) if hit else None
            if kind is None or method not in self.methods:
                return self._calls, None
            self.injected.append(InjectedFaultRecord(self._calls, method, kind))
            return self._calls, kind

    def _fault(self, method: str, call: int, *, reached: bool, took_effect: bool) -> InjectedFault:
        if not reached:
            when = "before it reached the board"
        elif took_effect:
            when = "after it took effect (its reply was lost)"
        else:
            when = "after the board rejected it (its reply was lost)"
        return InjectedFault(
            f"injected fault on {method}() call {call}, {when} "
            f"(taskboard.faults, rate {self.rate:g}, seed {self.seed})",
            method=method,
            took_effect=took_effect,
        )

    def _enter(self, method: str) -> tuple[int, FaultKind | None]:
        """Draw this call's fault; a fault "before" is raised here."""
        call, kind = self._draw(method)
        if kind == "before":
            raise self._fault(method, call, reached=False, took_effect=False)
        return call, kind

    @contextmanager
    def _reply(self, method: str, call: int, kind: FaultKind | None) -> Iterator[None]:
        """Around the board's own call: a fault "after" replaces whatever it answered."""
        try:
            yield
        except Exception:
            if kind == "after":
                raise self._fault(method, call, reached=True, took_effect=False) from None
            raise
        if kind == "after":
            raise self._fault(method, call, reached=True, took_effect=True)

    def _run(self, method: str, *args: Any) -> Any:
        call, kind = self._enter(method)
        if kind == "latency":
            time.sleep(self.latency)
        with self._reply(method, call, kind):  # a fault "after" overrides the return
            return getattr(self.board, method)(*args)

    async def _run_async(self, method: str, *args: Any) -> Any:
        call, kind = self._enter(method)
        if kind == "latency":
            await asyncio.sleep(self.latency)
        with self._reply(method, call, kind):
            result = getattr(self.board, method)(*args)
            if inspect.isawaitable(result):  # a board may mix sync and async methods
                result = await result
        return result


def _sync_method(name: str) -> Callable[..., Any]:
    def method(self: _Faulty, *args: Any) -> Any:
        return self._run(name, *args)

    method.__name__ = method.__qualname__ = name
    return method


def _async_method(name: str) -> Callable[..., Any]:
    async def method(self: _Faulty, *args: Any) -> Any:
        return await self._run_async(name, *args)

    method.__name__ = method.__qualname__ = name
    return method


_SYNC = wrapper_classes("FaultyBoard", _Faulty, _sync_method)
_ASYNC = wrapper_classes("FaultyAsyncBoard", _Faulty, _async_method)


def inject_faults(
    board: Board,
    *,
    rate: float = 0.05,
    seed: int = 0,
    kinds: Iterable[FaultKind] = FAULT_KINDS,
    latency: timedelta = timedelta(milliseconds=2),
    methods: Iterable[str] = BOARD_METHODS,
) -> Board:
    """``board``, wrapped so that each call fails with probability ``rate``.

    A failing call draws one of ``kinds``: ``"before"`` raises :class:`InjectedFault`
    without calling the board; ``"after"`` calls the board, lets the call take
    effect, then raises :class:`InjectedFault` in place of its reply (the lost
    acknowledgement); ``"latency"`` sleeps ``latency`` before the call. Only calls
    to ``methods`` fail, though every call draws, so the faults fall on the same
    calls whatever ``methods`` is.

    The draws come from ``random.Random(seed)``, one per call in call order, so the
    same calls meet the same faults on every run: a failure found with faults on
    shrinks and replays. A wrapper of an async board (coroutine methods) is async
    too. It has the optional ``renew`` and ``fail`` exactly when ``board`` has
    them; every other attribute (``close``, say) is the wrapped board's. The
    faults injected so far are in its ``injected`` list.

    Raises:
        ValueError: ``rate`` is not in [0, 1], ``kinds`` is empty or holds an
            unknown kind, ``latency`` is negative, or ``methods`` names a method
            that is not a Board method.
    """
    kinds = tuple(kinds)
    methods = frozenset(methods)
    if not 0 <= rate <= 1:
        raise ValueError(f"inject_faults: rate must be in [0, 1], got {rate!r}")
    if not kinds or not set(kinds) <= set(FAULT_KINDS):
        raise ValueError(f"inject_faults: kinds must be some of {FAULT_KINDS}, got {kinds!r}")
    if latency < timedelta(0):
        raise ValueError(f"inject_faults: latency must not be negative, got {latency!r}")
    if not methods <= set(BOARD_METHODS):
        unknown = sorted(methods - set(BOARD_METHODS))
        raise ValueError(f"inject_faults: {unknown} are not Board methods ({BOARD_METHODS})")
    cls = shaped(board, _ASYNC if is_async_board(board) else _SYNC)
    wrapper = cls(board, rate, seed, kinds, latency.total_seconds(), methods)
    assert isinstance(wrapper, Board)
    return wrapper
