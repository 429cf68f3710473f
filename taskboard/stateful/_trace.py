"""The record of what the machine did, step by step, and how it reads in a report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from taskboard._clock import as_utc
from taskboard._operations import BY_OP
from taskboard.model import Call, Outcome, format_duration, readable_duration

__all__ = [
    "FORGERIES",
    "NEMESIS_HOOKS",
    "forge",
    "format_offset",
    "render_call",
    "render_outcome",
    "resolve_token",
    "token_ref",
]

#: Ways to forge a token from a real one: close misses that catch stores comparing by prefix,
#: truncating the token column, or folding case.
FORGERIES = ("never issued", "empty", "one char longer", "one char shorter", "other case")


#: The nemesis steps (SPEC 9), each by the machine hook it runs.
NEMESIS_HOOKS = {"restart": "restart_storage", "drop": "drop_connections"}


def forge(token: str, how: str) -> str:
    """A token that is not ``token`` but close to it, in one of the :data:`FORGERIES` ways."""
    match how:
        case "never issued":
            return "forged-token-0000"
        case "empty":
            return ""
        case "one char longer":
            return token + "0"
        case "one char shorter":
            return token[:-1]
        case "other case":
            swapped = token.swapcase()
            return swapped if swapped != token else token + "X"
    raise ValueError(f"unknown forgery {how!r}; expected one of {FORGERIES!r}")


def token_ref(token: str, labels: Mapping[str, str], forgery: str = "", of: str = "") -> str:
    """The replayable reference of a token: its lease label, a forgery of one, or a literal."""
    if forgery:
        return f"{labels[of]}:{forgery}"
    label = labels.get(token)
    return label if label is not None else f"={token}"


def resolve_token(ref: str, tokens_by_label: Mapping[str, str]) -> str:
    """The token a reference names on this board: ``L3`` is this board's third lease's token.

    A label this board never minted (a claim that succeeded when recorded fails on replay)
    resolves to a token no claim returned, so the step still runs and is judged.
    """
    if ref.startswith("="):
        return ref[1:]
    label, _, forgery = ref.partition(":")
    token = tokens_by_label.get(label, f"unminted-{label}")
    return forge(token, forgery) if forgery else token


def format_offset(delta: timedelta) -> str:
    """A duration as a trace shows it: exactly under a second, a length of a millisecond or
    more in decimal milliseconds (``8.624ms``, not ``8624us``), as wall-clock times are; a
    second or more in readable units (``1.5 s``, ``8 h 0 min``; see
    :func:`~taskboard.model.readable_duration`)."""
    return readable_duration(delta)


def signed_offset(delta: timedelta) -> str:
    """An offset from the run's start as a trace shows it: ``+8.624ms``, or ``-217us`` for
    an instant before it (a window's skew, a lease stamped on a slow clock)."""
    return ("+" if delta >= timedelta(0) else "") + format_offset(delta)


def render_call(call: Call, token_label: Callable[[str], str]) -> str:
    """A call as a report shows it, its token named by ``token_label`` (``L3``, say)."""
    row = BY_OP[call.op]
    if row.token:
        args = f"{call.task_id!r}, token={token_label(call.token)}"
    else:
        args = f"{call.task_id!r}, agent={call.agent!r}"
    if row.request:
        args += f", ttl={format_duration(call.ttl)}"
    return f"{call.op}({args})"


def render_outcome(
    outcome: Outcome | None, start: datetime, token_label: Callable[[str], str]
) -> str:
    """What the board did, as a report shows it: the error, or ``ok`` with the lease."""
    if outcome is None:
        return "?"
    if outcome.error is not None:
        return outcome.error
    task = outcome.task
    if task is None or task.lease is None:
        return "ok"
    lease = task.lease
    head = f"ok {token_label(lease.token)} fence={lease.fence!r}"
    until = lease.until
    if until is None:
        return f"{head} no expiry"
    if not isinstance(until, datetime):
        return f"{head} until={until!r}"
    return f"{head} until {signed_offset(as_utc(until) - start)}"
