"""Clients whose clocks disagree: ``time.time()`` as each client's host would read it.

A library that judges expiry on the client (``time.time() + ttl`` stored as the lease's end,
a waiter comparing it with its own ``time.time()``) is correct only while every client's
clock agrees with the store's. Declared with ``client_clock_skew``, the machine shifts
``time.time()`` and ``time.time_ns()``, for the duration of each board call, by the clock
offset of the client making it, while judging every call on its own, unshifted, clock.
A board that keeps time on its server (Redis ``PX``, SQL ``now()``) or reads the
:class:`~taskboard.SystemClock` it was given never sees the shift.

The shift is an interceptor on the call path of a run that declares a skew (see
:mod:`taskboard._callpath`): every call the run makes, in its steps, its racing threads and its
worker processes, goes through it. The shift is per thread, so the threads of a parallel program
each keep their own client's clock.

With time-machine installed (``taskboard-contract[virtual]``, which the virtual clock uses
too, :mod:`taskboard._virtual._process_time`), the shift reaches ``datetime.now()`` and
``datetime.utcnow()`` as well, and code that did ``from datetime import datetime`` or
``from time import time``: time-machine patches them at the C level, and the traveller this
module starts reads each thread's own offset. Without it, only ``time.time()`` and
``time.time_ns()`` looked up on the module (``import time``) are shifted. ``time.monotonic()``
never is. The board's own clock (:func:`machine_clock`, the ``SystemClock`` a wall-clock run
gives it) reads the unshifted time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

from taskboard._callpath import Interceptor
from taskboard._clock import Clock, SystemClock
from taskboard.model import BoardModel, Call, Op
from taskboard.stateful._generation import AGENTS
from taskboard.stateful._trace import signed_offset

__all__ = [
    "ClientClock",
    "client_clock_interceptors",
    "client_clocks",
    "client_offset",
    "covers_datetime",
    "holders_of",
    "lease_holder",
    "machine_clock",
    "shifted_time",
]

#: Which way each agent's clock is off, as a multiple of the declared skew, in the order the
#: agents first appear: the first slow, the second fast, the third right, and so on.
_DIRECTIONS = (-1, 1, 0)

_real_time = time.time
_real_time_ns = time.time_ns
_shift = threading.local()
_guard = threading.Lock()
_active = 0

_time_machine: ModuleType | None
try:
    import time_machine as _time_machine
except ImportError:  # pragma: no cover - the extra is installed where the suite runs
    _time_machine = None
#: While any thread is shifted: the time-machine journey whose traveller reads each thread's
#: offset (``None`` without time-machine).
_journey: Any = None
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def covers_datetime() -> bool:
    """True when a client's shift reaches ``datetime.now()``/``utcnow()`` and ``from``-imported
    functions too (time-machine is installed, and its traveller reads the time as this module
    expects)."""
    return _time_machine is not None and callable(getattr(_time_machine, "Traveller", None))


def _real_now_ns() -> int:
    """The real time, whatever time-machine is doing (its escape hatch)."""
    assert _time_machine is not None
    hatch = _time_machine.escape_hatch
    return int(hatch.time.time_ns() if hatch.is_travelling() else _real_time_ns())


def _thread_time_ns() -> int:
    """What a shifted thread reads as the time: the real time plus its client's offset."""
    return _real_now_ns() + getattr(_shift, "nanos", 0)


class _MachineClock(SystemClock):
    """The wall clock the machine and the board it gave it read: the real time, never a
    client's shifted one (time-machine's escape hatch)."""

    def now(self) -> datetime:
        return _EPOCH + timedelta(microseconds=_real_now_ns() // 1000)


def machine_clock(skew: timedelta) -> Clock:
    """The wall clock a run with client clocks ``skew`` apart gives its board: one that the
    clients' shifts do not reach."""
    return _MachineClock() if skew and covers_datetime() else SystemClock()


def client_offset(agent: str | None, agents: tuple[str, ...], skew: timedelta) -> timedelta:
    """How far the clock of ``agent``'s client is from the machine's: ``-skew``, ``+skew`` or
    none, by the agent's place among ``agents`` (none for an agent not among them, and for
    calls no agent makes)."""
    if agent is None or agent not in agents or not skew:
        return timedelta(0)
    distinct = list(dict.fromkeys(agents))
    return _DIRECTIONS[distinct.index(agent) % len(_DIRECTIONS)] * skew


@dataclass(frozen=True)
class ClientClock:
    """The interceptor that runs each call on the clock of the client making it: a claim's
    agent's, or the agent's whose lease the token is (the machine's own, for a token no
    claim returned). It pickles when ``agent_of`` does, so worker processes install it too."""

    skew: timedelta
    #: The agent a claim issued the lease of a token to; ``None`` for a token no claim returned.
    agent_of: Callable[[str], str | None]

    def __call__(self, call: Call) -> Generator[None, object, None]:
        issued = None if call.op is Op.CLAIM else self.agent_of(call.token)
        agent = call.agent if issued is None else issued
        with shifted_time(client_offset(agent or None, AGENTS, self.skew)):
            yield


def client_clock_interceptors(
    skew: timedelta, agent_of: Callable[[str], str | None]
) -> tuple[Interceptor, ...]:
    """What a run with ``client_clock_skew`` of ``skew`` installs on its call path: a
    :class:`ClientClock`; nothing without a skew."""
    return (ClientClock(skew, agent_of),) if skew else ()


def lease_holder(model: BoardModel, token: str) -> str | None:
    """The agent a claim issued ``token``'s lease to, in ``model``; ``None`` for a token no
    claim returned."""
    issued = model.lease_of(token)
    return None if issued is None else issued.agent


def holders_of(model: BoardModel) -> Callable[[str], str | None]:
    """:func:`lease_holder` in ``model`` as it is now, as a value that pickles (a worker
    process cannot read the run's model)."""
    # Reversed, so that the first lease a token was issued with wins, as in lease_of().
    agents = {issued.token: issued.agent for issued in reversed(model.issued)}
    return agents.get


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
    """Within the block, this thread's ``time.time()`` and ``time.time_ns()`` (and, with
    time-machine, ``datetime.now()`` and ``datetime.utcnow()``) read ``offset`` away from the
    real clock; the clock is itself again once no thread is in such a block."""
    global _active, _journey
    if not offset:
        yield
        return
    with _guard:
        if _active == 0:
            if covers_datetime():
                assert _time_machine is not None
                _journey = _time_machine.travel(datetime.now(UTC), tick=True)
                # time-machine's patched functions ask the traveller on top for the time:
                # this one answers with the asking thread's offset.
                _journey.start().time_ns = _thread_time_ns
            else:
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
                if _journey is not None:
                    _journey.stop()
                    _journey = None
                else:
                    time.time = _real_time
                    time.time_ns = _real_time_ns
