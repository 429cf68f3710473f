"""The values and protocols of the storage-neutral Board contract (SPEC section 1)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol, runtime_checkable

__all__ = [
    "Board",
    "ClaimRequest",
    "Code",
    "FailingBoard",
    "Lease",
    "Problem",
    "RenewingBoard",
    "State",
    "Task",
]


class State(enum.StrEnum):
    """The state of a task. Only ``DONE`` is terminal: a ``FAILED`` task can be claimed again."""

    OPEN = "open"
    CLAIMED = "claimed"
    DONE = "done"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        """True when no later claim can succeed (``DONE`` only; failed work is usually redone)."""
        return self is State.DONE


class Code(enum.StrEnum):
    """The ten invariant classes that :func:`taskboard.check` reports (SPEC section 4)."""

    EMPTY_ID = "empty_id"
    DUPLICATE_ID = "duplicate_id"
    UNKNOWN_STATE = "unknown_state"
    UNKNOWN_DEP = "unknown_dep"
    SELF_DEP = "self_dep"
    DEP_CYCLE = "dep_cycle"
    CLAIMED_WITHOUT_LEASE = "claimed_without_lease"
    LEASE_WITHOUT_CLAIM = "lease_without_claim"
    TERMINAL_CLAIMED = "terminal_claimed"
    BLOCKED_CLAIM = "blocked_claim"


@dataclass(frozen=True)
class Lease:
    """The proof of one claim, minted by the board.

    ``token`` is the only credential for release, complete, renew and fail.
    ``fence`` grows strictly on every successful claim of the same task, so
    downstream resources can refuse a stale holder's late writes. ``until=None``
    means the lease never expires.
    """

    token: str
    fence: int
    until: datetime | None = None


@dataclass(frozen=True)
class Task:
    """One subtask as the board stores it.

    A ``Task`` accepts any field values, including an unknown state or an empty
    id: a snapshot read from storage may hold anything, and reporting it is
    :func:`taskboard.check`'s job. For convenience a ``deps`` list becomes a
    tuple and a known state string becomes a :class:`State`.
    """

    id: str
    title: str = ""
    deps: tuple[str, ...] = ()
    state: State = State.OPEN
    owner: str = ""
    lease: Lease | None = None
    seq: int = 0

    def __post_init__(self) -> None:
        deps: object = self.deps
        if isinstance(deps, list):
            object.__setattr__(self, "deps", tuple(deps))
        state: object = self.state
        if isinstance(state, str) and not isinstance(state, State) and state in _STATE_VALUES:
            object.__setattr__(self, "state", State(state))


_STATE_VALUES = frozenset(s.value for s in State)


@dataclass(frozen=True)
class ClaimRequest:
    """What a caller asks for when claiming or renewing: how long the lease should last.

    It carries no token, because tokens are minted by the board. ``ttl`` is a
    duration, not a deadline: the board computes ``until`` from its own clock.
    A zero ``ttl`` asks for a lease that never expires.

    Raises:
        TypeError: ``ttl`` is not a :class:`~datetime.timedelta`.
        ValueError: ``ttl`` is negative.
    """

    ttl: timedelta = timedelta(0)

    def __post_init__(self) -> None:
        ttl: object = self.ttl
        if not isinstance(ttl, timedelta):
            raise TypeError(f"ClaimRequest.ttl must be a timedelta, got {ttl!r}")
        if ttl < timedelta(0):
            raise ValueError(f"ClaimRequest.ttl must not be negative, got {ttl!r}")


@dataclass(frozen=True)
class Problem:
    """One invariant violation found by :func:`taskboard.check` in a snapshot."""

    task: str
    code: Code
    text: str


@runtime_checkable
class Board(Protocol):
    """The storage-neutral contract every host implements (SPEC section 3).

    ``claim`` must be atomic (read, check and write are one step), ``release``
    and ``complete`` act on the token alone, and ``list_tasks`` returns a
    consistent snapshot. Rejected operations raise a :class:`taskboard.BoardError`
    subclass and change nothing.
    """

    def list_tasks(self) -> Sequence[Task]:
        """Return a consistent snapshot of every task, in any order."""
        ...

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        """Claim a task for ``agent``; return it as ``list_tasks`` shows it afterwards."""
        ...

    def release(self, task_id: str, token: str) -> None:
        """Give the task back (``OPEN``), proving ownership with the lease token."""
        ...

    def complete(self, task_id: str, token: str) -> None:
        """Mark the task ``DONE`` (terminal), proving ownership with the lease token."""
        ...


@runtime_checkable
class RenewingBoard(Board, Protocol):
    """A Board whose holders can extend a live lease (SPEC 3.5).

    Renew is a check of ownership, not a heartbeat: a token that is not the
    current one, or a lease that has already expired, is ``LeaseLostError``.
    """

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        """Recompute ``until`` from the board's clock; token, fence and owner stay."""
        ...


@runtime_checkable
class FailingBoard(Board, Protocol):
    """A Board that can mark a claimed task ``FAILED`` (SPEC 3.6); optional."""

    def fail(self, task_id: str, token: str) -> None:
        """Mark the task ``FAILED`` (claimable again), proving ownership with the token."""
        ...
