"""One representation of an operation and of what a board did with it.

The machine, the trace files, replay and the linearizability checker all speak
in these values, so "claim t1 as a2 for 5ms" is written down exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from taskboard._contract import Board, Task
from taskboard._errors import (
    BlockedError,
    BoardError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)
from taskboard._operations import BY_OP, Op

__all__ = [
    "CONTRACT_ERRORS",
    "Allowed",
    "Call",
    "Op",
    "Outcome",
    "Step",
    "When",
    "Window",
    "describe_task",
    "format_duration",
    "is_infrastructure_fault",
    "readable_duration",
]


#: The exceptions that are contract outcomes, most specific first, by the name outcomes use.
CONTRACT_ERRORS: dict[str, type[Exception]] = {
    "NotFoundError": NotFoundError,
    "TerminalError": TerminalError,
    "BlockedError": BlockedError,
    "TakenError": TakenError,
    "LeaseLostError": LeaseLostError,
    "ValueError": ValueError,
}


def is_infrastructure_fault(exc: BaseException) -> bool:
    """True for an exception a board raised that is no contract outcome: not a
    ``BoardError`` (any, for the model to judge) and not a ``ValueError``."""
    return not isinstance(exc, BoardError | ValueError)


def format_duration(delta: timedelta) -> str:
    """Render a duration exactly, in its largest whole unit: ``0s``, ``2h``, ``5ms``, ``7us``."""
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if micros == 0:
        return "0s"
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    for unit, size in (("h", 3_600_000_000), ("s", 1_000_000), ("ms", 1_000)):
        if micros % size == 0:
            return f"{sign}{micros // size}{unit}"
    return f"{sign}{micros}us"


def readable_duration(delta: timedelta) -> str:
    """Render a duration for a reader: under a millisecond in microseconds (``217us``), under
    a second in decimal milliseconds (``8.624ms``), then in seconds (``1.5 s``), minutes and
    seconds (``2 min 3.5 s``), hours and minutes (``8 h 0 min``) or days and hours
    (``338 d 23 h``), rounded, so that hours off read as hours, not ``28799997364us``."""
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    sign = "-" if micros < 0 else ""
    micros = abs(micros)
    if micros < 1_000_000:
        text = format_duration(timedelta(microseconds=micros))
        if text.endswith("us") and micros >= 1_000:
            text = f"{micros // 1000}.{micros % 1000:03d}ms"
        return sign + text if micros else text
    if micros < 60_000_000:
        return f"{sign}{_decimal(micros, 1_000_000)} s"
    millis = round(micros / 1000)
    if millis < 3_600_000:
        minutes, rest = divmod(millis, 60_000)
        return f"{sign}{minutes} min {_decimal(rest, 1000)} s"
    minutes = round(micros / 60_000_000)
    if minutes < 24 * 60:
        return f"{sign}{minutes // 60} h {minutes % 60} min"
    hours = round(micros / 3_600_000_000)
    return f"{sign}{hours // 24} d {hours % 24} h"


def _decimal(micros: int, unit: int) -> str:
    """``micros`` in ``unit`` s, as a decimal with no trailing zeros: ``1.5``, ``12``."""
    whole, rest = divmod(micros, unit)
    digits = len(str(unit)) - 1
    fraction = f"{rest:0{digits}d}".rstrip("0")
    return f"{whole}.{fraction}" if fraction else str(whole)


@dataclass(frozen=True)
class Call:
    """One operation on one task: what to call, with which arguments."""

    op: Op
    task_id: str
    agent: str = ""
    token: str = ""
    ttl: timedelta = timedelta(0)

    def invoke(self, board: Board) -> Task | None:
        """Call this operation on ``board`` and return what it returned (or let it raise)."""
        # No isinstance() against the optional protocols: a runtime Protocol check costs more
        # than the call, and a board without the method raises AttributeError anyway.
        result: Task | None = _INVOKE[self.op](board, self)
        return result

    def __str__(self) -> str:
        row = BY_OP[self.op]
        args = [repr(self.task_id)]
        if row.token:
            args.append(f"token={_short(self.token)}")
        else:
            args.append(f"agent={self.agent!r}")
        if row.request:
            args.append(f"ttl={format_duration(self.ttl)}")
        return f"{self.op}({', '.join(args)})"


#: How :meth:`Call.invoke` calls each operation, from the table of operations.
_INVOKE = {op: row.invoke for op, row in BY_OP.items()}


def _short(token: str) -> str:
    return repr(token) if len(token) <= 12 else repr(token[:10] + "…")


@dataclass(frozen=True)
class Outcome:
    """What the board did: returned (``error is None``) or raised the named exception.

    ``error`` is the name of the contract class the exception is an instance of
    (see :data:`CONTRACT_ERRORS`), or the exception's own class name when it is
    no contract outcome at all. ``task`` is what ``claim``/``renew`` returned.
    """

    error: str | None = None
    task: Task | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        """True when the board accepted the operation."""
        return self.error is None

    @classmethod
    def returned(cls, value: object) -> Outcome:
        """The outcome of a call that returned ``value``."""
        return cls(task=value if isinstance(value, Task) else None)

    @classmethod
    def raised(cls, exc: BaseException) -> Outcome:
        """The outcome of a call that raised ``exc``."""
        for name, kind in CONTRACT_ERRORS.items():
            if isinstance(exc, kind):
                return cls(error=name, message=str(exc))
        return cls(error=type(exc).__qualname__, message=str(exc))

    @property
    def is_contract_error(self) -> bool:
        """True when the board raised one of the contract's outcomes."""
        return self.error in CONTRACT_ERRORS

    def __str__(self) -> str:
        if self.error is None:
            if self.task is None:
                return "returned None"
            return f"returned {describe_task(self.task)}"
        return f"raised {self.error}({self.message!r})" if self.message else f"raised {self.error}"


def describe_task(task: Task) -> str:
    """A one-line rendering of a task as the board showed it."""
    lease = task.lease
    if lease is None:
        lease_text = "no lease"
    else:
        until = "never expires" if lease.until is None else f"until {lease.until.isoformat()}"
        lease_text = f"lease(token={_short(lease.token)}, fence={lease.fence!r}, {until})"
    owner = f", owner={task.owner!r}" if task.owner else ""
    return f"{task.id!r} {task.state}{owner}, {lease_text}, seq={task.seq!r}"


@dataclass(frozen=True)
class Allowed:
    """One outcome the contract allows: an error class (by name), or success when ``None``."""

    error: str | None
    clause: str
    reason: str

    def __str__(self) -> str:
        what = "success" if self.error is None else self.error
        return f"{what} ({self.clause}: {self.reason})"


@dataclass(frozen=True)
class Window:
    """When a call took effect, as far as a wall-clock observer can tell (SPEC 7).

    The machine reads its clock right before a call (``a``) and right after it returns
    (``b``); the board's clock may be ``skew`` away from the machine's, so the call took
    effect at one instant of ``[a - skew, b + skew]``.

    Raises:
        TypeError: a bound is not an aware datetime.
        ValueError: ``earliest`` is after ``latest``.
    """

    earliest: datetime
    latest: datetime

    def __post_init__(self) -> None:
        for name in ("earliest", "latest"):
            value = getattr(self, name)
            if not isinstance(value, datetime) or value.utcoffset() is None:
                raise TypeError(f"Window.{name} must be an aware datetime, got {value!r}")
        if self.earliest > self.latest:
            raise ValueError(
                f"Window.earliest ({self.earliest.isoformat()}) is after "
                f"Window.latest ({self.latest.isoformat()})"
            )

    @classmethod
    def around(cls, before: datetime, after: datetime, skew: timedelta) -> Window:
        """The window of a call made between ``before`` and ``after``, widened by ``skew``."""
        return cls(before - skew, after + skew)

    @property
    def width(self) -> timedelta:
        """How long the window is."""
        return self.latest - self.earliest

    def __str__(self) -> str:
        return f"[{self.earliest.isoformat()} .. {self.latest.isoformat()}]"


#: When the model judges a call: an instant (manual clock) or a window (wall clock, SPEC 7).
When = datetime | Window


@dataclass(frozen=True)
class Step:
    """One step of a run: a board call with its outcome, or a move of the clock.

    ``at`` is the clock when the step ran; ``allowed`` is what the model
    allowed for the call; ``advance`` is how far a clock step moved the clock;
    ``note`` says why a clock step went where it went. ``token_ref`` says where
    the call's token came from, so the step can be replayed against another
    board, which mints other tokens: ``"L3"`` (the third lease a claim
    returned), ``"L3:one char longer"`` (a forgery of it), or ``"=text"`` (a
    literal token no claim returned). ``window`` is the call's window in wall-clock mode
    (SPEC 7), ``None`` on a manual clock. ``nemesis`` is set on a step that ran a storage
    hook instead of a call (SPEC 9): ``"restart"`` (``restart_storage``) or ``"drop"``
    (``drop_connections``); its ``note`` says what the snapshot after it showed.
    """

    index: int
    at: datetime
    call: Call | None = None
    outcome: Outcome | None = None
    allowed: tuple[Allowed, ...] = ()
    advance: timedelta | None = None
    note: str = ""
    token_ref: str = ""
    window: Window | None = None
    nemesis: str = ""
