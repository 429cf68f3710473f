"""Clients whose clocks disagree: ``time.time()`` as each client's host would read it.

A library that judges expiry on the client (``time.time() + ttl`` stored as the lease's end,
a waiter comparing it with its own ``time.time()``) is correct only while every client's
clock agrees with the store's. Declared with ``client_clock_skew``, the machine shifts
``time.time()`` and ``time.time_ns()``, for the duration of each board call, by the clock
offset of the client making it, while judging every call on its own, unshifted, clock.
A board that keeps time on its server (Redis ``PX``, SQL ``now()``) or reads the
:class:`~taskboard.SystemClock` it was given never sees the shift.

The shift is per thread, so the threads of a parallel program each keep their own client's
clock. It reaches code that looks ``time.time`` up when it calls it (``import time``), not a
``from time import time`` bound earlier, nor ``datetime.now()`` or ``time.monotonic()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import timedelta

from taskboard.model import BoardModel, Call, Op
from taskboard.stateful._generation import AGENTS
from taskboard.stateful._trace import signed_offset

__all__ = ["client_clock", "client_clocks", "client_offset", "shifted_time"]

#: Which way each agent's clock is off, as a multiple of the declared skew, in the order the
#: agents first appear: the first slow, the second fast, the third right, and so on.
_DIRECTIONS = (-1, 1, 0)

_real_time = time.time
_real_time_ns = time.time_ns
_shift = threading.local()
_guard = threading.Lock()
_active = 0


def client_offset(agent: str | None, agents: tuple[str, ...], skew: timedelta) -> timedelta:
    """How far the clock of ``agent``'s client is from the machine's: ``-skew``, ``+skew`` or
    none, by the agent's place among ``agents`` (none for an agent not among them, and for
    calls no agent makes)."""
    if agent is None or agent not in agents or not skew:
        return timedelta(0)
    distinct = list(dict.fromkeys(agents))
    return _DIRECTIONS[distinct.index(agent) % len(_DIRECTIONS)] * skew


def client_clock(call: Call, model: BoardModel, skew: timedelta) -> AbstractContextManager[None]:
    """The clock of the client that makes ``call``: a claim's agent's, or the agent's whose
    lease the token is (the machine's own, for a token no claim returned)."""
    if not skew:
        return shifted_time(timedelta(0))
    issued = None if call.op is Op.CLAIM else model.lease_of(call.token)
    agent = call.agent if issued is None else issued.agent
    return shifted_time(client_offset(agent or None, AGENTS, skew))


def client_clocks(skew: timedelta) -> str:
    """How a report's trace heading names the clients' clocks (nothing when none is shifted)."""
    if not skew:
        return ""
    offsets = ", ".join(
        f"{agent!r} {signed_offset(client_offset(agent, AGENTS, skew))}"
        for agent in dict.fromkeys(AGENTS)
    )
    return f", time.time() of each agent's client shifted: {offsets}"


def _shifted_time() -> float:
    return _real_time() + getattr(_shift, "seconds", 0.0)


def _shifted_time_ns() -> int:
    return _real_time_ns() + getattr(_shift, "nanos", 0)


@contextmanager
def shifted_time(offset: timedelta) -> Iterator[None]:
    """Within the block, this thread's ``time.time()`` and ``time.time_ns()`` read ``offset``
    away from the real clock; ``time`` is itself again once no thread is in such a block."""
    global _active
    if not offset:
        yield
        return
    with _guard:
        if _active == 0:
            time.time = _shifted_time
            time.time_ns = _shifted_time_ns
        _active += 1
    _shift.seconds = offset.total_seconds()
    _shift.nanos = offset // timedelta(microseconds=1) * 1000
    try:
        yield
    finally:
        _shift.seconds = 0.0
        _shift.nanos = 0
        with _guard:
            _active -= 1
            if _active == 0:
                time.time = _real_time
                time.time_ns = _real_time_ns
