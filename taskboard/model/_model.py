"""The reference model: SPEC section 3 in code, pure and deterministic.

The model never calls a board and owns no clock: every judgement takes its time
explicitly, an instant ``now`` on a manual clock or a :class:`Window` on the wall
clock (SPEC 7). For each call it says which outcomes the contract allows
(:meth:`BoardModel.expect`), then advances on what the board actually did
(:meth:`BoardModel.advance`), rejecting what was not allowed. Tokens and fences
are minted by the board, so the model checks their properties (fresh token,
greater fence) and then adopts the board's values.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar, get_args

from taskboard._clock import as_utc
from taskboard._contract import Lease, State, Task
from taskboard.model._calls import (
    Allowed,
    Call,
    Op,
    Outcome,
    Step,
    When,
    Window,
    describe_task,
    format_duration,
)

__all__ = [
    "EXPIRED_LEASE_POLICIES",
    "Allowed",
    "BoardModel",
    "ContractViolation",
    "ExpiredLeasePolicy",
    "IssuedLease",
    "is_live",
    "violations_in",
]

#: SPEC 3.4: what a board does with release/complete/fail by the current token of an expired
#: lease nobody has taken over. ``"either"`` accepts both; a host may pin one.
ExpiredLeasePolicy = Literal["either", "accept", "reject"]
#: The three :data:`ExpiredLeasePolicy` values, for checking one read at run time.
EXPIRED_LEASE_POLICIES: tuple[str, ...] = get_args(ExpiredLeasePolicy)

#: The clause each operation's success is defined by.
_CLAUSE = {
    Op.CLAIM: "SPEC 3.1",
    Op.RENEW: "SPEC 3.5",
    Op.RELEASE: "SPEC 3.2",
    Op.COMPLETE: "SPEC 3.3",
    Op.FAIL: "SPEC 3.6",
}
_AFTER = {Op.RELEASE: State.OPEN, Op.COMPLETE: State.DONE, Op.FAIL: State.FAILED}


E = TypeVar("E", bound=BaseException)


class ContractViolation(AssertionError):
    """The board did something the contract does not allow.

    Raised by the model (and, with the step and trace added, by the machine).
    ``clause`` names the SPEC clause, ``expected`` what the contract allowed and
    why, ``observed`` what the board did. It is an ``AssertionError`` so test
    runners report it as a test failure, not as an error in the test itself.
    """

    #: The step that broke the contract (``None`` for the initial snapshot), when known.
    step: Step | None = None
    #: Every step of the run up to and including :attr:`step`, when known.
    trace: tuple[Step, ...] = ()
    #: The JSON trace file written for this failure, if one was.
    trace_file: str | None = None
    #: The run as a ``taskboard.stateful.Trace``, kept by the machine in case it does not recur.
    recording: Any = None
    #: The machine's whole report of it (a value of ``taskboard.stateful``), when it made one.
    report: Any = None

    def __init__(self, clause: str, expected: str, observed: str, *, report: str = "") -> None:
        self.clause = clause
        self.expected = expected
        self.observed = observed
        # ``report``: the whole text a checker made of it (the step, the trace, ...).
        super().__init__(report or f"{clause}: expected {expected}; the board {observed}")


def violations_in(error: BaseException | None) -> list[ContractViolation]:
    """The contract violations in an error: itself, its group members, or what it interrupted.

    Hypothesis may wrap a violation: in an ``ExceptionGroup`` when it reports several bugs,
    or in a ``Flaky...`` error, raised while handling the violation, when a board whose bug
    depends on its own random tokens makes a replay diverge.
    """
    return errors_in(error, ContractViolation)


def errors_in(error: BaseException | None, kind: type[E]) -> list[E]:
    """The errors of ``kind`` in an error, found as :func:`violations_in` finds violations."""
    if error is None:
        return []
    if isinstance(error, kind):
        return [error]
    found = [e for inner in getattr(error, "exceptions", ()) for e in errors_in(inner, kind)]
    return found or errors_in(error.__context__, kind)


def is_live(lease: Lease | None, now: datetime) -> bool:
    """SPEC 2: a lease is live at ``now`` iff it never expires or ``now < until``."""
    return lease is not None and (lease.until is None or now < _utc(lease.until))


_utc = as_utc  # a naive datetime read back from storage is taken as UTC, not rejected


@dataclass(frozen=True)
class IssuedLease:
    """A lease some claim returned: who got which token and fence for which task."""

    token: str
    task_id: str
    fence: int
    agent: str


SeqRule = Literal["adopt", "equal", "grow"]


@dataclass(frozen=True)
class _Record:
    # ``task`` is what the next snapshot must show, with seq as last observed; ``seq_rule`` says
    # how the next observed seq relates to it; ``pending`` is the operation that changed it.
    task: Task
    max_fence: int | None = None
    seq_rule: SeqRule = "equal"
    pending: Op | None = None


@dataclass(frozen=True)
class _Held:
    # One state a task held, and the ones held before it: a list that grows at the front in
    # constant time, however long the run.
    task: Task
    before: _Held | None


def _held(newest: _Held | None) -> Iterator[Task]:
    while newest is not None:
        yield newest.task
        newest = newest.before


@dataclass(frozen=True)
class BoardModel:
    """The board as the contract says it must be, after the outcomes observed so far.

    Immutable: :meth:`advance` and :meth:`reconcile` return a new model, so a
    checker can branch on it. ``resolution`` is the host's clock resolution: an
    ``until`` that differs from the exact ``now + ttl`` by less than it is accepted.

    Time: each call is judged at an instant (a manual clock) or on a :class:`Window`
    (the wall clock, SPEC 7). On a window, an outcome is allowed iff some instant of the
    window, not before ``floor``, allows it; the model then goes on from the earliest
    such instant, which becomes the new ``floor``, so effect instants never go backwards.
    """

    records: tuple[_Record, ...]
    issued: tuple[IssuedLease, ...] = ()
    policy: ExpiredLeasePolicy = "either"
    resolution: timedelta = timedelta(microseconds=1)
    #: The earliest instant the last call judged on a window may have taken effect: the
    #: next call takes effect no earlier (SPEC 7). ``None`` before any such call.
    floor: datetime | None = None
    #: Every task state the model held since the start or the last restart, besides what
    #: it holds now, newest first: the states a board that is not durable may fall back to
    #: (SPEC 9). Not compared: two models that hold the same board are the same model (the
    #: linearizability search memoizes on that), whatever they held before.
    earlier: _Held | None = field(default=None, compare=False, repr=False)

    @classmethod
    def start(
        cls,
        tasks: Iterable[Task],
        *,
        policy: ExpiredLeasePolicy = "either",
        resolution: timedelta = timedelta(microseconds=1),
    ) -> BoardModel:
        """The model of a fresh board holding ``tasks``; its first snapshot sets each seq."""
        if policy not in EXPIRED_LEASE_POLICIES:
            raise ValueError(f"policy must be 'either', 'accept' or 'reject', got {policy!r}")
        if not isinstance(resolution, timedelta) or resolution <= timedelta(0):
            raise ValueError(f"resolution must be a positive timedelta, got {resolution!r}")
        records = []
        issued = []
        for task in tasks:
            fence = task.lease.fence if task.lease is not None else None
            records.append(_Record(task, max_fence=fence, seq_rule="adopt"))
            if task.lease is not None:
                issued.append(IssuedLease(task.lease.token, task.id, task.lease.fence, task.owner))
        ids = [r.task.id for r in records]
        if len(set(ids)) != len(ids):
            raise ValueError(f"task ids must be unique, got {ids!r}")
        return cls(tuple(records), tuple(issued), policy, resolution)

    # -- reading -------------------------------------------------------------------------------

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The tasks as the next snapshot must show them (seq as last observed)."""
        return tuple(r.task for r in self.records)

    def task(self, task_id: str) -> Task | None:
        """The task with this id, or ``None`` when the board has no such task."""
        record = self._record(task_id)
        return None if record is None else record.task

    def lease_of(self, token: str) -> IssuedLease | None:
        """The issued lease this token belongs to, or ``None`` if no claim ever returned it."""
        for issued in self.issued:
            if issued.token == token:
                return issued
        return None

    def describe(self, task_id: str, now: datetime) -> str:
        """Say what the model knows of a task at ``now``, as a reason a human can check."""
        task = self.task(task_id)
        if task is None:
            return f"no task has id {task_id!r}"
        if task.state is not State.CLAIMED or task.lease is None:
            return f"task {task_id!r} is {task.state}"
        lease = task.lease
        holder = f"task {task_id!r} is claimed by {task.owner!r} (fence {lease.fence})"
        if lease.until is None:
            return f"{holder} with a lease that never expires"
        left = _utc(lease.until) - now
        if left > timedelta(0):
            return f"{holder}, live for {format_duration(left)} more"
        if left == timedelta(0):
            return f"{holder}, expired just now: at exactly until a lease is expired (SPEC 2)"
        return f"{holder}, expired {format_duration(-left)} ago"

    def _record(self, task_id: str) -> _Record | None:
        for record in self.records:
            if record.task.id == task_id:
                return record
        return None

    # -- judging -------------------------------------------------------------------------------

    def expect(self, call: Call, when: When) -> tuple[Allowed, ...]:
        """Every outcome the contract allows for ``call`` at ``when``.

        At an instant there are two only under SPEC 3.4. On a window (SPEC 7), every
        outcome some instant of it allows: both sides of a lease's ``until`` when the
        window straddles it; none when the window ends before :attr:`floor`.
        """
        if isinstance(when, Window):
            return self._expect_in(call, when)
        return self._expect_at(call, when)

    def instants(self, call: Call, window: Window) -> tuple[datetime, ...]:
        """Where ``call``'s allowed outcomes change inside ``window`` (SPEC 7).

        The earliest instant it may take effect at (the window's start, or :attr:`floor`
        if later), then the task's lease's ``until`` when the window straddles it. The
        outcome of a call depends on time only through that one lease, so every instant
        of the window allows what one of these allows. Empty when the window ends
        before :attr:`floor`.
        """
        earliest = window.earliest if self.floor is None else max(window.earliest, self.floor)
        if earliest > window.latest:
            return ()
        task = self.task(call.task_id)
        if task is not None and task.state is State.CLAIMED and task.lease is not None:
            until = task.lease.until
            if until is not None and earliest < _utc(until) <= window.latest:
                return (earliest, _utc(until))
        return (earliest,)

    def _expect_in(self, call: Call, window: Window) -> tuple[Allowed, ...]:
        instants = self.instants(call, window)
        if len(instants) == 1:
            return self._expect_at(call, instants[0])
        found: dict[str | None, Allowed] = {}
        sides = ("if it took effect before until", "if it took effect at or after until")
        for instant, side in zip(instants, sides, strict=False):
            for allowed in self._expect_at(call, instant):
                if allowed.error not in found:
                    reason = f"{allowed.reason} ({side}: the call's window straddles it)"
                    found[allowed.error] = dataclasses.replace(allowed, reason=reason)
        return tuple(found.values())

    def _expect_at(self, call: Call, now: datetime) -> tuple[Allowed, ...]:
        task = self.task(call.task_id)
        if task is None:
            return (
                Allowed("NotFoundError", f"{_CLAUSE[call.op]}", self.describe(call.task_id, now)),
            )
        if call.op is Op.CLAIM:
            return (self._expect_claim(task, call, now),)
        return self._expect_token_action(task, call, now)

    def _expect_claim(self, task: Task, call: Call, now: datetime) -> Allowed:
        if task.state is State.DONE:
            return Allowed("TerminalError", "SPEC 3.1 step 2", f"task {task.id!r} is done")
        for dep in task.deps:
            dep_task = self.task(dep)
            if dep_task is None or dep_task.state is not State.DONE:
                state = "missing" if dep_task is None else str(dep_task.state)
                return Allowed(
                    "BlockedError", "SPEC 3.1 step 3", f"dependency {dep!r} is {state}, not done"
                )
        if task.state is State.CLAIMED and is_live(task.lease, now):
            reason = self.describe(task.id, now)
            if call.agent == task.owner:
                reason += "; the same agent name is no identity, only a token is"
            return Allowed("TakenError", "SPEC 3.1 step 4", reason)
        if call.agent == "":
            return Allowed("ValueError", "SPEC 3.1 step 5", "the agent is empty")
        if task.state is State.CLAIMED:
            reason = f"takeover: {self.describe(task.id, now)}"
        elif task.state is State.FAILED:
            reason = f"task {task.id!r} failed and may be claimed again (SPEC 3.6)"
        else:
            reason = f"task {task.id!r} is open and its dependencies are done"
        return Allowed(None, "SPEC 3.1", reason)

    def _expect_token_action(self, task: Task, call: Call, now: datetime) -> tuple[Allowed, ...]:
        clause = _CLAUSE[call.op]
        lease = task.lease
        if task.state is not State.CLAIMED or lease is None:
            return (Allowed("LeaseLostError", clause, f"task {task.id!r} is {task.state}"),)
        if call.token != lease.token:
            return (Allowed("LeaseLostError", clause, self._token_mismatch(task, call.token, now)),)
        if is_live(lease, now):
            return (
                Allowed(None, clause, f"the token holds the task: {self.describe(task.id, now)}"),
            )
        expired = self.describe(task.id, now)
        if call.op is Op.RENEW:
            return (Allowed("LeaseLostError", clause, f"renew never revives a lease: {expired}"),)
        accept = Allowed(None, "SPEC 3.4", f"current token of an expired lease: {expired}")
        reject = Allowed(
            "LeaseLostError", "SPEC 3.4", f"current token of an expired lease: {expired}"
        )
        if self.policy == "accept":
            return (accept,)
        if self.policy == "reject":
            return (reject,)
        return (accept, reject)

    def _token_mismatch(self, task: Task, token: str, now: datetime) -> str:
        issued = self.lease_of(token)
        current = self.describe(task.id, now)
        if issued is None:
            return f"the token was never issued by this board; {current}"
        if issued.task_id != task.id:
            return f"the token belongs to task {issued.task_id!r} (fence {issued.fence}); {current}"
        return (
            f"the token is of an earlier lease (fence {issued.fence}, {issued.agent!r}); {current}"
        )

    # -- advancing -----------------------------------------------------------------------------

    def advance(self, call: Call, when: When, outcome: Outcome) -> BoardModel:
        """Follow what the board did with ``call`` at ``when``.

        Returns the model after the outcome. A rejected call leaves it unchanged. On
        a window (SPEC 7) the call takes effect at the earliest instant that allows
        the outcome, which becomes :attr:`floor`; a claim's or renew's ``until`` must
        then lie one ttl after some instant of the window, widened by ``resolution``.

        Raises:
            ContractViolation: the outcome is not among :meth:`expect`'s, or a
                successful result breaks a rule (stale token, fence not greater,
                wrong ``until``, seq not grown, ...).
        """
        if isinstance(when, Window):
            model = self._advance_in(call, when, outcome)
        else:
            model = self._advance_at(call, when, outcome)
        before, after = self._record(call.task_id), model._record(call.task_id)
        if before is None or after is None or after.task == before.task:
            return model
        return dataclasses.replace(model, earlier=_Held(before.task, self.earlier))

    def _advance_in(self, call: Call, window: Window, outcome: Outcome) -> BoardModel:
        instants = self.instants(call, window)
        if not instants:
            assert self.floor is not None
            raise ContractViolation(
                "SPEC 7",
                f"{call.op} to take effect inside its window {window}, and no earlier than "
                f"the call before it ({self.floor.isoformat()})",
                f"{outcome}, but its window ends before that",
            )
        rule_broken: ContractViolation | None = None
        for instant in instants:
            if not any(a.error == outcome.error for a in self._expect_at(call, instant)):
                continue
            try:
                model = self._advance_at(call, instant, outcome, window)
            except ContractViolation as violation:
                rule_broken = rule_broken or violation
                continue
            return dataclasses.replace(model, floor=instant)
        if rule_broken is not None:
            raise rule_broken
        raise _unexpected(self._expect_in(call, window), outcome)

    def _advance_at(
        self, call: Call, now: datetime, outcome: Outcome, window: Window | None = None
    ) -> BoardModel:
        allowed = self._expect_at(call, now)
        if not outcome.ok:
            if any(a.error == outcome.error for a in allowed):
                return self._settled()
            raise _unexpected(allowed, outcome)
        success = next((a for a in allowed if a.error is None), None)
        if success is None:
            raise _unexpected(allowed, outcome)
        record = self._record(call.task_id)
        assert record is not None
        if call.op is Op.CLAIM:
            return self._after_claim(record, call, now, outcome, success.clause, window)
        if call.op is Op.RENEW:
            return self._after_renew(record, call, now, outcome, window)
        task = dataclasses.replace(record.task, state=_AFTER[call.op], owner="", lease=None)
        return self._settled(
            dataclasses.replace(record, task=task, seq_rule="grow", pending=call.op)
        )

    def _after_claim(
        self,
        record: _Record,
        call: Call,
        now: datetime,
        outcome: Outcome,
        clause: str,
        window: Window | None,
    ) -> BoardModel:
        got = _returned_task(outcome, call, clause)
        old = record.task
        lease = got.lease
        _require(
            got.state == State.CLAIMED,
            clause,
            "the returned task CLAIMED",
            f"returned {got.state!r}",
        )
        _require(
            got.owner == call.agent,
            clause,
            f"owner {call.agent!r}",
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
        earlier = self.lease_of(token)
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
        if record.max_fence is not None and fence <= record.max_fence:
            raise ContractViolation(
                clause,
                f"a fence greater than every earlier fence of task {old.id!r} "
                f"(highest so far: {record.max_fence}), across releases and takeovers",
                f"returned fence {fence}",
            )
        until = self._check_until(lease.until, now, call.ttl, clause, window)
        self._check_unchanged_fields(old, got, clause)
        self._check_seq_grew(old, got, clause)
        task = dataclasses.replace(got, deps=old.deps, lease=Lease(token, fence, until))
        issued = (*self.issued, IssuedLease(token, old.id, fence, call.agent))
        new_record = _Record(task, max_fence=fence, seq_rule="equal", pending=Op.CLAIM)
        return dataclasses.replace(self._settled(new_record), issued=issued)

    def _after_renew(
        self, record: _Record, call: Call, now: datetime, outcome: Outcome, window: Window | None
    ) -> BoardModel:
        clause = _CLAUSE[Op.RENEW]
        got = _returned_task(outcome, call, clause)
        old = record.task
        assert old.lease is not None
        _require(
            got.state == State.CLAIMED, clause, "the task still CLAIMED", f"returned {got.state!r}"
        )
        _require(
            got.owner == old.owner,
            clause,
            f"the owner unchanged ({old.owner!r})",
            f"returned owner {got.owner!r}",
        )
        if got.lease is None:
            raise ContractViolation(clause, "the renewed lease", "returned no lease")
        _require(
            got.lease.token == old.lease.token,
            clause,
            "the same token: renew is no takeover",
            f"returned token {got.lease.token!r} instead of {old.lease.token!r}",
        )
        _require(
            got.lease.fence == old.lease.fence,
            clause,
            f"the same fence ({old.lease.fence}): renew is no takeover",
            f"returned fence {got.lease.fence!r}",
        )
        until = self._check_until(got.lease.until, now, call.ttl, clause, window)
        self._check_unchanged_fields(old, got, clause)
        self._check_seq_grew(old, got, clause)
        task = dataclasses.replace(
            got, deps=old.deps, lease=dataclasses.replace(old.lease, until=until)
        )
        return self._settled(
            dataclasses.replace(record, task=task, seq_rule="equal", pending=Op.RENEW)
        )

    def _check_until(
        self,
        until: datetime | None,
        now: datetime,
        ttl: timedelta,
        clause: str,
        window: Window | None,
    ) -> datetime | None:
        if ttl == timedelta(0):
            _require(
                until is None,
                clause,
                "until=None: a zero ttl never expires (SPEC 2)",
                f"returned until={until!r}",
            )
            return None
        if window is not None:
            return self._check_until_in(until, ttl, clause, window)
        expected = now + ttl
        if not isinstance(until, datetime):
            raise ContractViolation(
                clause,
                f"until = now + ttl = {expected.isoformat()} (SPEC 2)",
                f"returned until={until!r}",
            )
        off = abs(_utc(until) - expected)
        if off >= self.resolution:
            raise ContractViolation(
                clause,
                f"until = the board's now + ttl = {expected.isoformat()} (SPEC 2), "
                f"to within the clock resolution {format_duration(self.resolution)}",
                f"returned until={_utc(until).isoformat()}, "
                f"off by {format_duration(_utc(until) - expected)}",
            )
        return expected

    def _check_until_in(
        self, until: datetime | None, ttl: timedelta, clause: str, window: Window
    ) -> datetime:
        # SPEC 7: the board's clock is unknown within the window, so its until is adopted
        # as long as it is one ttl after some instant of the window (widened by the
        # resolution the store keeps time in).
        earliest = window.earliest - self.resolution + ttl
        latest = window.latest + self.resolution + ttl
        expected = (
            f"until = the board's now + ttl, for a now inside the call's window (SPEC 2 and 7): "
            f"between {earliest.isoformat()} and {latest.isoformat()}, the window "
            f"{format_duration(window.width)} wide widened by the clock resolution "
            f"{format_duration(self.resolution)} on each side"
        )
        if not isinstance(until, datetime):
            raise ContractViolation(clause, expected, f"returned until={until!r}")
        got = _utc(until)
        if not earliest <= got <= latest:
            off = got - earliest if got < earliest else got - latest
            raise ContractViolation(
                clause,
                expected,
                f"returned until={got.isoformat()}, {format_duration(abs(off))} "
                + ("too early" if got < earliest else "too late"),
            )
        return got

    @staticmethod
    def _check_unchanged_fields(old: Task, got: Task, clause: str) -> None:
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

    @staticmethod
    def _check_seq_grew(old: Task, got: Task, clause: str) -> None:
        seq = got.seq
        if not isinstance(seq, int) or isinstance(seq, bool) or seq <= old.seq:
            raise ContractViolation(
                f"{clause}, SPEC 3.8",
                f"seq greater than {old.seq} after a successful operation",
                f"returned seq={seq!r}",
            )

    def _settled(self, changed: _Record | None = None) -> BoardModel:
        # Every record not changed by this step must show up unchanged in the next snapshot.
        records = tuple(
            changed
            if changed is not None and r.task.id == changed.task.id
            else (r if r.pending is None else dataclasses.replace(r, pending=None))
            for r in self.records
        )
        return dataclasses.replace(self, records=records)

    # -- snapshots -----------------------------------------------------------------------------

    def reconcile(self, snapshot: Sequence[Task]) -> BoardModel:
        """Compare a ``list_tasks()`` snapshot with the model, task by task.

        Returns the model with the observed seqs adopted.

        Raises:
            ContractViolation: a task is missing, extra, duplicated or differs
                from what the contract says it must be now, or its seq broke SPEC 3.8.
        """
        seen = self._snapshot_by_id(snapshot)
        records = []
        changed = False
        for record in self.records:
            got = seen[record.task.id]
            if (
                record.pending is None
                and record.seq_rule == "equal"
                and got == record.task
                and type(got.seq) is int
            ):
                # Exactly what the model holds (seq included): nothing to compare or adopt.
                records.append(record)
                continue
            self._compare(record, got)
            changed = True
            records.append(
                dataclasses.replace(
                    record,
                    task=dataclasses.replace(record.task, seq=got.seq),
                    seq_rule="equal",
                    pending=None,
                )
            )
        return dataclasses.replace(self, records=tuple(records)) if changed else self

    def _snapshot_by_id(self, snapshot: Sequence[Task]) -> dict[str, Task]:
        """The snapshot's tasks by id, each task of the model exactly once (SPEC 3.7)."""
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
        expected_ids = [r.task.id for r in self.records]
        missing = [i for i in expected_ids if i not in seen]
        extra = sorted(set(seen) - set(expected_ids))
        if missing or extra:
            raise ContractViolation(
                "SPEC 3.7",
                f"every task in the snapshot, exactly: {expected_ids!r}",
                f"listed {sorted(seen)!r} (missing {missing!r}, unknown {extra!r})",
            )
        return seen

    def settle(
        self, call: Call, now: When, snapshot: Sequence[Task]
    ) -> tuple[BoardModel, Outcome | None]:
        """After ``call`` at ``now`` (an instant or a window) met an infrastructure fault,
        so that whether it took effect is unknown: the model that ``snapshot`` shows, the
        call left out or applied.

        Returns the reconciled model and, when the call took effect, what it returned
        (the lease a claim or renew left in the snapshot; ``None`` when it did not).

        Raises:
            ContractViolation: the snapshot matches neither the board without the call
                nor the board after it succeeded (or the call could not have succeeded).
        """
        try:
            return self.reconcile(snapshot), None
        except ContractViolation as violation:
            without = violation
        known = frozenset(issued.token for issued in self.issued)
        applied = applied_outcome(call, snapshot, known)
        if applied is not None:
            try:
                return self.advance(call, now, applied).reconcile(snapshot), applied
            except ContractViolation as violation:
                with_it = f"with it applied, {violation.observed} ({violation.clause})"
        elif call.op is Op.CLAIM:
            with_it = (
                f"nor does it show the claim applied: no lease for {call.agent!r} under a "
                "token never issued before"
            )
        else:
            with_it = "nor does it show the renew applied: no lease under the renewed token"
        raise ContractViolation(
            without.clause,
            f"after {call.op} of {call.task_id!r} failed with an infrastructure fault, a "
            "snapshot of the board either without the call or with it applied (SPEC 3.7)",
            f"listed a snapshot that matches neither: without the call, {without.expected} "
            f"but the board {without.observed}; {with_it}",
        )

    def restart(
        self, snapshot: Sequence[Task], *, durable: bool
    ) -> tuple[BoardModel, frozenset[str]]:
        """Judge the first snapshot after the storage restarted (SPEC 9).

        A durable board must show exactly what the model holds. A board that is not durable
        may show, for each task, any state the model held since the start or the last
        restart (it lost what it acknowledged after that state); the model goes on from the
        snapshot. Either way the fence history stays: later fences must still be greater
        than every fence issued before, and tokens are never issued twice.

        Returns the model of the snapshot and the tokens of the leases the restart lost
        (their holders no longer hold them).

        Raises:
            ContractViolation: a durable board lost or changed something, or a task of a
                board that is not durable shows a state the model never held.
        """
        if durable:
            try:
                model = self.reconcile(snapshot)
            except ContractViolation as violation:
                raise ContractViolation(
                    "SPEC 9 (a durable board loses nothing it acknowledged)",
                    f"after the restart, what the board acknowledged before it: "
                    f"{violation.expected}",
                    f"{violation.observed}; a store that may lose acknowledged changes "
                    "declares durable = False",
                ) from None
            return dataclasses.replace(model, earlier=None), frozenset()
        seen = self._snapshot_by_id(snapshot)
        records = []
        lost: set[str] = set()
        for record in self.records:
            got = seen[record.task.id]
            held = (record.task, *(t for t in _held(self.earlier) if t.id == record.task.id))
            match = next((t for t in held if self._matches(t, got)), None)
            if match is None:
                states = "; ".join(describe_task(t) for t in held)
                raise ContractViolation(
                    "SPEC 9 (a board that is not durable falls back to a state it held)",
                    f"after the restart, task {record.task.id!r} in a state the model held "
                    f"since the last restart: {states}",
                    f"listed {describe_task(got)}",
                )
            if record.task.lease is not None and (
                match.lease is None or match.lease.token != record.task.lease.token
            ):
                lost.add(record.task.lease.token)
            task = dataclasses.replace(match, seq=got.seq)
            records.append(dataclasses.replace(record, task=task, seq_rule="equal", pending=None))
        model = dataclasses.replace(self, records=tuple(records), earlier=None)
        return model, frozenset(lost)

    def _matches(self, want: Task, got: Task) -> bool:
        try:
            self._compare(_Record(want), got)
        except ContractViolation:
            return False
        return True

    def _compare(self, record: _Record, got: Task) -> None:
        want = record.task
        if record.pending is not None:
            clause = f"{_CLAUSE[record.pending]} ({record.pending} took effect)"
        else:
            clause = (
                "SPEC 3 and 3.8 (a rejected operation, or one on another task, changes nothing)"
            )
        differences = []
        for name in ("title", "state", "owner"):
            if getattr(got, name) != getattr(want, name):
                differences.append(
                    f"{name}={getattr(got, name)!r} (expected {getattr(want, name)!r})"
                )
        if not _same_deps(got.deps, want.deps):
            differences.append(f"deps={got.deps!r} (expected {want.deps!r})")
        lease_diff = self._lease_difference(want.lease, got.lease)
        if lease_diff:
            differences.append(lease_diff)
        seq = got.seq
        if not isinstance(seq, int) or isinstance(seq, bool):
            differences.append(f"seq={seq!r} (expected an integer)")
        elif record.seq_rule == "equal" and seq != want.seq:
            differences.append(f"seq={seq} (expected {want.seq}, unchanged since last seen)")
        elif record.seq_rule == "grow" and seq <= want.seq:
            differences.append(f"seq={seq} (expected greater than {want.seq})")
        if differences:
            raise ContractViolation(
                clause,
                f"list_tasks() to show {describe_task(want)}",
                f"listed task {want.id!r} with " + ", ".join(differences),
            )

    def _lease_difference(self, want: Lease | None, got: Lease | None) -> str:
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
                not isinstance(got.until, datetime)
                or abs(_utc(got.until) - want.until) >= self.resolution
            )
        ):
            return f"lease until={got.until!r} (expected {want.until.isoformat()})"
        return ""


def _same_deps(got: object, want: tuple[str, ...]) -> bool:
    # Dependencies are a set: SPEC fixes no order, and a join table returns its own.
    try:
        return bool(Counter(got) == Counter(want))  # type: ignore[call-overload]
    except TypeError:  # not iterable, or unhashable items
        return False


def _require(ok: bool, clause: str, expected: str, observed: str) -> None:
    if not ok:
        raise ContractViolation(clause, expected, observed)


def _returned_task(outcome: Outcome, call: Call, clause: str) -> Task:
    if outcome.task is None:
        raise ContractViolation(
            clause, f"{call.op} to return the task as list_tasks() shows it", "returned no Task"
        )
    return outcome.task


def _unexpected(allowed: Sequence[Allowed], outcome: Outcome) -> ContractViolation:
    clause = " / ".join(dict.fromkeys(a.clause for a in allowed))
    expected = " or ".join(str(a) for a in allowed)
    return ContractViolation(clause, expected, str(outcome))


def applied_outcome(
    call: Call, snapshot: Sequence[Task], known_tokens: frozenset[str]
) -> Outcome | None:
    """What ``call`` returned if it took effect, as far as ``snapshot`` shows.

    Release, complete and fail return nothing; a claim returned the task with a lease
    for its agent under a token not in ``known_tokens``; a renew, the task under the
    same token. ``None``: the snapshot shows no such lease.
    """
    if call.op in (Op.RELEASE, Op.COMPLETE, Op.FAIL):
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
