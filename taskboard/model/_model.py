"""The reference model: SPEC section 3 in code, pure and deterministic.

The model never calls a board and owns no clock: every judgement takes its time
explicitly, an instant ``now`` on a manual clock or a :class:`Window` on the wall
clock (SPEC 7). For each call it says which outcomes the contract allows
(:meth:`BoardModel.expect`), then advances on what the board actually did
(:meth:`BoardModel.advance`), rejecting what was not allowed. Tokens and fences
are minted by the board, so the model checks their properties (fresh token,
greater fence) and then adopts the board's values. Those rules, for every task a
board returns or lists, are in :mod:`taskboard.model._returns`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal, get_args

from taskboard._clock import as_utc
from taskboard._contract import Lease, State, Task
from taskboard._operations import BY_OP
from taskboard.model._calls import (
    Allowed,
    Call,
    Op,
    Outcome,
    When,
    Window,
    describe_task,
    format_duration,
)
from taskboard.model._returns import (
    SUCCESS_CLAUSE,
    IssuedLease,
    SeqRule,
    check_claimed_lease,
    check_renewed_lease,
    check_seq_grew,
    check_unchanged_fields,
    check_until,
    compare,
    matches,
    returned_task,
    snapshot_by_id,
)
from taskboard.model._returns import applied_outcome as applied_outcome
from taskboard.model._violation import ContractViolation, violations_in
from taskboard.model._violation import errors_in as errors_in

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

#: The state each operation that ends a lease leaves its task in.
_AFTER = {op: row.leaves for op, row in BY_OP.items() if row.ends_lease and row.leaves is not None}


def is_live(lease: Lease | None, now: datetime) -> bool:
    """SPEC 2: a lease is live at ``now`` iff it never expires or ``now < until``."""
    return lease is not None and (lease.until is None or now < _utc(lease.until))


_utc = as_utc  # a naive datetime read back from storage is taken as UTC, not rejected


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
    ``until`` that differs from the exact ``now + ttl`` by less than it is accepted, and
    where the ttl is not a whole number of resolutions, the board's ``until`` is when the
    lease ends.

    Time: each call is judged at an instant (a manual clock) or on a :class:`Window`
    (the wall clock, SPEC 7). On a window, an outcome is allowed iff some instant of the
    window, not before ``floor``, allows it; the model then goes on from the earliest
    such instant, which becomes the new ``floor``, so effect instants never go backwards.
    """

    records: tuple[_Record, ...]
    issued: tuple[IssuedLease, ...] = ()
    policy: ExpiredLeasePolicy = "either"
    resolution: timedelta = timedelta(microseconds=1)
    #: The board renews every lease by itself (a library's keep-alive) until its holder
    #: releases, completes or fails it: a lease never expires, and its listed ``until`` and
    #: ``seq`` may move on their own.
    keeps_alive: bool = False
    #: Virtual mode: the store keeps a lease through its deadline tick (as Redis a key), so an
    #: ``until`` up to one ``resolution`` past ``now + ttl`` is accepted, and is the lease's end.
    store_boundary: bool = False
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
        keeps_alive: bool = False,
        store_boundary: bool = False,
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
        model = cls(tuple(records), tuple(issued), policy, resolution, keeps_alive=keeps_alive)
        return dataclasses.replace(model, store_boundary=store_boundary)

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
        if lease.until is None and self.keeps_alive:
            return f"{holder} with a lease the board keeps alive until its holder ends it"
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
                Allowed("NotFoundError", SUCCESS_CLAUSE[call.op], self.describe(call.task_id, now)),
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
        clause = SUCCESS_CLAUSE[call.op]
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
        got = returned_task(outcome, call, clause)
        old = record.task
        lease = check_claimed_lease(
            got,
            clause,
            agent=call.agent,
            task_id=old.id,
            max_fence=record.max_fence,
            lease_of=self.lease_of,
        )
        until = self._adopted_until(lease.until, now, call.ttl, clause, window)
        check_unchanged_fields(old, got, clause)
        check_seq_grew(old, got, clause)
        task = dataclasses.replace(got, deps=old.deps, lease=Lease(lease.token, lease.fence, until))
        issued = (*self.issued, IssuedLease(lease.token, old.id, lease.fence, call.agent))
        new_record = _Record(task, max_fence=lease.fence, seq_rule="equal", pending=Op.CLAIM)
        return dataclasses.replace(self._settled(new_record), issued=issued)

    def _adopted_until(
        self,
        until: datetime | None,
        now: datetime,
        ttl: timedelta,
        clause: str,
        window: Window | None,
    ) -> datetime | None:
        """The ``until`` a claim or renew returned, checked (SPEC 2), as the model keeps it:
        none for a board that renews its leases by itself."""
        checked = check_until(until, now, ttl, clause, window, self.resolution, self.store_boundary)
        return None if self.keeps_alive else checked

    def _after_renew(
        self, record: _Record, call: Call, now: datetime, outcome: Outcome, window: Window | None
    ) -> BoardModel:
        clause = SUCCESS_CLAUSE[Op.RENEW]
        got = returned_task(outcome, call, clause)
        old = record.task
        assert old.lease is not None
        lease = check_renewed_lease(got, old.owner, old.lease, clause)
        until = self._adopted_until(lease.until, now, call.ttl, clause, window)
        check_unchanged_fields(old, got, clause)
        check_seq_grew(old, got, clause)
        task = dataclasses.replace(
            got, deps=old.deps, lease=dataclasses.replace(old.lease, until=until)
        )
        return self._settled(
            dataclasses.replace(record, task=task, seq_rule="equal", pending=Op.RENEW)
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
        seen = snapshot_by_id(snapshot, [r.task.id for r in self.records])
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
            seq_rule = record.seq_rule
            if self.keeps_alive and record.task.lease is not None and got.lease is not None:
                # Its keep-alive moves a held lease's until, and bumps seq as any write does.
                got = dataclasses.replace(got, lease=dataclasses.replace(got.lease, until=None))
                if seq_rule == "equal" and isinstance(got.seq, int) and got.seq > record.task.seq:
                    seq_rule = "grow"
            compare(record.task, record.pending, seq_rule, got, self.resolution)
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
        seen = snapshot_by_id(snapshot, [r.task.id for r in self.records])
        records = []
        lost: set[str] = set()
        for record in self.records:
            got = seen[record.task.id]
            held = (record.task, *(t for t in _held(self.earlier) if t.id == record.task.id))
            match = next((t for t in held if matches(t, got, self.resolution)), None)
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


def _unexpected(allowed: Sequence[Allowed], outcome: Outcome) -> ContractViolation:
    clause = " / ".join(dict.fromkeys(a.clause for a in allowed))
    expected = " or ".join(str(a) for a in allowed)
    return ContractViolation(clause, expected, str(outcome))
