"""The rules a task a board returned or listed must obey (SPEC 2, 3 and 7).

The model (:mod:`taskboard.model._model`) decides which outcome a call may have and keeps
the state; these functions judge what came back: the lease a claim or renew returned, its
``until``, the fields an operation must leave alone, seq growth, and a ``list_tasks()``
snapshot against what the model holds. Each raises :class:`ContractViolation` on the first
rule broken, and holds no state of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from taskboard._clock import as_utc
from taskboard._contract import Lease, State, Task
from taskboard._operations import BY_OP
from taskboard.model._calls import (
    Call,
    Op,
    Outcome,
    Window,
    describe_task,
    format_duration,
    readable_duration,
)
from taskboard.model._violation import ContractViolation

__all__ = [
    "SUCCESS_CLAUSE",
    "IssuedLease",
    "SeqRule",
    "applied_outcome",
    "check_claimed_lease",
    "check_renewed_lease",
    "check_seq_grew",
    "check_unchanged_fields",
    "check_until",
    "compare",
    "lease_difference",
    "matches",
    "returned_task",
    "snapshot_by_id",
]

#: The clause each operation's success is defined by.
SUCCESS_CLAUSE = {op: f"SPEC {row.spec}" for op, row in BY_OP.items()}

#: How the next observed seq of a task relates to the one the model holds.
SeqRule = Literal["adopt", "equal", "grow"]


@dataclass(frozen=True)
class IssuedLease:
    """A lease some claim returned: who got which token and fence for which task."""

    token: str
    task_id: str
    fence: int
    agent: str


def returned_task(outcome: Outcome, call: Call, clause: str) -> Task:
    """The task a successful claim or renew returned, which it must return."""
    if outcome.task is None:
        raise ContractViolation(
            clause, f"{call.op} to return the task as list_tasks() shows it", "returned no Task"
        )
    return outcome.task


def check_claimed_lease(
    got: Task,
    clause: str,
    *,
    agent: str,
    task_id: str,
    max_fence: int | None,
    lease_of: Callable[[str], IssuedLease | None],
) -> Lease:
    """The lease a claim returned, once it is ``agent``'s under a fresh token and greater fence."""
    lease = got.lease
    _require(
        got.state == State.CLAIMED,
        clause,
        "the returned task CLAIMED",
        f"returned {got.state!r}",
    )
    _require(
        got.owner == agent,
        clause,
        f"owner {agent!r}",
        f"returned owner {got.owner!r}",
    )
    if lease is None:
        raise ContractViolation(clause, "a new lease on the returned task", "returned no lease")
    token, fence = lease.token, lease.fence
    _require(
        isinstance(token, str) and token != "",
        clause,
        "a non-empty token minted by the board",
        f"returned token {token!r}",
    )
    earlier = lease_of(token)
    if earlier is not None:
        raise ContractViolation(
            clause,
            "a token never issued before by this board, for any task",
            f"returned token {token!r}, already issued for task {earlier.task_id!r} "
            f"to {earlier.agent!r} (fence {earlier.fence})",
        )
    _require(
        isinstance(fence, int) and not isinstance(fence, bool),
        clause,
        "an integer fence",
        f"returned fence {fence!r}",
    )
    if max_fence is not None and fence <= max_fence:
        raise ContractViolation(
            clause,
            f"a fence greater than every earlier fence of task {task_id!r} "
            f"(highest so far: {max_fence}), across releases and takeovers",
            f"returned fence {fence}",
        )
    return lease


def check_renewed_lease(got: Task, owner: str, held: Lease, clause: str) -> Lease:
    """The lease a renew returned, once it is the ``held`` one, still ``owner``'s."""
    _require(
        got.state == State.CLAIMED, clause, "the task still CLAIMED", f"returned {got.state!r}"
    )
    _require(
        got.owner == owner,
        clause,
        f"the owner unchanged ({owner!r})",
        f"returned owner {got.owner!r}",
    )
    if got.lease is None:
        raise ContractViolation(clause, "the renewed lease", "returned no lease")
    _require(
        got.lease.token == held.token,
        clause,
        "the same token: renew is no takeover",
        f"returned token {got.lease.token!r} instead of {held.token!r}",
    )
    _require(
        got.lease.fence == held.fence,
        clause,
        f"the same fence ({held.fence}): renew is no takeover",
        f"returned fence {got.lease.fence!r}",
    )
    return got.lease


def check_until(
    until: datetime | None,
    now: datetime,
    ttl: timedelta,
    clause: str,
    window: Window | None,
    resolution: timedelta,
    store_boundary: bool = False,
) -> datetime | None:
    """The ``until`` to adopt for a lease of ``ttl`` taken at ``now`` (or in ``window``).

    ``store_boundary``: at an instant, an ``until`` up to one ``resolution`` past
    ``now + ttl`` (rounded up to the resolution's grid, for a ttl off it) is also accepted,
    and adopted as reported (a store that keeps a lease through its deadline tick; see
    ``BoardModel.store_boundary``).
    """
    if ttl == timedelta(0):
        _require(
            until is None,
            clause,
            "until=None: a zero ttl never expires (SPEC 2)",
            f"returned until={until!r}",
        )
        return None
    # A window of one instant (a call made wholly on one side of a move of the manual or
    # virtual clock in a controlled race) is judged as that instant, as exactly.
    if window is not None and window.width > timedelta(0):
        return check_until_in_window(until, ttl, clause, window, resolution)
    expected = now + ttl
    if not isinstance(until, datetime):
        raise ContractViolation(
            clause,
            f"until = now + ttl = {expected.isoformat()} (SPEC 2)",
            f"returned until={until!r}",
        )
    late = as_utc(until) - expected
    # A store that keeps a lease through its deadline tick ends it one tick past its
    # deadline, which is now + ttl rounded up to the store's grid when ttl is off it.
    if store_boundary and timedelta(0) < late <= resolution + _to_grid(expected, resolution):
        return as_utc(until)
    off = abs(late)
    if off >= resolution:
        raise ContractViolation(
            clause,
            f"until = the board's now + ttl = {expected.isoformat()} (SPEC 2), "
            f"to within the clock resolution {format_duration(resolution)}",
            f"returned until={as_utc(until).isoformat()}, "
            f"off by {readable_duration(as_utc(until) - expected)}",
        )
    # A ttl off the resolution grid cannot be kept exactly: how the store rounds it, within
    # one resolution, is when the lease ends.
    return expected if ttl % resolution == timedelta(0) else as_utc(until)


def _to_grid(instant: datetime, resolution: timedelta) -> timedelta:
    """How far ``instant`` is from the next multiple of ``resolution`` since the Unix epoch
    (zero on the grid)."""
    return -(as_utc(instant) - _EPOCH) % resolution


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def check_until_in_window(
    until: datetime | None, ttl: timedelta, clause: str, window: Window, resolution: timedelta
) -> datetime:
    """The ``until`` to adopt for a lease of ``ttl`` taken at some instant of ``window``."""
    # SPEC 7: the board's clock is unknown within the window, so its until is adopted
    # as long as it is one ttl after some instant of the window (widened by the
    # resolution the store keeps time in).
    earliest = window.earliest - resolution + ttl
    latest = window.latest + resolution + ttl
    expected = (
        f"until = the board's now + ttl, for a now inside the call's window (SPEC 2 and 7): "
        f"between {earliest.isoformat()} and {latest.isoformat()}, the window "
        f"{format_duration(window.width)} wide widened by the clock resolution "
        f"{format_duration(resolution)} on each side"
    )
    if not isinstance(until, datetime):
        raise ContractViolation(clause, expected, f"returned until={until!r}")
    got = as_utc(until)
    if not earliest <= got <= latest:
        off = got - earliest if got < earliest else got - latest
        raise ContractViolation(
            clause,
            expected,
            f"returned until={got.isoformat()}, {readable_duration(abs(off))} "
            + ("too early" if got < earliest else "too late"),
        )
    return got


def check_unchanged_fields(old: Task, got: Task, clause: str) -> None:
    """Check that a claim or renew returned the task's id, title and deps as they were."""
    _require(got.id == old.id, clause, f"the task {old.id!r}", f"returned task {got.id!r}")
    _require(
        got.title == old.title,
        clause,
        f"title {old.title!r} unchanged",
        f"returned {got.title!r}",
    )
    _require(
        _same_deps(got.deps, old.deps),
        clause,
        f"deps {old.deps!r} unchanged",
        f"returned {got.deps!r}",
    )


def check_seq_grew(old: Task, got: Task, clause: str) -> None:
    """Check that a successful operation returned a seq greater than the old one (SPEC 3.8)."""
    seq = got.seq
    if not isinstance(seq, int) or isinstance(seq, bool) or seq <= old.seq:
        raise ContractViolation(
            f"{clause}, SPEC 3.8",
            f"seq greater than {old.seq} after a successful operation",
            f"returned seq={seq!r}",
        )


def snapshot_by_id(snapshot: Sequence[Task], expected_ids: Sequence[str]) -> dict[str, Task]:
    """The snapshot's tasks by id, each of ``expected_ids`` exactly once (SPEC 3.7)."""
    seen: dict[str, Task] = {}
    for item in snapshot:
        if not isinstance(item, Task):
            raise ContractViolation(
                "SPEC 3.7", "list_tasks() to return Task values", f"returned {item!r}"
            )
        if item.id in seen:
            raise ContractViolation(
                "SPEC 3.7", "each task once in a snapshot", f"listed {item.id!r} twice"
            )
        seen[item.id] = item
    missing = [i for i in expected_ids if i not in seen]
    extra = sorted(set(seen) - set(expected_ids))
    if missing or extra:
        raise ContractViolation(
            "SPEC 3.7",
            f"every task in the snapshot, exactly: {list(expected_ids)!r}",
            f"listed {sorted(seen)!r} (missing {missing!r}, unknown {extra!r})",
        )
    return seen


def matches(want: Task, got: Task, resolution: timedelta) -> bool:
    """Whether a listed task shows ``want``, seq unchanged."""
    try:
        compare(want, None, "equal", got, resolution)
    except ContractViolation:
        return False
    return True


def compare(
    want: Task, pending: Op | None, seq_rule: SeqRule, got: Task, resolution: timedelta
) -> None:
    """Check that a listed task shows ``want``, after ``pending`` took effect if it did."""
    if pending is not None:
        clause = f"{SUCCESS_CLAUSE[pending]} ({pending} took effect)"
    else:
        clause = "SPEC 3 and 3.8 (a rejected operation, or one on another task, changes nothing)"
    differences = []
    for name in ("title", "state", "owner"):
        if getattr(got, name) != getattr(want, name):
            differences.append(f"{name}={getattr(got, name)!r} (expected {getattr(want, name)!r})")
    if not _same_deps(got.deps, want.deps):
        differences.append(f"deps={got.deps!r} (expected {want.deps!r})")
    lease_diff = lease_difference(want.lease, got.lease, resolution)
    if lease_diff:
        differences.append(lease_diff)
    seq = got.seq
    if not isinstance(seq, int) or isinstance(seq, bool):
        differences.append(f"seq={seq!r} (expected an integer)")
    elif seq_rule == "equal" and seq != want.seq:
        differences.append(f"seq={seq} (expected {want.seq}, unchanged since last seen)")
    elif seq_rule == "grow" and seq <= want.seq:
        differences.append(f"seq={seq} (expected greater than {want.seq})")
    if differences:
        raise ContractViolation(
            clause,
            f"list_tasks() to show {describe_task(want)}",
            f"listed task {want.id!r} with " + ", ".join(differences),
        )


def lease_difference(want: Lease | None, got: Lease | None, resolution: timedelta) -> str:
    """How a listed lease differs from the one expected, or ``""`` when it does not."""
    if want is None or got is None:
        return "" if want is got else f"lease={got!r} (expected {want!r})"
    if got.token != want.token or got.fence != want.fence:
        return (
            f"lease token/fence {got.token!r}/{got.fence!r} "
            f"(expected {want.token!r}/{want.fence!r})"
        )
    if (want.until is None) != (got.until is None):
        return f"lease until={got.until!r} (expected {want.until!r})"
    if (
        want.until is not None
        and got.until is not None
        and (
            not isinstance(got.until, datetime) or abs(as_utc(got.until) - want.until) >= resolution
        )
    ):
        return f"lease until={got.until!r} (expected {want.until.isoformat()})"
    return ""


def applied_outcome(
    call: Call, snapshot: Sequence[Task], known_tokens: frozenset[str]
) -> Outcome | None:
    """What ``call`` returned if it took effect, as far as ``snapshot`` shows.

    Release, complete and fail return nothing; a claim returned the task with a lease
    for its agent under a token not in ``known_tokens``; a renew, the task under the
    same token. ``None``: the snapshot shows no such lease.
    """
    if BY_OP[call.op].returns == "nothing":
        return Outcome()
    task = next((t for t in snapshot if isinstance(t, Task) and t.id == call.task_id), None)
    if task is None or task.state is not State.CLAIMED or task.lease is None:
        return None
    lease = task.lease
    if call.op is Op.CLAIM and task.owner == call.agent and lease.token not in known_tokens:
        return Outcome(task=task)
    if call.op is Op.RENEW and lease.token == call.token:
        return Outcome(task=task)
    return None


def _same_deps(got: object, want: tuple[str, ...]) -> bool:
    # Dependencies are a set: SPEC fixes no order, and a join table returns its own.
    try:
        return bool(Counter(got) == Counter(want))  # type: ignore[call-overload]
    except TypeError:  # not iterable, or unhashable items
        return False


def _require(ok: bool, clause: str, expected: str, observed: str) -> None:
    if not ok:
        raise ContractViolation(clause, expected, observed)
