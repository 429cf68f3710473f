"""What the Redis boards (:mod:`taskboard.hosts.redis`) send their scripts and how they read
the replies: plain functions, no I/O, so the sync and async boards share every decision
about a reply (the task it returns, a claim to run again with a new token, or the SPEC
error a rejection names) and keep only the calls to their clients.

Times travel as exact integer microseconds since the epoch, in decimal strings: the scripts
compare them as strings, since Lua's numbers are doubles (see
:mod:`taskboard.hosts._redis_lua`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, cast

from taskboard._contract import Lease, State, Task
from taskboard._errors import (
    BlockedError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_STATES = {s.value: s for s in State}


def _task_args(task: Task) -> list[str]:
    """A task as the insert script's ten arguments."""
    lease = task.lease
    return [
        task.id,
        task.title,
        json.dumps(list(task.deps), ensure_ascii=False),
        str(task.state),
        task.owner,
        "0" if lease is None else "1",
        "" if lease is None else lease.token,
        "" if lease is None else str(lease.fence),
        "" if lease is None or lease.until is None else str(_micros(lease.until)),
        str(task.seq),
    ]


def _text(value: object) -> str:
    """A reply value as text (bytes from a client without ``decode_responses``)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _task(row: Sequence[object]) -> Task:
    id_, title, deps, state, owner, token, fence, until, seq = row
    lease = None
    if token is not None and fence is not None:
        lease = Lease(
            token=_text(token),
            fence=int(_text(fence)),
            until=None if until is None else _datetime(int(_text(until))),
        )
    # An unknown state string is kept as is: reporting it is check()'s job.
    state_text = _text(state)
    deps_list: list[str] = json.loads(_text(deps))
    return Task(
        id=_text(id_),
        title=_text(title),
        deps=tuple(deps_list),
        state=_STATES.get(state_text, cast(State, state_text)),
        owner=_text(owner),
        lease=lease,
        seq=int(_text(seq)),
    )


def _snapshot(rows: Sequence[Sequence[object]]) -> list[Task]:
    return sorted((_task(row) for row in rows), key=lambda task: task.id)


def _claimed(task_id: str, reply: Sequence[Any]) -> Task | None:
    """The task a claim script's reply returns, or ``None`` if the script found its fresh
    token already issued (it changed nothing: run it again with another token); raises the
    SPEC error class of any other rejection (see :func:`_reject`)."""
    if _text(reply[0]) == "token_used":
        return None
    return _returned_task(task_id, reply)


def _returned_task(task_id: str, reply: Sequence[Any]) -> Task:
    if _text(reply[0]) != "ok":
        _reject(task_id, reply)
    return _task(reply[1])


def _returned_none(task_id: str, reply: Sequence[object]) -> None:
    if _text(reply[0]) != "ok":
        _reject(task_id, reply)


def _reject(task_id: str, reply: Sequence[object]) -> NoReturn:
    """Raise the SPEC error class a script's rejection code names."""
    code, *details = [_text(value) for value in reply]
    if code == "not_found":
        raise NotFoundError(f"no task has id {task_id!r}")
    if code == "terminal":
        raise TerminalError(f"task {task_id!r} is done; done is forever")
    if code == "blocked":
        dep, state = details
        raise BlockedError(f"task {task_id!r} waits for {dep!r} ({state})")
    if code == "taken":
        raise TakenError(f"task {task_id!r} is held by a live lease of {details[0]!r}")
    if code == "empty_agent":
        raise ValueError("claim needs a non-empty agent name")
    if code == "not_claimed":
        if details[0] == State.CLAIMED:
            raise LeaseLostError(f"task {task_id!r} is claimed but holds no lease")
        raise LeaseLostError(f"task {task_id!r} is {details[0]}, not claimed")
    if code == "wrong_token":
        raise LeaseLostError(f"token is not the current lease of {task_id!r}")
    if code == "expired":
        raise LeaseLostError(f"the lease on {task_id!r} expired; claim it again")
    raise RuntimeError(f"unexpected reply from a taskboard script: {reply!r}")


def _ttl(ttl: timedelta) -> str:
    """A TTL as a server-clock script's argument: microseconds, or ``""`` for no expiry."""
    return str(ttl // _MICROSECOND) if ttl > timedelta(0) else ""


def _until(now: int, ttl: timedelta) -> str:
    """SPEC 2: ``ttl > 0`` gives ``now + ttl``; ``ttl == 0`` gives no expiry (``""``)."""
    return str(now + ttl // _MICROSECOND) if ttl > timedelta(0) else ""


def _micros(when: datetime) -> int:
    """Exact integer microseconds since the epoch of an aware datetime."""
    return (when - _EPOCH) // _MICROSECOND


def _datetime(micros: int) -> datetime:
    return _EPOCH + micros * _MICROSECOND
