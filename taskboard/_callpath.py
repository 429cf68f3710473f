"""The one way the checker calls a board: :func:`make_call`, with interceptors around the call.

The machine's steps, the racing threads and worker processes of a parallel program, and the
two criteria all make their board calls here. What must surround every call of a run (a
client's own ``time.time()``, see ``client_clock_skew``) is an *interceptor* installed on the
run's call path, not code repeated at each caller.

An interceptor works as a pluggy hook wrapper does: it is a generator function, given the
:class:`~taskboard.model.Call`, that yields once. What it does before its ``yield`` runs before
the board is called; the ``yield`` hands it what the call returned, or raises there what the
call raised, so a ``with`` block or a ``try``/``finally`` around the ``yield`` spans the call.
Raising, before or after, makes that exception the call's outcome (and, before, no board call
is made); returning leaves the outcome as it was. The first interceptor is the outermost::

    def traced(call: Call) -> Generator[None, object, None]:
        print("calling", call)
        returned = yield
        print(call, "returned", returned)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from taskboard._clock import Clock
from taskboard._contract import Board
from taskboard.model._calls import Call, Outcome, is_infrastructure_fault

__all__ = ["Interceptor", "Made", "make_call"]

#: Around each board call: see the module docstring.
Interceptor = Callable[[Call], Generator[None, object, None]]


@dataclass(frozen=True)
class Made:
    """One board call made: what, what came of it, and when.

    ``invoked`` and ``returned`` are ``time.monotonic()`` right before and right after the
    call (its interceptors inside); ``started`` and ``ended`` are the clock's readings around
    those, when :func:`make_call` was given a clock.
    """

    call: Call
    outcome: Outcome
    #: True when the call raised an exception the contract does not name (an
    #: infrastructure fault): nobody knows whether it took effect.
    ambiguous: bool
    invoked: float
    returned: float
    started: datetime | None = None
    ended: datetime | None = None
    #: What the board returned, and what it raised, as they were; gone from a record that
    #: crossed to another process (see :meth:`portable`).
    value: object = field(default=None, compare=False, repr=False)
    error: Exception | None = field(default=None, compare=False, repr=False)

    def portable(self) -> Made:
        """This record without ``value`` and ``error``, which may not pickle (an exception's
        traceback, a driver's own result type): what a worker process sends back."""
        return replace(self, value=None, error=None)


def make_call(
    call: Call,
    board: Board,
    interceptors: Sequence[Interceptor] = (),
    clock: Clock | None = None,
) -> Made:
    """Make ``call`` on ``board`` through ``interceptors``, and record what came of it.

    An exception the call (or an interceptor) raises is its outcome, not raised here.

    Raises:
        BaseException: what is not an ``Exception`` (``KeyboardInterrupt``, ``SystemExit``)
            propagates, after every interceptor saw it.
        TypeError: an interceptor yielded more than once.
    """
    started = None if clock is None else clock.now()
    invoked = time.monotonic()
    value: object = None
    error: Exception | None = None
    try:
        value = call.invoke(board) if not interceptors else _intercepted(call, board, interceptors)
    except Exception as exc:
        error = exc
    returned = time.monotonic()
    ended = None if clock is None else clock.now()
    try:
        if error is None:
            outcome = Outcome.returned(value)
            return Made(call, outcome, False, invoked, returned, started, ended, value)
        outcome, ambiguous = Outcome.raised(error), is_infrastructure_fault(error)
        return Made(call, outcome, ambiguous, invoked, returned, started, ended, error=error)
    finally:
        # The exception's traceback holds this frame: a cycle only the garbage collector
        # would free, with every frame of the board's call in it.
        error = None


def _intercepted(call: Call, board: Board, interceptors: Sequence[Interceptor]) -> object:
    """``call.invoke(board)`` inside ``interceptors``, the first outermost."""
    entered: list[Generator[None, object, None]] = []
    value: object = None
    raised: BaseException | None = None
    try:
        for intercept in interceptors:
            wrapper = intercept(call)
            try:
                next(wrapper)
            except StopIteration:
                raise TypeError(f"the interceptor {intercept!r} did not yield") from None
            entered.append(wrapper)
        value = call.invoke(board)
    except BaseException as exc:  # every entered interceptor sees it, then it propagates
        raised = exc
    for intercept, wrapper in reversed(list(zip(interceptors, entered, strict=False))):
        try:
            if raised is None:
                wrapper.send(value)
            else:
                wrapper.throw(raised)
        except StopIteration:
            continue
        except BaseException as exc:
            raised = exc
            continue
        wrapper.close()
        raised = TypeError(f"the interceptor {intercept!r} yielded more than once")
    if raised is not None:
        try:
            raise raised
        finally:
            raised = None
    return value
