"""A session: one run of a board beside the model, which makes every call and judges it.

The machine's rules, the parallel runner and ``replay`` all drive a :class:`Session`: it makes
the board (through the machine's hooks), calls it, judges each outcome with the model at the
instant or in the window the call took, reads and checks the snapshot, moves the clock, opens
clients, runs the nemesis, and builds the report of whatever went wrong. It knows nothing of
Hypothesis's rules; what to call comes from its driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import inspect
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol

from taskboard._callpath import Interceptor, make_call
from taskboard._check import check
from taskboard._clock import Clock, ManualClock, as_utc
from taskboard._contract import Board, State, Task
from taskboard._driver import Driver, close_driven, driven, is_async_board, make_driven
from taskboard._errors import BoardError
from taskboard._operations import (
    ACTS_WITH_TOKEN,
    ENDS_LEASE,
    GRANTS_LEASE,
    OPTIONAL_NAMES,
    operations_of,
)
from taskboard.model import (
    BoardModel,
    Call,
    ContractViolation,
    IssuedLease,
    Op,
    Outcome,
    Step,
    When,
    Window,
    is_live,
)
from taskboard.model._calls import is_infrastructure_fault
from taskboard.stateful._client_clocks import (
    client_clock_interceptors,
    lease_holder,
    machine_clock,
)
from taskboard.stateful._config import MachineConfig
from taskboard.stateful._limits import Holding
from taskboard.stateful._reports import (
    Failure,
    RunStart,
    fault_report,
    raise_report,
    violation_report,
)
from taskboard.stateful._runstate import ExampleStats, current_run, joined_run
from taskboard.stateful._trace import NEMESIS_HOOKS, token_ref
from taskboard.stateful._tracefile import Trace, Verdict
from taskboard.stateful._virtual_clock import VirtualTime, virtual_clock

__all__ = [
    "STOP_POLL",
    "ExampleStats",
    "MachineHooks",
    "Session",
    "StopRequested",
    "end_example",
    "on_example_end",
    "sleep_until",
    "stop_when",
]


class MachineHooks(Protocol):
    """What a session needs of a machine: its configuration, and the host's hooks (see
    :class:`~taskboard.stateful.BoardMachine` for what each does)."""

    config: MachineConfig

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Any: ...

    def close_board(self, board: Any) -> Any: ...

    def open_client(self, board: Any) -> Any: ...

    def close_client(self, client: Any) -> Any: ...

    def restart_storage(self, board: Any) -> Any: ...

    def drop_connections(self, board: Any) -> Any: ...


# -- what the fuzzer hears of each example ---------------------------------------------------


@contextlib.contextmanager
def on_example_end(listener: Callable[[ExampleStats], None]) -> Iterator[None]:
    """Call ``listener`` with the stats of every example of the run under way that ends
    inside the block (a run begun for the block if none is under way; see
    :mod:`~taskboard.stateful._runstate`)."""
    with joined_run() as run:
        run.listeners.append(listener)
        try:
            yield
        finally:
            run.listeners.remove(listener)


def _example_ended(stats: ExampleStats) -> None:
    run = current_run()
    if run is not None:  # no run under way: no one listens
        run.example_ended(stats)


def end_example(session: Session | None, *, parallel: bool = False) -> None:
    """End an example: close its session, or, when its board was never made, tell the
    listeners of an example of no steps."""
    if session is not None:
        session.close()
        return
    if _stopping():  # stopped before its board was made: not an example at all
        return
    _example_ended(ExampleStats(parallel, (), {}, Counter(), Counter(), None))


class StopRequested(KeyboardInterrupt):
    """The run was asked to stop (its budget ran out, or Ctrl-C): the example under way ends
    at its next call or clock move.

    A ``KeyboardInterrupt``, because that is what Hypothesis takes for "stop now, this example
    is no failure": any other exception that ends an example is saved in the example database
    as one, to be replayed first by the next run."""


@contextlib.contextmanager
def stop_when(condition: Callable[[], bool]) -> Iterator[None]:
    """Inside the block, end the example under way with :class:`StopRequested` as soon as
    ``condition()`` is true, before its next call or clock move: a budget then stops on time
    even on a board whose every example takes minutes. The condition stops the run under way
    only (a run begun for the block if none is), not one begun apart inside it
    (:func:`~taskboard.stateful._runstate.separate_run`) nor one in another thread."""
    with joined_run() as run:
        run.stop_conditions.append(condition)
        try:
            yield
        finally:
            run.stop_conditions.remove(condition)


def _stopping() -> bool:
    run = current_run()
    return run is not None and run.stop_requested()


def _check_stop() -> None:
    if _stopping():
        raise StopRequested


#: The longest a wall-clock sleep goes without looking whether the run must stop.
STOP_POLL = timedelta(milliseconds=50)


def outlive_keep_alive(config: MachineConfig, clock: Clock, call: Call, outcome: Outcome) -> None:
    """After a lease ended on a board with a keep-alive, wait one keep-alive interval: one
    that outlives its lease shows in the snapshot that follows."""
    ended = outcome.ok and call.op in ENDS_LEASE
    if config.keep_alive and ended:
        sleep_until(clock, clock.now() + config.keep_alive, stoppable=True)


def sleep_until(clock: Clock, target: datetime, *, stoppable: bool = False) -> None:
    """Sleep until ``clock`` reads ``target`` or later; ``stoppable``: in slices of at most
    :data:`STOP_POLL`, so that a stop (Ctrl-C, the budget) ends a long sleep at once.

    Raises:
        StopRequested: ``stoppable``, and the run was asked to stop.
    """
    while (left := target - clock.now()) > timedelta(0):
        if stoppable:
            _check_stop()
            left = min(left, STOP_POLL)
        time.sleep(left.total_seconds())


def _run_coroutine(function: Callable[[Any], Any], argument: Any) -> Any:
    return asyncio.run(function(argument))


class Session:
    """One run of a board beside the model: every call made, judged and checked.

    Making it makes the board (``make_board``, through the driver the board needs) on a
    manual clock at ``start``, or on the wall clock; :meth:`observe` then reads and checks
    the first snapshot. :meth:`close` ends it.

    Raises:
        StopRequested: the run was asked to stop (see :func:`stop_when`).
        InfrastructureFault: ``make_board`` raised, or hung.
        TypeError: ``make_board`` returned something that is not a Board.
    """

    def __init__(
        self,
        hooks: MachineHooks,
        tasks: Sequence[Task],
        start: datetime,
        *,
        parallel: bool = False,
    ) -> None:
        _check_stop()
        config = hooks.config
        self.config = config
        self.hooks = hooks
        #: True for a run of a parallel program (its threads' calls are not in ``trace``).
        self.parallel = parallel
        self.tick = config.resolution
        self.wall = config.wall
        self.skew = config.skew
        self.ttl_unit = config.ttl_unit
        #: On the wall clock, how long this example's clock steps have slept.
        self.waited = timedelta(0)
        #: Wall clock: a move of the clock is kept in :attr:`deferred_landing`, not slept.
        self.defer_landing = False
        self.deferred_landing: datetime | None = None
        self.clock = _session_clock(hooks, start)
        self.run = RunStart(type(hooks), config, tuple(tasks), self.clock.now())
        self.trace: list[Step] = []
        self.labels: dict[str, str] = {}
        # Every lease's latest until, and the leases their holders gave up (released, ...).
        self.untils = _untils_of(tasks)
        self.given_up: set[str] = set()
        #: How long the latest calls took (wall clock), to land just before an until.
        self.latencies: deque[timedelta] = deque(maxlen=8)
        #: Coverage (each transition; each racing thread's (operation, outcome); the renews on
        #: a live current lease, by TTL); then the leases the board holds (and refused).
        self.transitions: Counter[tuple[str, str, str]] = Counter()
        self.concurrent_calls: Counter[tuple[str, str]] = Counter()
        self.renew_ttls: Counter[str] = Counter()
        self.holding = Holding.start(type(hooks), config.limits, self.tick, config.outliving)
        #: The last snapshot that check() found clean.
        self.checked_snapshot: list[Task] | None = None
        #: The failure this run ends with, once one is raised; whether a call hung.
        self.failure: Failure | None = None
        self.hung = False
        try:
            made, board, driver = make_driven(
                hooks.make_board, (list(tasks), self.clock), config.call_timeout
            )
        except Exception as exc:
            self.fail_with_fault(exc, None, "make_board(tasks, clock)")
        _check_is_board(made, driver, config.name)
        #: The board as ``make_board`` returned it, and as the session calls it.
        self.made_board: Any = made
        self.board: Board = board
        self.driver: Driver = driver
        #: The optional operations the board has (``taskboard._operations``), and those it
        #: lacks; ``renewing`` and ``failing`` say it of two, for the machine's preconditions.
        self.operations = operations_of(board)
        self.lacking = OPTIONAL_NAMES - self.operations
        self.renewing = Op.RENEW in self.operations
        self.failing = Op.FAIL in self.operations
        self.model = BoardModel.start(
            tasks,
            policy=config.policy,
            resolution=self.tick,
            keeps_alive=bool(config.keep_alive),
            # A real store on the virtual clock keeps a lease through its deadline tick.
            store_boundary=config.clock_mode == "virtual",
        )

    @property
    def start_time(self) -> datetime:
        """The clock's reading when the run began."""
        return self.run.start

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The initial tasks."""
        return self.run.tasks

    # -- the end -----------------------------------------------------------------------------

    def close(self) -> None:
        """Tell the listeners what the run did, hand the board to ``close_board`` and stop
        its driver. After a hung call the board is left alone (it may still be inside it).

        Raises:
            InfrastructureFault: ``close_board`` raised, and no other failure is on its way
                (then the failure gets a note of it instead).
        """
        stats = ExampleStats(
            self.parallel,
            tuple(self.trace),
            self.labels,
            self.transitions,
            self.concurrent_calls,
            self.operations,
            failed=self.failure is not None,
            renew_ttls=self.renew_ttls,
            refused=self.holding.refused,
            adapted=self.holding.adapted,
            declared_limits=self.holding.words()[0],
            limits=self.holding.words()[1],
        )
        _example_ended(stats)
        if self.hung:
            self.driver.close()
            return
        try:
            close_driven(self.hooks.close_board, self.made_board, self.driver)
        except Exception as exc:
            if self.failure is None:
                self.fail_with_fault(exc, None, "close_board(board)")
            self.failure.add_note(f"close_board(board) then raised {exc!r} as well")

    def to_trace(self, verdict: Verdict | None = None) -> Trace:
        """This run so far as a :class:`Trace`, with the verdict if there is one."""
        return self.run.to_trace(self.trace, verdict)

    # -- calls -------------------------------------------------------------------------------

    def supports(self, op: str) -> bool:
        """True unless ``op`` is an optional operation (``renew``, ``fail``) the board lacks."""
        return op not in self.lacking

    def perform(self, call: Call, ref: str = "") -> Outcome:
        """Call the board, judge the outcome with the model, then check the snapshot.

        ``ref`` is the replayable reference of the call's token (see :class:`Step`);
        by default the label of the lease it belongs to, or the literal token.

        Raises:
            ContractViolation: the outcome or the snapshot after it breaks the contract.
            InfrastructureFault: the call raised an exception the contract does not name (and
                tolerant mode does not settle it), or hung.
        """
        _check_stop()
        call = self.holding.holdable(call)
        now = self.clock.now()
        # On the wall clock what is allowed depends on when the call returns (SPEC 7).
        allowed = None if self.wall else self.model.expect(call, now)
        if not ref and call.op in ACTS_WITH_TOKEN:
            ref = token_ref(call.token, self.labels)
        made = make_call(call, self.board, self.interceptors, self.clock if self.wall else None)
        board_exc, outcome = made.error, made.outcome
        window = None
        if self.wall:
            returned = made.ended
            assert returned is not None  # make_call read the clock it was given
            self.latencies.append(returned - now)
            window = Window.around(now, returned, self.skew)
        when: When = now if window is None else window
        if allowed is None:
            allowed = self.model.expect(call, when)
        transition = transition_of(self.model, call, when)
        fault = board_exc if board_exc is not None and is_infrastructure_fault(board_exc) else None
        unsupported = fault is not None and self.holding.refused_by(call, fault)
        fault = None if unsupported else fault
        tolerated = fault is not None and self.config.tolerates(fault)
        self._count(transition, call, "fault" if fault else outcome.error or "ok")
        note = (
            "infrastructure fault: the call's effect is unknown"
            if tolerated
            else f"unsupported: a lease the board cannot hold ({self.holding.limits.describe()})"
            if unsupported
            else ""
        )
        step = Step(
            len(self.trace) + 1,
            now,
            call,
            outcome,
            allowed,
            note=note,
            token_ref=ref,
            window=window,
        )
        self.trace.append(step)
        if fault is not None:
            if not tolerated:
                self.fail_with_fault(fault, step)
            return self._settle(call, when, step, fault)
        if unsupported:  # it must have changed nothing
            self.observe(step)
            return outcome
        self._label_lease(outcome)
        try:
            self.model = self.model.advance(call, when, outcome)
        except ContractViolation as violation:
            self.fail_with(violation, step, cause=board_exc)
        self._remember_untils(call, outcome)
        outlive_keep_alive(self.config, self.clock, call, outcome)
        self.observe(step)
        return outcome

    def _count(self, transition: tuple[str, str], call: Call, outcome: str) -> None:
        """Count the transition for coverage, and a renew's TTL on a live current lease."""
        self.transitions[(*transition, outcome)] += 1
        if transition == LIVE_OWN_RENEW:
            self.renew_ttls[self.config.ttl_class(call.ttl)] += 1

    @functools.cached_property
    def interceptors(self) -> tuple[Interceptor, ...]:
        """What surrounds every board call of this run, in its steps and its racing threads
        (see :mod:`taskboard._callpath`): with ``client_clock_skew``, the clients' clocks; in
        virtual mode, the machine's clock as the library's own time."""
        return self.interceptors_with(lambda token: lease_holder(self.model, token))

    def interceptors_with(self, agent_of: Callable[[str], str | None]) -> tuple[Interceptor, ...]:
        """:attr:`interceptors`, with ``agent_of`` telling the clients' clocks whose lease a
        token is (a value that pickles, for worker processes)."""
        if self.config.clock_mode == "virtual":
            return (VirtualTime(self.clock),)
        return client_clock_interceptors(self.config.client_skew, agent_of)

    def _settle(self, call: Call, now: When, step: Step, fault: Exception) -> Outcome:
        """Tolerant mode, after ``call`` met an infrastructure fault: adopt the snapshot if it
        shows the board without the call or with it applied; returns what it returned if
        applied, else the fault's outcome."""
        snapshot = self.snapshot(step)
        try:
            self.model, applied = self.model.settle(call, now, snapshot)
        except ContractViolation as violation:
            self.fail_with(violation, step, cause=fault)
        if applied is not None:
            self._label_lease(applied)
            self._remember_untils(call, applied)
        lease = applied.task.lease if applied is not None and applied.task is not None else None
        verdict = (
            "the snapshot shows it not applied"
            if applied is None
            else f"the snapshot shows it applied ({self.label(lease.token)})"
            if lease is not None
            else "the snapshot shows it applied"
        )
        step = dataclasses.replace(step, note=f"infrastructure fault tolerated: {verdict}")
        self.trace[-1] = step
        self.observe(step, snapshot)
        assert step.outcome is not None
        return step.outcome if applied is None else applied

    def _label_lease(self, outcome: Outcome) -> None:
        if outcome.ok and outcome.task is not None and outcome.task.lease is not None:
            token = outcome.task.lease.token
            if isinstance(token, str) and token not in self.labels:
                self.labels[token] = f"L{len(self.labels) + 1}"

    def label(self, token: str) -> str:
        """The label of the lease ``token`` belongs to (``L3``), or the token's repr."""
        return self.labels.get(token, repr(token))

    def token_labelled(self, label: str) -> str | None:
        """The token of the lease labelled ``label``, if this run minted it."""
        return next((token for token, name in self.labels.items() if name == label), None)

    def _remember_untils(self, call: Call, outcome: Outcome) -> None:
        if not outcome.ok:
            return
        if call.op in GRANTS_LEASE:
            task = self.model.task(call.task_id)
            assert task is not None
            assert task.lease is not None
            self.untils[task.lease.token] = task.lease.until
        elif call.op in ENDS_LEASE:  # an operation that does neither leaves the lease as it is
            self.given_up.add(call.token)

    # -- whose token ---------------------------------------------------------------------------

    def token_of(self, task_id: str, holder: str) -> str:
        """The token of ``task_id``'s latest lease (``holder="latest"``), or of the one before
        it (``"previous"``, stale); ``""`` for a task never claimed."""
        tokens = [x.token for x in reversed(self.model.issued) if x.task_id == task_id]
        if not tokens:
            return ""
        return tokens[1] if holder == "previous" and len(tokens) > 1 else tokens[0]

    def latest_lease(self, task_id: str) -> IssuedLease | None:
        """The lease a claim of ``task_id`` returned last, if one did."""
        return next((x for x in reversed(self.model.issued) if x.task_id == task_id), None)

    # -- the snapshot and the checks after every step ------------------------------------------

    def snapshot(self, step: Step | None) -> list[Task]:
        """``list_tasks()``; in tolerant mode, read again after an infrastructure fault."""
        attempts = self.config.snapshot_attempts
        for attempt in range(1, attempts + 1):
            try:
                return list(self.board.list_tasks())
            except BoardError as exc:
                violation = ContractViolation(
                    "SPEC 3.7", "list_tasks() to return a snapshot", f"raised {exc!r}"
                )
                self.fail_with(violation, step, cause=exc)
            except Exception as exc:
                if attempt == attempts or not self.config.tolerates(exc):
                    after = "" if step is None else f" after step {step.index}"
                    self.fail_with_fault(exc, step, f"list_tasks(){after}")
        raise AssertionError("unreachable")  # pragma: no cover

    def observe(self, step: Step | None, snapshot: list[Task] | None = None) -> None:
        """Read the snapshot (unless given) and check it: against the model, ``check()`` and
        at most one live holder per task (SPEC 6).

        Raises:
            ContractViolation: the snapshot breaks the contract.
        """
        if snapshot is None:
            snapshot = self.snapshot(step)
        try:
            self.model = self.model.reconcile(snapshot)
            # check() is a pure function of the snapshot: an equal snapshot (often, after a
            # rejected call) has the same problems, none, as the last one checked.
            problems = [] if snapshot == self.checked_snapshot else check(snapshot)
            if problems:
                raise ContractViolation(
                    "SPEC 4 and 6",
                    "check(list_tasks()) == [] after every step",
                    "listed a snapshot with problems: "
                    + "; ".join(f"{p.task!r} {p.code}: {p.text}" for p in problems),
                )
            self.checked_snapshot = snapshot
            self._check_live_holders()
        except ContractViolation as violation:
            self.fail_with(violation, step)

    def _check_live_holders(self) -> None:
        # Independent of the model's snapshot: from the outcomes alone, who believes they hold
        # which task, live, right now (on the wall clock: at the last call's effect instant).
        now = self.model.floor if self.wall and self.model.floor else self.clock.now()
        holders: dict[str, list[str]] = {}
        for issued in self.model.issued:
            until = self.untils.get(issued.token)
            if issued.token not in self.given_up and (until is None or now < until):
                holders.setdefault(issued.task_id, []).append(issued.token)
        for task_id, tokens in holders.items():
            if len(tokens) > 1:
                raise ContractViolation(
                    "SPEC 6",
                    f"at most one live holder of task {task_id!r}",
                    "let " + " and ".join(map(self.label, tokens)) + " hold it live at once",
                )

    # -- failing -------------------------------------------------------------------------------

    def fail_with(
        self, violation: ContractViolation, step: Step | None, *, cause: BaseException | None = None
    ) -> NoReturn:
        """Raise the report of ``violation`` (what the model found) at ``step``."""
        error = violation_report(self.run, violation, self.trace, step, self.label).error()
        self.failure = error
        raise error from cause

    def fail_with_fault(self, exc: Exception, step: Step | None, during: str = "") -> NoReturn:
        """Raise the report of an infrastructure fault in ``step``'s call, or ``during``
        something else (a ``list_tasks()``, ``make_board``, a hook)."""
        report = fault_report(self.run, self.config, exc, self.trace, step, self.label, during)
        self.hung = self.hung or report.hung
        self.failure = report.error()
        raise_report(report, self.failure)

    # -- the clock -----------------------------------------------------------------------------

    def move_clock(self, target: datetime | None, note: str, *, blind: bool = False) -> None:
        """Move the clock to ``target`` (sleep, on the wall clock) as a step of the trace. A
        ``blind`` move (one aimed at no lease's end) sleeps on a coarse unit only while the
        example's wait budget lasts."""
        _check_stop()
        before = self.clock.now()
        budget = self.config.wait_budget
        if target is not None and budget is not None and blind:
            if self.waited + (target - before) > budget:
                target, note = None, "clock stays: the example's wait budget is spent"
            else:
                self.waited += target - before
        if target is not None:
            self.clock_to(target)
        moved = self.clock.now() - before
        self.trace.append(Step(len(self.trace) + 1, before, advance=moved, note=note))

    def clock_to(self, target: datetime) -> None:
        """Set the manual clock to ``target``; on the wall clock, sleep until it is reached,
        or, while :attr:`defer_landing` is set, keep it as :attr:`deferred_landing` (the
        threads of a controlled race sleep until it from their start line)."""
        if self.defer_landing and not isinstance(self.clock, ManualClock):
            self.deferred_landing = target
            return
        if isinstance(self.clock, ManualClock):
            self.clock.set(target)
        else:
            sleep_until(self.clock, target, stoppable=True)

    # -- clients (SPEC 8) ----------------------------------------------------------------------

    def open_clients(self, count: int) -> list[tuple[Any, Board]]:
        """``count`` clients of the board from ``open_client``, each as opened and as the
        session calls it (through the board's driver).

        Raises:
            InfrastructureFault: ``open_client`` raised.
            TypeError: it returned no Board.
        """
        clients: list[tuple[Any, Board]] = []
        for _ in range(count):
            try:
                raw = self.driver.call(self.hooks.open_client, self.made_board)
            except Exception as exc:
                self.close_clients(clients)
                self.fail_with_fault(exc, None, "open_client(board)")
            if not isinstance(raw, Board):
                self.close_clients(clients)
                raise TypeError(
                    f"{self.config.name}.open_client returned {raw!r}, which is not a "
                    "Board (it needs list_tasks, claim, release and complete)"
                )
            clients.append((raw, driven(raw, self.driver)))
        return clients

    def close_clients(self, clients: Sequence[tuple[Any, Board]]) -> None:
        """Hand every client to ``close_client``; the first failure is a fault."""
        errors = []
        for raw, _ in clients:
            try:
                self.driver.call(self.hooks.close_client, raw)
            except Exception as exc:
                errors.append(exc)
        if errors:
            self.fail_with_fault(errors[0], None, "close_client(client)")

    # -- the nemesis (SPEC 9) ------------------------------------------------------------------

    def run_nemesis(self, kind: str) -> None:
        """Run the nemesis hook ``kind`` (``"restart"`` or ``"drop"``) as a step of the trace.

        After a restart the snapshot is judged by SPEC 9 (see ``restart_storage``) and the
        model goes on from it. After a drop nothing is read, so that the next call is the one
        that meets the dropped connection.
        """
        hook = NEMESIS_HOOKS[kind]
        function = getattr(self.hooks, hook)
        if inspect.iscoroutinefunction(function) and not is_async_board(self.made_board):
            # An async hook for a sync board: its own loop, under the same time limit.
            function = functools.partial(_run_coroutine, function)
        step = Step(len(self.trace) + 1, self.clock.now(), nemesis=kind)
        self.trace.append(step)
        try:
            returned = self.driver.call(function, self.made_board)
        except Exception as exc:
            self.fail_with_fault(exc, step, f"{hook}(board)")
        if kind == "drop":
            self.transitions[("nemesis", "drop_connections", "ok")] += 1
            return
        if returned is not None:
            if not isinstance(returned, Board):
                raise TypeError(
                    f"{self.config.name}.restart_storage returned {returned!r}, which is "
                    "neither None nor a Board"
                )
            self.made_board, self.board = returned, driven(returned, self.driver)
        snapshot = self.snapshot(step)
        durable = self.config.durable
        try:
            self.model, lost = self.model.restart(snapshot, durable=durable)
        except ContractViolation as violation:
            self.fail_with(violation, step)
        for task in self.model.tasks:
            if task.lease is not None:
                self.untils[task.lease.token] = task.lease.until
                self.given_up.discard(task.lease.token)
        self.given_up |= lost
        verdict = (
            "durable: the snapshot shows every acknowledged change"
            if durable
            else f"not durable: lost {', '.join(sorted(map(self.label, lost)))}"
            if lost
            else "not durable: no lease lost"
        )
        self.transitions[("nemesis", "restart_storage", "lost leases" if lost else "ok")] += 1
        self.trace[-1] = dataclasses.replace(step, note=verdict)
        self.observe(self.trace[-1], snapshot)


#: The transition of a renew on its task's live lease with that lease's own token: where a
#: boundary TTL (0, below one unit, one unit) decides what a buggy store does.
LIVE_OWN_RENEW = ("claimed, live", "renew (current token)")


def transition_of(model: BoardModel, call: Call, when: When) -> tuple[str, str]:
    """(task state, operation) of ``call`` for the fuzzer's transition coverage: the state as
    ``model`` sees it at ``when``, the operation with the kind of token it carries."""
    task = model.task(call.task_id)
    instants = model.instants(call, when) if isinstance(when, Window) else (when,)
    if task is None:
        state = "unknown id"
    elif task.state is State.CLAIMED and task.lease is not None:
        until = task.lease.until
        now = instants[0] if instants else when.latest  # type: ignore[union-attr]
        expiry = "live" if is_live(task.lease, now) else "expired"
        state = "claimed, at until" if until == now or len(instants) > 1 else f"claimed, {expiry}"
    else:
        state = str(task.state)
    if call.op not in ACTS_WITH_TOKEN:  # it acts as an agent (a claim)
        return state, str(call.op) if call.agent else f"{call.op} (empty agent)"
    issued = model.lease_of(call.token)
    if task is not None and task.lease is not None and call.token == task.lease.token:
        kind = "current"
    elif issued is None:
        kind = "forged"
    elif issued.task_id != call.task_id:
        kind = "other task's"
    else:
        kind = "stale"
    return state, f"{call.op} ({kind} token)"


def _session_clock(hooks: MachineHooks, start: datetime) -> Clock:
    """The clock a session's board reads: the machine's own (shifted for clients) on the wall
    clock, the store's on the virtual clock, else a manual clock at ``start``."""
    config = hooks.config
    if config.wall:
        return machine_clock(config.client_skew)
    if config.clock_mode == "virtual":
        return virtual_clock(hooks, start, config.resolution)
    return ManualClock(start)


def _untils_of(tasks: Sequence[Task]) -> dict[str, datetime | None]:
    """The until of each lease the board starts with, by token: those have holders too."""
    return {
        task.lease.token: None if task.lease.until is None else as_utc(task.lease.until)
        for task in tasks
        if task.lease is not None
    }


def _check_is_board(made: Any, driver: Driver, name: str) -> None:
    """Raise TypeError (after closing it) when what ``make_board`` returned is no Board."""
    if not isinstance(made, Board):
        close_driven(lambda board: None, made, driver)
        raise TypeError(
            f"{name}.make_board returned {made!r}, which is not a Board (it needs "
            "list_tasks, claim, release and complete)"
        )
