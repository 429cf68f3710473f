"""BoardMachine: Hypothesis drives a host's Board and the reference model side by side."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import itertools
import math
import os
import sysconfig
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, NoReturn

import hypothesis
import networkx as nx
from hypothesis import Phase, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.errors import Flaky, InvalidArgument
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    RuleStrategy,
    initialize,
    multiple,
    precondition,
    rule,
)
from hypothesis.strategies import SearchStrategy
from hypothesis.strategies._internal.featureflags import FeatureStrategy

from taskboard._check import check
from taskboard._clock import CLOCK_MODES, Clock, ClockMode, ManualClock, SystemClock, as_utc
from taskboard._contract import Board, FailingBoard, RenewingBoard, State, Task
from taskboard._driver import (
    CallTimeoutError,
    Driver,
    close_driven,
    driven,
    is_async_board,
    make_driven,
)
from taskboard._errors import BoardError
from taskboard.model import (
    BoardModel,
    Call,
    ContractViolation,
    ExpiredLeasePolicy,
    Op,
    Outcome,
    Step,
    When,
    Window,
    format_duration,
    is_live,
    violations_in,
)
from taskboard.model._calls import is_infrastructure_fault
from taskboard.model._model import EXPIRED_LEASE_POLICIES, errors_in
from taskboard.stateful._trace import (
    FORGERIES,
    NEMESIS_HOOKS,
    forge,
    format_offset,
    render_step,
    token_ref,
)
from taskboard.stateful._tracefile import TRACE_DIR_ENV, Trace, Verdict, write_trace

__all__ = ["BoardMachine", "InfrastructureFault"]


class _Choice(SearchStrategy[Any]):
    """One of ``values``, as ``st.sampled_from(values)`` draws it, shrinking towards the first.

    The :class:`_Choice` arguments of a rule are drawn together, as one choice over their
    product (see :class:`_RuleDraws`): the same values with the same probabilities, for one
    choice instead of several in every step."""

    def __init__(self, values: Sequence[Any]) -> None:
        super().__init__()
        self.values = tuple(values)
        self.sampled = st.sampled_from(self.values)

    def do_draw(self, data: Any) -> Any:
        return data.draw(self.sampled)

    def __repr__(self) -> str:
        return f"sampled_from({self.values!r})"


#: Task ids of every generated board. Few, so operations collide on the same task.
TASK_IDS = ("t1", "t2", "t3")
#: The token an action uses on a task that never had a lease.
NEVER_ISSUED = "never-issued"
#: An id no generated board has.
UNKNOWN_TASK_ID = "t404"
#: Agent names repeat on purpose: agents are not identities, tokens are. The long
#: non-ASCII name catches stores that truncate or re-encode the owner.
AGENTS = ("a1", "a2", "a1", "ü-agent with a rather long name")
#: Lease lengths in clock ticks: mostly short, so leases expire within an example; 0 never
#: expires; 10,000 outlives any example unless ``at_expiry`` jumps to its end.
TTL_TICKS = _Choice((1, 2, 5, 20, 0, 10_000))
#: Renewal lengths: as for claims, but "no expiry" twice as often, since a renew to ttl 0
#: must clear ``until`` (a store that keeps the old one leaves a lease that still expires).
RENEW_TTL_TICKS = _Choice((1, 0, 5, 20, 0, 10_000))
#: Either way of a two-way argument, ``False`` first (what a failure shrinks to).
BOOLEANS = _Choice((False, True))
#: Whose token a holder action uses: the task's latest lease's, or the one before it.
HOLDERS = ("latest", "previous")
#: What happens on the lease's task right after a jump to (just before) its expiry. Claim and
#: renew are listed twice: the boundary decides their outcome, so they matter most there.
AT_EXPIRY = ("claim", "renew", "claim", "renew", "release", "complete", "fail", "nothing")
#: Operations that act with a token, by name (names keep Hypothesis's printed steps runnable).
TOKEN_OPS = ("release", "complete", "renew", "fail")
#: Ways to act with a token that is not the task's lease's: another task's lease's token, or
#: a forgery close to the real one.
WRONG_TOKENS = ("another task's", *FORGERIES)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_START = datetime(2026, 1, 1, tzinfo=UTC)

#: On the wall clock, room for a call's own latency in a TTL unit, beyond twice the skew: a
#: lease of one unit is still live, for certain, for the call right after its claim.
WALL_LATENCY_ROOM = timedelta(milliseconds=3)
#: On the wall clock, ``at_expiry`` waits for leases that end within this many TTL units; a
#: longer lease outlives the example, as a lease of 10,000 ticks does on a manual clock.
WALL_LONGEST_WAIT = 8
#: On the wall clock, how far past a lease's ``until`` (beyond the skew and the resolution)
#: ``at_expiry`` lands, so that the call's window lies wholly after it.
WALL_LANDING = timedelta(microseconds=200)


def wall_ttl_unit(resolution: timedelta, skew: timedelta) -> timedelta:
    """The TTL unit on the wall clock (SPEC 7): the least multiple of ``resolution`` longer than
    a call's uncertainty (twice ``skew``, plus :data:`WALL_LATENCY_ROOM` for the call itself),
    so that a drawn lease is seen live before its ``until`` and expired after it."""
    span = 2 * skew + WALL_LATENCY_ROOM
    return max(resolution, -(-span // resolution) * resolution)


def sleep_until(clock: Clock, target: datetime) -> None:
    """Sleep until ``clock`` reads ``target`` or later."""
    while (left := target - clock.now()) > timedelta(0):
        time.sleep(left.total_seconds())


def grid_start(tick: timedelta) -> datetime:
    """The first instant from 2026-01-01 UTC that is a whole number of ``tick`` since the
    Unix epoch: a start from which every drawn time is on the host's resolution grid."""
    return _EPOCH + ((_START - _EPOCH) // tick) * tick


@dataclass(frozen=True)
class LeaseRef:
    """A lease some claim returned, kept so later steps can act with its token."""

    label: str
    task_id: str
    token: str
    fence: int
    agent: str

    def __repr__(self) -> str:
        return f"<{self.label}: lease of {self.task_id!r} for {self.agent!r}, fence {self.fence}>"


#: Rules swarm testing never switches off: without claims an example reaches nothing, and
#: without jumps to expiry boundaries it seldom reaches the bugs that live there.
ALWAYS_ON = ("claim", "complete", "at_expiry")
#: The most combinations one joint choice of arguments spans: Hypothesis draws an index up to
#: 256 uniformly, and smaller indices more often beyond.
JOINT_CHOICES = 256


@functools.cache
def _argument_draws(rule: Any) -> tuple[tuple[tuple[str, ...], SearchStrategy[Any]], ...]:
    """How :class:`_RuleDraws` draws ``rule``'s arguments: (names, strategy) pairs in the order
    Hypothesis draws them. Consecutive :class:`_Choice` arguments share one choice over their
    product (the first argument varying slowest, so index 0 is every argument's first value),
    of at most :data:`JOINT_CHOICES` combinations; any other argument is drawn on its own."""
    draws: list[tuple[tuple[str, ...], SearchStrategy[Any]]] = []
    group: list[tuple[str, _Choice]] = []

    def close() -> None:
        if len(group) == 1:
            draws.append(((group[0][0],), group[0][1].sampled))
        elif group:
            product = itertools.product(*(choice.values for _, choice in group))
            draws.append((tuple(name for name, _ in group), st.sampled_from(tuple(product))))
        group.clear()

    for name, strategy in rule.arguments_strategies.items():
        if not isinstance(strategy, _Choice):
            close()
            draws.append(((name,), strategy))
            continue
        combinations = math.prod(len(choice.values) for _, choice in group)
        if combinations * len(strategy.values) > JOINT_CHOICES:
            close()
        group.append((name, strategy))
    close()
    return tuple(draws)


class _RuleDraws(RuleStrategy):
    """Hypothesis's draw of a rule and its arguments, made with fewer choices.

    * Swarm testing as Hypothesis's: each example switches each rule off with a probability
      drawn for the example, except the :data:`ALWAYS_ON` rules. Every rule's switch is
      decided at the example's first step, once, rather than recorded again whenever the
      rule is considered.
    * The rule as Hypothesis draws it: an index over all rules, drawn again (up to three
      times, then once over the rules that can run) while it names a rule that is switched
      off or invalid (an empty bundle, a false precondition); so a choice names the same rule
      in every state, and each rule that can run is equally likely.
    * A rule's :class:`_Choice` arguments are drawn as one choice (see
      :func:`_argument_draws`).
    * The initialize rules (``start``) are drawn here too, before any other, in a random
      order as Hypothesis draws them, but through strategies made once, not per example;
      unless an invariant waits for them (a subclass's), when Hypothesis draws them itself.

    Arguments are returned by name in Hypothesis's order, so its printed steps are unchanged.
    """

    def __init__(self, machine: RuleBasedStateMachine) -> None:
        super().__init__(machine)
        self._initializers: list[Any] = []
        # Hypothesis draws the initialize rules only while this list holds them, and holds
        # back the invariants not checked during initialization until it is empty: a
        # subclass's invariant that reads the board must not run before start().
        if all(invariant.check_during_init for invariant in machine.invariants):
            self._initializers = list(machine._initialize_rules_to_run)
            machine._initialize_rules_to_run.clear()
        self._names = tuple(r.function.__name__ for r in self.rules)
        self._switched_on: frozenset[str] = frozenset()
        self._runnable = _rule_sampler(tuple(self.rules)).filter(self._can_run)

    def _can_run(self, rule: Any) -> bool:
        return rule.function.__name__ in self._switched_on and bool(self.is_valid(rule))

    def _switches(self, data: Any) -> frozenset[str]:
        flags = data.draw(_SWARM)
        return frozenset(n for n in self._names if n in ALWAYS_ON or flags.is_enabled(n))

    def do_draw(self, data: Any) -> Any:
        if self._initializers:
            pending = self._initializers
            rule = (
                pending[data.draw(_index_below(len(pending)))] if len(pending) > 1 else pending[0]
            )
            pending.remove(rule)
            return rule, _draw_arguments(data, rule, rule.arguments)
        if not any(self.is_valid(rule) for rule in self.rules):
            return super().do_draw(data)  # Hypothesis's report that no rule can run
        if not self._switched_on:
            self._switched_on = self._switches(data)
        rule = data.draw(self._runnable)
        return rule, _draw_arguments(data, rule, rule.arguments_strategies)


def _draw_arguments(data: Any, rule: Any, order: dict[str, Any]) -> dict[str, Any]:
    """``rule``'s arguments (see :func:`_argument_draws`), by name in ``order``."""
    drawn: dict[str, Any] = {}
    for names, strategy in _argument_draws(rule):
        value = data.draw(strategy)
        if len(names) == 1:
            drawn[names[0]] = value
        else:
            drawn.update(zip(names, value, strict=True))
    return {name: drawn[name] for name in order}


#: Hypothesis's swarm testing: a probability drawn per example, each rule off with it.
_SWARM = FeatureStrategy()


@functools.cache
def _index_below(count: int) -> SearchStrategy[int]:
    return st.integers(0, count - 1)


@functools.cache
def _rule_sampler(rules: tuple[Any, ...]) -> SearchStrategy[Any]:
    # One per set of rules: a sampled_from's label costs a pass over them.
    return st.sampled_from(rules)


def _use_rule_draws(machine: RuleBasedStateMachine) -> None:
    # This reaches into Hypothesis's internals; if they change, its own draws remain.
    stock = getattr(machine, "_rules_strategy", None)
    if (
        type(stock) is RuleStrategy
        and all(hasattr(stock, name) for name in ("rules", "is_valid"))
        and isinstance(getattr(machine, "invariants", None), list)
        and isinstance(getattr(machine, "_initialize_rules_to_run", None), list)
    ):
        machine._rules_strategy = _RuleDraws(machine)


#: Shapes of dependency graph over three tasks, as (dependent, dependency) positions. Every
#: acyclic graph on three tasks is one of these up to a relabelling, which is drawn too.
GRAPH_SHAPES: dict[str, tuple[tuple[int, int], ...]] = {
    "independent": (),
    "one edge": ((1, 0),),
    "chain": ((1, 0), (2, 1)),
    "fan-in": ((2, 0), (2, 1)),
    "fan-out": ((1, 0), (2, 0)),
    "chain with shortcut": ((1, 0), (2, 1), (2, 0)),
}


#: The shapes as drawn: fan-in twice, since a task with two dependencies (one done, one not)
#: is where partial dependency checks fail, and only that shape has one claimable in between.
SHAPE_CHOICES = (*GRAPH_SHAPES, "fan-in")


#: Every (shape, relabelling) pair, shape first: one choice draws a graph, and a failure
#: shrinks towards ``"independent"`` with the tasks in order.
GRAPH_PLANS = tuple(itertools.product(SHAPE_CHOICES, itertools.permutations(TASK_IDS)))


def _graph(plan: tuple[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    shape, order = plan
    deps: dict[str, tuple[str, ...]] = dict.fromkeys(TASK_IDS, ())
    for dependent, dependency in GRAPH_SHAPES[shape]:
        deps[order[dependent]] += (order[dependency],)
    return deps


def dependency_graphs() -> SearchStrategy[dict[str, tuple[str, ...]]]:
    """An acyclic dependency graph over :data:`TASK_IDS`: a shape, and which task is which.

    Drawing the shape (with a relabelling, uniformly) makes two-dependency tasks and
    chains as likely as no dependencies at all; a failure that needs no edges shrinks to
    ``"independent"``.
    """
    return st.sampled_from(GRAPH_PLANS).map(_graph)


def _graph_key(deps: dict[str, tuple[str, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted(deps.items()))


def _is_acyclic(deps: dict[str, tuple[str, ...]], *, known: bool = True) -> bool:
    """True if ``deps`` has no cycle; the drawn graphs were all checked once, on import."""
    if known and _graph_key(deps) in _ACYCLIC_PLANS:
        return True
    graph: nx.DiGraph[str] = nx.DiGraph([(t, d) for t, ds in deps.items() for d in ds])
    graph.add_nodes_from(deps)
    return bool(nx.is_directed_acyclic_graph(graph))


_ACYCLIC_PLANS = frozenset(
    _graph_key(deps)
    for deps in map(_graph, GRAPH_PLANS)
    if _is_acyclic(deps, known=False)  # every one, or start() asserts
)


class _HungRun(BaseException):  # not an error: it ends a run
    """A call hung: the run ends now. Hypothesis would shrink an ``Exception`` by replaying
    it, each replay costing a whole timeout; it lets other ``BaseException`` s through."""

    def __init__(self, fault: InfrastructureFault) -> None:
        super().__init__(str(fault))
        self.fault = fault


def _raise_fault(report: InfrastructureFault) -> NoReturn:
    # Every fault is raised from this one line: Hypothesis tells failures apart by where
    # they were raised, and faults, wherever they happen, are one kind of failure.
    if isinstance(report.exception, CallTimeoutError):
        raise _HungRun(report) from report.exception
    raise report from report.exception


def failures_reported(machine_cls: type[BoardMachine] | None = None) -> _FailuresReported:
    """Report a run's failure as what it was, as a context manager around the run.

    A run ended by a hung call becomes the :class:`InfrastructureFault` it was. A
    ``Flaky`` error, raised when Hypothesis's replay of a shrunk failure did not fail
    again, becomes the violation (or fault) that was seen, with a note that it did not
    recur and, for ``machine_cls``, its trace file written: never a bare ``Flaky``. A
    violation or fault leaves with a traceback that holds only the host's own frames, so
    that pytest shows the report, not taskboard's and Hypothesis's internals.
    """
    return _FailuresReported(machine_cls)


class _FailuresReported:
    def __init__(self, machine_cls: type[BoardMachine] | None) -> None:
        self.machine_cls = machine_cls

    def __enter__(self) -> None:
        if self.machine_cls is not None:
            _FIRST_FAILURES.pop(self.machine_cls, None)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: Any
    ) -> None:
        __tracebackhide__ = True
        try:
            report: BaseException | None = None
            if isinstance(error, _HungRun):
                report = error.fault
                report.__cause__, report.__suppress_context__ = error.fault.exception, True
            elif isinstance(error, Flaky):
                report = unrepeated_failure(error, self.machine_cls)
                if report is not None:
                    report.__cause__, report.__suppress_context__ = None, True
            elif isinstance(error, ContractViolation | InfrastructureFault):
                report = error
            if report is None:
                return
            raise report.with_traceback(host_traceback(report.__traceback__))
        finally:
            if self.machine_cls is not None:
                _FIRST_FAILURES.pop(self.machine_cls, None)


def _is_host_code(filename: str) -> bool:
    """False for taskboard's internals (but its reference hosts), Hypothesis and the
    standard library: what a report leaves out of the frames it shows."""
    path = os.path.abspath(filename)
    internal = path.startswith(_PACKAGE_DIR + os.sep) and not path.startswith(_HOSTS_DIR + os.sep)
    return not internal and not path.startswith(_NOT_HOST_DIRS)


def host_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` with only the frames of the host's own code (see :func:`host_frames`)."""
    kept = []
    while tb is not None:
        if _is_host_code(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


#: The first failure each machine class reported in the run under way: on the wall clock,
#: Hypothesis may give up on a replay whose steps drew differently (``FlakyStrategyDefinition``)
#: and carry no failure at all; what was seen is then this.
_FIRST_FAILURES: dict[type, ContractViolation | InfrastructureFault] = {}


def unrepeated_failure(
    error: BaseException, machine_cls: type[BoardMachine] | None = None
) -> ContractViolation | InfrastructureFault | None:
    """The violation (or else the fault) in ``error``, a ``Flaky`` error, noted as not recurring.

    Its trace file is written now, for ``machine_cls``'s trace directory, since Hypothesis's
    final replay, which writes it otherwise, did not fail. ``None`` if ``error`` carries
    neither.
    """
    seen: ContractViolation | InfrastructureFault | None = next(iter(violations_in(error)), None)
    if seen is None:
        seen = next(iter(errors_in(error, InfrastructureFault)), None)
    if seen is None and machine_cls is not None:
        seen = _FIRST_FAILURES.get(machine_cls)
    if seen is None or getattr(seen, "_unrepeated", False):
        return seen
    wall = machine_cls is not None and machine_cls.clock_mode == "wall"
    why = (
        "on the wall clock a replay cannot repeat the timing exactly (SPEC 7)"
        if wall
        else "the board behaved differently on the same steps (its own randomness, timing "
        "or state kept outside the board)"
    )
    lines = [
        str(seen),
        "",
        f"note: this did not recur when Hypothesis replayed the shrunk example: {why}. The "
        "board did what is reported above once; a replay of the trace may or may not show it.",
    ]
    recording: Trace | None = getattr(seen, "recording", None)
    directory = machine_cls.trace_dir_in_use() if machine_cls is not None else None
    if recording is not None and directory and seen.trace_file is None:
        lines.append(_record(seen, recording, directory))
    seen.args = ("\n".join(lines),)
    setattr(seen, "_unrepeated", True)  # noqa: B010
    return seen


#: Where taskboard's own modules live; frames there (but in its reference hosts) are not the
#: host's code.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_HOSTS_DIR = os.path.join(_PACKAGE_DIR, "hosts")
#: Frames of the standard library and of Hypothesis are not the host's code either.
_NOT_HOST_DIRS = tuple(
    os.path.abspath(path)
    for path in (sysconfig.get_paths()["stdlib"], os.path.dirname(hypothesis.__file__))
)


def host_frames(exc: BaseException, limit: int = 8) -> list[str]:
    """The innermost ``limit`` frames of ``exc``'s traceback that are the host's own code
    (a board's methods, its driver), formatted for a report: taskboard's internals (but
    for its reference hosts), Hypothesis and the standard library are left out."""
    kept = []
    for frame in traceback.extract_tb(exc.__traceback__):
        if not _is_host_code(frame.filename):
            continue
        kept.append(f"    {frame.filename}:{frame.lineno} in {frame.name}")
        if frame.line:
            kept.append(f"      {frame.line}")
    return kept[-2 * limit :]


def _record(
    report: ContractViolation | InfrastructureFault, recording: Trace, directory: str
) -> str:
    """Write ``recording`` to ``directory`` as ``report``'s trace file; the line that says
    where, or why it could not be written (the report itself is never lost to that)."""
    try:
        path = write_trace(recording, directory)
    except OSError as exc:
        return f"trace NOT written to {directory}: {exc}"
    report.trace_file = str(path)
    return f"trace written to {path}; replay it with: taskboard replay {path}"


def _in_final_replay() -> bool:
    # Hypothesis replays the shrunk failing example once more at the end: the failure to keep.
    try:
        return current_build_context().is_final
    except InvalidArgument:
        return False


def close_own(resource: Any) -> Any:
    """Call ``resource``'s own ``aclose()`` or ``close()``, if it has one."""
    own_close = getattr(resource, "aclose", None) or getattr(resource, "close", None)
    return own_close() if callable(own_close) else None


def _client_hook(function: Callable[[Any], Any], *, skip_board: bool = False) -> Callable[..., Any]:
    """A machine hook ``(self, board_or_client)`` that calls ``function`` (awaited if async);
    with ``skip_board``, not on the board itself (a store whose only client is the board)."""
    if inspect.iscoroutinefunction(function):

        async def async_hook(self: BoardMachine, target: Any) -> Any:
            if skip_board and target is self.made_board:
                return None
            return await function(target)

        return async_hook

    def hook(self: BoardMachine, target: Any) -> Any:
        if skip_board and target is self.made_board:
            return None
        return function(target)

    return hook


def _run_coroutine(function: Callable[[Any], Any], argument: Any) -> Any:
    return asyncio.run(function(argument))


def _async_make_board(factory: Callable[..., Any]) -> Callable[..., Any]:
    async def make_board(self: BoardMachine, tasks: Sequence[Task], clock: Clock) -> Any:
        return await factory(tasks, clock)

    return make_board


@precondition(lambda self: self._nemesis_ready("restart"))
@rule()
def restart(self: BoardMachine) -> None:
    """Restart the storage (``restart_storage``), then judge the snapshot by SPEC 9."""
    self.run_nemesis("restart")


@precondition(lambda self: self._nemesis_ready("drop"))
@rule()
def drop(self: BoardMachine) -> None:
    """Kill the board's connections (``drop_connections``); the next calls meet that."""
    self.run_nemesis("drop")


#: The nemesis rules, which a machine class with the hooks gets as its methods.
_NEMESIS_RULES = {"restart": restart, "drop": drop}


class _ParallelTestCase:
    """``MyMachine.ParallelTestCase``: the parallel mode as a unittest case, like ``TestCase``."""

    def __get__(self, obj: object, owner: type[BoardMachine]) -> Any:
        from taskboard.stateful._parallel import parallel_test_case  # it imports this module

        return parallel_test_case(owner)


#: Makes a fresh board of the given tasks on the given clock (an ``async def`` will do).
BoardFactory = Callable[[Sequence[Task], Clock], Any]

#: How often tolerant mode reads a snapshot that an infrastructure fault interrupts.
SNAPSHOT_ATTEMPTS = 5


class InfrastructureFault(Exception):
    """The board's storage failed: not a contract violation, and not a verdict on the board.

    :class:`BoardMachine` raises it when a board call raises an exception that is
    no contract outcome (a ``ConnectionError``, a driver error, a ``TimeoutError``,
    or any exception the contract does not name), or does not return within
    ``call_timeout`` (then :attr:`exception` is a ``CallTimeoutError``). The
    original exception is :attr:`exception` and the ``__cause__``; the message
    names the step, what the contract allowed there, and the trace.
    """

    #: The step whose call failed; for a failed ``list_tasks()``, the step it followed.
    step: Step | None = None
    #: Every step of the run up to and including :attr:`step`.
    trace: tuple[Step, ...] = ()
    #: The JSON trace file written for this fault, if one was.
    trace_file: str | None = None
    #: This run as a :class:`~taskboard.stateful.Trace`, kept in case it does not recur.
    recording: Any = None

    def __init__(self, message: str, exception: BaseException) -> None:
        super().__init__(message)
        self.exception = exception


#: The class attributes :meth:`BoardMachine.for_board` takes from a factory that has them.
_FACTORY_ATTRIBUTES = (
    "clock_resolution",
    "clock_mode",
    "clock_skew",
    "expired_lease_policy",
    "durable",
)

#: Called with every machine at teardown (the fuzzer counts examples, steps and transitions).
_LISTENERS: list[Callable[[BoardMachine], None]] = []


class BoardMachine(RuleBasedStateMachine):
    """Checks a host's Board against the reference model, step by step.

    Subclass it and define :meth:`make_board`; ``TestMyBoard = MyMachine.TestCase``
    then runs it under pytest or unittest. Hypothesis interleaves claims,
    renews, releases, completions, failures, stale and forged tokens, unknown
    ids and clock jumps (including to exactly a lease's expiry and one tick
    before it). After every step the machine checks the outcome against the
    model, the whole ``list_tasks()`` snapshot task by task, ``check()``, fence
    growth, token freshness, that no two holders are live at once, and ``seq``
    (SPEC section 6). A failure raises :class:`taskboard.model.ContractViolation`
    with the step, what the contract expected and why, what the board did, and
    the trace that led there.

    Class attributes a host may set:

    * ``clock_resolution``: the smallest time step the store keeps (default 1 ms,
      what Redis ``PX`` keeps and finer than most hosts need). Start times, TTLs
      and clock jumps are drawn as multiples of it, so expiry boundaries stay
      exact; an ``until`` off by less than one resolution is accepted.
    * ``clock_mode``: SPEC 7, where the board's time comes from. ``"manual"``
      (default): ``make_board`` gets a :class:`~taskboard.ManualClock` that only the
      machine moves, and every call is judged at one exact instant. ``"wall"``: for
      boards that keep time on their own server (Redis ``PX``, SQL ``now()``) or
      call ``time.time()``; ``make_board`` gets a :class:`~taskboard.SystemClock`
      the board may ignore, clock rules sleep, and each call is judged on its window
      ``[before - clock_skew, after + clock_skew]``. An off-by-one at exactly
      ``until`` inside that window cannot be seen: prefer ``"manual"`` where the
      board can take an injected clock.
    * ``clock_skew``: in wall mode, how far the board's clock may be from the
      machine's (default 1 ms; zero for a board that reads the machine's own clock).
    * ``expired_lease_policy``: SPEC 3.4, what the board does with
      release/complete/fail by the current token of an expired lease nobody has
      taken over: ``"either"`` (default, both accepted), ``"accept"`` or ``"reject"``.
    * ``call_timeout``: how long one board call (``make_board`` and
      ``close_board`` included) may take before it is cut off and reported as an
      :class:`InfrastructureFault` (default 10 s; ``None``: no limit). A sync
      board is cut off by ``SIGALRM``, so only when the machine runs in the main
      thread; an async board's call is cancelled.
    * ``tolerate_faults``: fuzz through infrastructure faults (default off). After a
      call fails with one, its effect is unknown: the machine reads ``list_tasks()``
      and accepts the snapshot only if it matches the board without the call or
      with it applied, then goes on from there. ``True`` tolerates every fault; a
      tuple of exception classes (``(ConnectionError, psycopg.OperationalError)``)
      only those, so a ``KeyError`` from the host's own code is still reported. A
      timeout (any ``TimeoutError``) still ends the run.
    * ``durable``: SPEC 9, whether the board keeps everything it acknowledged across
      :meth:`restart_storage` (default ``True``). ``False``: after a restart it may show,
      per task, any state it held since the last restart; fences and tokens must still
      never repeat.
    * ``nemesis``: which of the defined nemesis hooks run as rules, ``"restart"`` and
      ``"drop"`` (default ``None``: every defined hook; ``()``: none).

    Async boards: a board whose methods are coroutines needs no wrapper. The machine
    runs it on an event loop of its own, on a thread of its own, one loop per
    example: the loop starts before ``make_board`` (which may be ``async def``) and
    stops after ``close_board`` (which may be ``async def`` too), and every call in
    between runs on it. Clients that bind to a loop must be made in ``make_board``.
    """

    clock_resolution: ClassVar[timedelta] = timedelta(milliseconds=1)
    clock_mode: ClassVar[ClockMode] = "manual"
    clock_skew: ClassVar[timedelta] = timedelta(milliseconds=1)
    expired_lease_policy: ClassVar[ExpiredLeasePolicy] = "either"
    call_timeout: ClassVar[timedelta | None] = timedelta(seconds=10)
    tolerate_faults: ClassVar[bool | tuple[type[Exception], ...]] = False
    #: SPEC 8: run each thread of a parallel program in an OS process of its own, on a client
    #: it opens by unpickling the board (``taskboard fuzz --processes``; see docs/clients.md).
    parallel_processes: ClassVar[bool] = False
    durable: ClassVar[bool] = True
    nemesis: ClassVar[tuple[str, ...] | None] = None
    #: Where the shrunk failing trace is written as JSON; ``None`` reads the
    #: ``TASKBOARD_TRACE_DIR`` environment variable, and no trace is written if it is unset.
    trace_dir: ClassVar[str | None] = None
    #: ``module:Name`` recorded in trace files as what to replay against: ``None`` is this
    #: class; ``""`` records none (``taskboard replay`` then needs ``--board``).
    trace_target: ClassVar[str | None] = None

    leases = Bundle("leases")
    ParallelTestCase = _ParallelTestCase()

    def __init__(self) -> None:
        super().__init__()
        cls = type(self)
        cls.check_definition()
        self.tick = cls.clock_resolution
        #: SPEC 7: time is the wall clock's; calls are judged on windows, clock rules sleep.
        self.wall = cls.clock_mode == "wall"
        self.skew = cls.clock_skew
        #: What a drawn TTL or clock step counts in: the resolution, or on the wall clock
        #: the least multiple of it that outlasts a call's uncertainty.
        self.ttl_unit = wall_ttl_unit(self.tick, self.skew) if self.wall else self.tick
        #: How long the latest calls took (wall clock), to land just before an until.
        self._latencies: deque[timedelta] = deque(maxlen=8)
        _use_rule_draws(self)
        self.board: Board | None = None
        #: The board as ``make_board`` returned it (``board`` is it as the machine calls it).
        self.made_board: Any = None
        self._driver: Driver | None = None
        #: The report this example ends with, once one is made; whether a call hung.
        self._failure: ContractViolation | InfrastructureFault | None = None
        self._hung = False
        self.trace: list[Step] = []
        self._labels: dict[str, str] = {}
        # Every lease's latest until, and the leases their holders gave up (released, ...).
        self._untils: dict[str, datetime | None] = {}
        self._given_up: set[str] = set()
        #: True for a run of a parallel program (its threads' calls are not in ``trace``).
        self.in_parallel_program = False
        #: How often each (task state, operation, outcome) transition ran in this example.
        self.transitions: Counter[tuple[str, str, str]] = Counter()
        #: The last snapshot that check() found clean.
        self._checked_snapshot: list[Task] | None = None
        #: In a parallel program: each thread call's (operation, outcome), for coverage.
        self.concurrent_calls: Counter[tuple[str, str]] = Counter()
        #: The nemesis steps this machine runs as rules (SPEC 9).
        self.nemesis_steps = cls.nemesis_hooks()

    @classmethod
    def check_definition(cls) -> None:
        """Check the hooks and class attributes a subclass set, before anything runs.

        Raises:
            TypeError: ``make_board`` is missing, or ``clock_resolution``,
                ``clock_mode``, ``clock_skew``, ``expired_lease_policy``,
                ``call_timeout`` or ``tolerate_faults`` has a value the machine cannot use.
        """
        if cls.make_board is BoardMachine.make_board:
            raise TypeError(
                f"{cls.__qualname__} must define make_board(self, tasks, clock) returning a "
                "fresh Board that holds `tasks` and reads time only from `clock`"
            )
        resolution: object = cls.clock_resolution
        if not isinstance(resolution, timedelta) or resolution <= timedelta(0):
            raise TypeError(
                f"{cls.__qualname__}.clock_resolution must be a positive timedelta, "
                f"got {resolution!r}"
            )
        if cls.clock_mode not in CLOCK_MODES:
            raise TypeError(
                f"{cls.__qualname__}.clock_mode must be 'manual' or 'wall', got {cls.clock_mode!r}"
            )
        skew: object = cls.clock_skew
        if not isinstance(skew, timedelta) or skew < timedelta(0):
            raise TypeError(
                f"{cls.__qualname__}.clock_skew must be a non-negative timedelta, got {skew!r}"
            )
        timeout: object = cls.call_timeout
        if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
            raise TypeError(
                f"{cls.__qualname__}.call_timeout must be a positive timedelta or None, "
                f"got {timeout!r}"
            )
        tolerated: object = cls.tolerate_faults
        if not isinstance(tolerated, bool) and not (
            isinstance(tolerated, tuple)
            and tolerated
            and all(isinstance(t, type) and issubclass(t, Exception) for t in tolerated)
        ):
            raise TypeError(
                f"{cls.__qualname__}.tolerate_faults must be True, False or a tuple of "
                f"exception classes, got {tolerated!r}"
            )
        if cls.expired_lease_policy not in EXPIRED_LEASE_POLICIES:
            raise TypeError(
                f"{cls.__qualname__}.expired_lease_policy must be 'either', 'accept' or "
                f"'reject', got {cls.expired_lease_policy!r}"
            )
        if not isinstance(cls.durable, bool):
            raise TypeError(
                f"{cls.__qualname__}.durable must be True or False, got {cls.durable!r}"
            )
        cls.nemesis_hooks()

    @classmethod
    def defined_nemesis(cls) -> tuple[str, ...]:
        """The nemesis steps this class can run (SPEC 9): ``"restart"`` when it defines
        :meth:`restart_storage`, ``"drop"`` when it defines :meth:`drop_connections`."""
        return tuple(
            kind
            for kind, hook in NEMESIS_HOOKS.items()
            if getattr(cls, hook) is not getattr(BoardMachine, hook)
        )

    @classmethod
    def nemesis_hooks(cls) -> tuple[str, ...]:
        """The nemesis steps this class runs as rules: ``nemesis``, or every defined one.

        Raises:
            TypeError: ``nemesis`` is not a tuple of ``"restart"`` and ``"drop"``, or names
                a step whose hook the class does not define.
        """
        chosen: object = cls.nemesis
        defined = cls.defined_nemesis()
        if chosen is None:
            return defined
        if not isinstance(chosen, tuple) or not all(k in NEMESIS_HOOKS for k in chosen):
            raise TypeError(
                f"{cls.__qualname__}.nemesis must be None or a tuple of 'restart' and 'drop', "
                f"got {chosen!r}"
            )
        undefined = [NEMESIS_HOOKS[k] for k in chosen if k not in defined]
        if undefined:
            raise TypeError(
                f"{cls.__qualname__}.nemesis asks for {', '.join(chosen)}, but the class "
                f"defines no {' or '.join(undefined)}(self, board)"
            )
        return tuple(dict.fromkeys(chosen))

    @classmethod
    def _to_test_case(cls) -> Any:  # type: ignore[override]  # Hypothesis wraps it in lru_cache
        # Hypothesis's explain phase replays a failure many times to annotate it; on a state
        # machine that costs several times the search itself, so the TestCase leaves it out.
        case = super()._to_test_case()
        if not getattr(case, "_taskboard_settings", False):
            phases = tuple(p for p in case.settings.phases if p is not Phase.explain)
            case.settings = settings(case.settings, phases=phases)
            run_test = case.runTest

            @functools.wraps(run_test)  # keeps Hypothesis's marks on it
            def runTest(self: Any) -> None:  # noqa: N802  # unittest's name
                with failures_reported(cls):
                    run_test(self)

            case.runTest = runTest  # type: ignore[method-assign]
            setattr(case, "_taskboard_settings", True)  # noqa: B010
            # So that `taskboard fuzz` and `replay` take the TestCase as a target.
            case._taskboard_machine = cls  # type: ignore[attr-defined]
        return case

    @classmethod
    def for_board(
        cls,
        factory: BoardFactory,
        *,
        close: Callable[[Any], Any] | None = None,
        open_client: Callable[[Any], Any] | None = None,
        close_client: Callable[[Any], Any] | None = None,
        restart_storage: Callable[[Any], Any] | None = None,
        drop_connections: Callable[[Any], Any] | None = None,
        **attributes: Any,
    ) -> type[BoardMachine]:
        """A machine class whose boards come from ``factory(tasks, clock)``.

        ``TestMyBoard = BoardMachine.for_board(MyBoard).TestCase`` is the short form of
        subclassing. The factory's own ``clock_resolution``, ``clock_mode``,
        ``clock_skew`` and ``expired_lease_policy`` attributes are used when it has
        them, and ``attributes`` set any class attribute (``clock_mode="wall"``, say).
        Boards are closed with ``close(board)``, or with their own ``aclose()`` or
        ``close()`` method; an ``async def`` factory or closer is awaited on the
        machine's loop. Clients (SPEC 8) come from ``open_client(board)``, or from the
        factory's own ``open_client`` attribute (a board class's ``open_client`` method
        will do), and are closed with ``close_client(client)`` or their own ``aclose()``
        or ``close()``; with neither, every thread shares the board. ``restart_storage(board)``
        and ``drop_connections(board)`` are the nemesis hooks (SPEC 9), each may be
        ``async def``; set ``durable=False`` with them for a store that may lose
        acknowledged changes. A factory's own ``restart_storage`` and ``drop_connections``
        attributes (a board class's methods will do) and ``durable`` are used as well.
        """
        name = getattr(factory, "__name__", type(factory).__name__)
        namespace: dict[str, Any] = {
            attribute: getattr(factory, attribute)
            for attribute in _FACTORY_ATTRIBUTES
            if hasattr(factory, attribute)
        }
        namespace.update(attributes)

        def make_board(self: BoardMachine, tasks: Sequence[Task], clock: Clock) -> Any:
            return factory(tasks, clock)

        if inspect.iscoroutinefunction(factory):
            make_board = _async_make_board(factory)

        def close_board(self: BoardMachine, board: Board) -> Any:
            if close is not None:
                return close(board)
            return close_own(board)

        namespace.update(make_board=make_board, close_board=close_board)
        opener = open_client or getattr(factory, "open_client", None)
        if opener is not None:
            namespace.update(
                open_client=_client_hook(opener),
                close_client=_client_hook(close_client or close_own, skip_board=True),
            )
        for hook, function in (
            ("restart_storage", restart_storage or getattr(factory, "restart_storage", None)),
            ("drop_connections", drop_connections or getattr(factory, "drop_connections", None)),
        ):
            if function is not None:
                namespace[hook] = _client_hook(function)
        # Replay the trace against the factory itself when it can be imported by name.
        qualname = getattr(factory, "__qualname__", "<unknown>")
        importable = not inspect.ismethod(factory) and "<" not in qualname
        where = f"{getattr(factory, '__module__', '')}:{qualname}"
        namespace.setdefault("trace_target", where if importable else "")
        machine = type(f"{name}Machine", (cls,), namespace)
        # Hypothesis keys its example database by a digest of the machine's source, which
        # every such class shares: the factory's own name tells them apart.
        machine._hypothesis_internal_add_digest = where.encode()  # type: ignore[attr-defined]
        return machine

    # -- hooks -------------------------------------------------------------------------------

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Any:
        """Return a fresh, isolated Board holding ``tasks`` that reads time only from ``clock``.

        ``clock`` is a :class:`~taskboard.ManualClock`; with ``clock_mode = "wall"`` it is a
        :class:`~taskboard.SystemClock`, which a board keeping its own time may ignore.

        May be ``async def``, and the board's methods may be coroutines (see the class
        docstring for the event loop they run on).
        """
        raise NotImplementedError

    def open_client(self, board: Any) -> Any:
        """Optional (SPEC 8): another client of the same storage as ``board``, as another
        process would open it: its own connection, pool, cache and locks.

        ``board`` is what :meth:`make_board` returned. When a machine defines this hook,
        the parallel mode runs every thread on a client of its own (the prefix runs on
        ``board``), so a claim that is atomic only inside one client object is caught.
        May be ``async def`` when ``make_board`` is. Not defined: every thread shares
        ``board``.
        """
        raise NotImplementedError

    def close_client(self, client: Any) -> Any:
        """Release what :meth:`open_client` acquired: by default the client's own ``aclose()``
        or ``close()``, unless the client is the board itself. May be ``async def``."""
        if client is not self.made_board:
            return close_own(client)
        return None

    @classmethod
    def has_clients(cls) -> bool:
        """True when the machine defines :meth:`open_client` (SPEC 8)."""
        return cls.open_client is not BoardMachine.open_client

    def open_clients(self, count: int) -> list[tuple[Any, Board]]:
        """``count`` clients of the board from :meth:`open_client`, each as opened and as the
        machine calls it (through the board's driver).

        Raises:
            InfrastructureFault: ``open_client`` raised, or returned no Board.
        """
        assert self._driver is not None
        clients: list[tuple[Any, Board]] = []
        for _ in range(count):
            try:
                raw = self._driver.call(self.open_client, self.made_board)
            except Exception as exc:
                self.close_clients(clients)
                _raise_fault(self._fault(exc, None, "open_client(board)"))
            if not isinstance(raw, Board):
                self.close_clients(clients)
                raise TypeError(
                    f"{type(self).__qualname__}.open_client returned {raw!r}, which is not a "
                    "Board (it needs list_tasks, claim, release and complete)"
                )
            clients.append((raw, driven(raw, self._driver)))
        return clients

    def close_clients(self, clients: Sequence[tuple[Any, Board]]) -> None:
        """Hand every client to :meth:`close_client`; the first failure is a fault."""
        assert self._driver is not None
        errors = []
        for raw, _ in clients:
            try:
                self._driver.call(self.close_client, raw)
            except Exception as exc:
                errors.append(exc)
        if errors:
            _raise_fault(self._fault(errors[0], None, "close_client(client)"))

    def restart_storage(self, board: Any) -> Any:
        """Optional (SPEC 9): stop the board's storage and start it again, keeping whatever
        it persists (a server restart, a file closed and reopened).

        ``board`` is the board the machine calls now. Return the board to use from then on,
        or ``None`` to keep ``board``. The machine then reads ``list_tasks()``: a
        :attr:`durable` board must show exactly what it acknowledged; one that is not may
        show, per task, any state it held since the last restart. Fences and tokens must
        never repeat. May be ``async def``. Defined: it runs as a rare rule.
        """
        raise NotImplementedError

    def drop_connections(self, board: Any) -> Any:
        """Optional (SPEC 9): kill ``board``'s live connections from the server's side
        (``CLIENT KILL``, ``pg_terminate_backend``). The board must reconnect by itself; a
        call that meets a dropped connection is an infrastructure fault, which
        :attr:`tolerate_faults` settles. May be ``async def``. Defined: it runs as a rare
        rule.
        """
        raise NotImplementedError

    def close_board(self, board: Any) -> Any:
        """Release what :meth:`make_board` acquired; runs at the end of every example.

        ``board`` is what :meth:`make_board` returned. May be ``async def``. Skipped
        when a call hung and could not be stopped (the board's thread is still in it).
        """

    def teardown(self) -> None:
        """Hand the board to :meth:`close_board`, then stop the board's event loop.

        After a hung call the board is left alone (it may still be inside the call).
        A failing ``close_board`` is an infrastructure fault, or a note on the report
        already on its way.
        """
        for listener in _LISTENERS:
            listener(self)
        if self._driver is None:
            return
        if self._hung:
            self._driver.close()
            return
        try:
            close_driven(self.close_board, self.made_board, self._driver)
        except Exception as exc:
            if self._failure is None:
                _raise_fault(self._fault(exc, None, "close_board(board)"))
            self._failure.add_note(f"close_board(board) then raised {exc!r} as well")

    # -- set-up --------------------------------------------------------------------------------

    @initialize(deps=dependency_graphs(), start_ticks=st.integers(0, 10**6))
    def start(self, deps: dict[str, tuple[str, ...]], start_ticks: int) -> None:
        """Make a board of three open tasks with the drawn dependencies, at the drawn time."""
        assert _is_acyclic(deps), f"generated a cyclic graph {deps!r}"
        aligned = grid_start(self.tick)
        tasks = [Task(id=t, title=f"task {t}", deps=deps[t]) for t in TASK_IDS]
        self._begin(tasks, aligned + start_ticks * self.tick)

    def _begin(self, tasks: Sequence[Task], start: datetime) -> None:
        """Make the board of ``tasks`` on a manual clock at ``start`` (on the wall clock: now)
        and check its snapshot."""
        self.tasks = tuple(tasks)
        for task in tasks:  # a lease the board starts with has a holder too
            if task.lease is not None:
                until = task.lease.until
                self._untils[task.lease.token] = None if until is None else as_utc(until)
        self.clock: Clock = SystemClock() if self.wall else ManualClock(start)
        self.start_time = self.clock.now()
        try:
            made, board, self._driver = make_driven(
                self.make_board, (list(tasks), self.clock), type(self).call_timeout
            )
        except Exception as exc:
            _raise_fault(self._fault(exc, None, "make_board(tasks, clock)"))
        self.made_board = made
        if not isinstance(made, Board):
            raise TypeError(
                f"{type(self).__qualname__}.make_board returned {made!r}, which is not a "
                "Board (it needs list_tasks, claim, release and complete)"
            )
        self.board = board
        self.renewing = isinstance(board, RenewingBoard)
        self.failing = isinstance(board, FailingBoard)
        self.model = BoardModel.start(
            tasks, policy=type(self).expired_lease_policy, resolution=self.tick
        )
        self._observe(None)

    # -- rules: the operations -----------------------------------------------------------------

    @rule(
        target=leases,
        task=_Choice(TASK_IDS),
        agent=_Choice(AGENTS),
        ttl_ticks=TTL_TICKS,
    )
    def claim(self, task: str, agent: str, ttl_ticks: int) -> Any:
        """Claim a task for an agent, for ``ttl_ticks`` clock ticks (0: no expiry)."""
        outcome = self._perform(Call(Op.CLAIM, task, agent=agent, ttl=ttl_ticks * self.ttl_unit))
        if outcome.task is None or outcome.task.lease is None or not outcome.ok:
            return self._no_new_lease(task)
        lease = outcome.task.lease
        label = self._labels[lease.token]
        return LeaseRef(label, task, lease.token, lease.fence, agent)

    def _no_new_lease(self, task_id: str) -> Any:
        """What a claim that returned no lease adds to the ``leases`` bundle: nothing, or on the
        wall clock the task's latest lease (one never issued if it has none). On the wall clock
        an outcome may differ between runs of one example; what Hypothesis draws may not."""
        if not self.wall:
            return multiple()
        latest = next((x for x in reversed(self.model.issued) if x.task_id == task_id), None)
        if latest is None:
            return LeaseRef("never issued", task_id, NEVER_ISSUED, 0, "")
        return LeaseRef(
            self._label(latest.token), task_id, latest.token, latest.fence, latest.agent
        )

    @rule(target=leases, lease=leases, same_agent=BOOLEANS, ttl_ticks=TTL_TICKS)
    def reclaim(self, lease: LeaseRef, same_agent: bool, ttl_ticks: int) -> Any:
        """Claim the task of an earlier lease again, as the same agent name or another one:
        a takeover once that lease has expired, and a same-name holder with a new token."""
        agent = lease.agent if same_agent else ("a2" if lease.agent == "a1" else "a1")
        return self.claim(lease.task_id, agent, ttl_ticks)

    @precondition(lambda self: self.renewing)
    @rule(task=_Choice(TASK_IDS), ttl_ticks=RENEW_TTL_TICKS, holder=_Choice(HOLDERS))
    def renew(self, task: str, ttl_ticks: int, holder: str) -> None:
        """Renew ``task`` as its latest lease's holder, or as the holder before (stale)."""
        token = self._token_of(task, holder) or NEVER_ISSUED
        self._perform(Call(Op.RENEW, task, token=token, ttl=ttl_ticks * self.ttl_unit))

    @rule(task=_Choice(TASK_IDS), holder=_Choice(HOLDERS))
    def release(self, task: str, holder: str) -> None:
        """Release ``task`` as its latest lease's holder, or as the holder before (stale)."""
        self._perform(Call(Op.RELEASE, task, token=self._token_of(task, holder) or NEVER_ISSUED))

    @rule(task=_Choice(TASK_IDS), holder=_Choice(HOLDERS))
    def complete(self, task: str, holder: str) -> None:
        """Complete ``task`` as its latest lease's holder, or as the holder before (stale)."""
        self._perform(Call(Op.COMPLETE, task, token=self._token_of(task, holder) or NEVER_ISSUED))

    @precondition(lambda self: self.failing)
    @rule(task=_Choice(TASK_IDS), holder=_Choice(HOLDERS))
    def fail(self, task: str, holder: str) -> None:
        """Fail ``task`` as its latest lease's holder, or as the holder before (stale)."""
        self._perform(Call(Op.FAIL, task, token=self._token_of(task, holder) or NEVER_ISSUED))

    @rule(op=_Choice(TOKEN_OPS), lease=leases, ttl_ticks=TTL_TICKS)
    def act_with_lease(self, op: str, lease: LeaseRef, ttl_ticks: int) -> None:
        """Act on a lease's task with its token: often a stale holder acting late."""
        if self._supports(op):
            self._perform(
                Call(Op(op), lease.task_id, token=lease.token, ttl=ttl_ticks * self.ttl_unit)
            )

    @rule(
        op=_Choice(TOKEN_OPS),
        task=_Choice(TASK_IDS),
        how=_Choice(WRONG_TOKENS),
    )
    def act_with_wrong_token(self, op: str, task: str, how: str) -> None:
        """Act on ``task`` with a token that is not its latest lease's: another task's latest
        token, or a forgery of its own (close to the real one, as a buggy compare would see)."""
        if not self._supports(op):
            return
        if how == "another task's":
            others = TASK_IDS[TASK_IDS.index(task) + 1 :] + TASK_IDS[: TASK_IDS.index(task)]
            token = next((t for o in others if (t := self._token_of(o, "latest"))), NEVER_ISSUED)
            self._perform(Call(Op(op), task, token=token, ttl=self.ttl_unit))
            return
        real = self._token_of(task, "latest")
        if real:
            ref = token_ref(real, self._labels, forgery=how, of=real)
        else:
            real, ref = NEVER_ISSUED, ""
        self._perform(Call(Op(op), task, token=forge(real, how), ttl=self.ttl_unit), ref)

    @rule(
        op=_Choice(("claim", *TOKEN_OPS)),
        task=_Choice(TASK_IDS),
        unknown=BOOLEANS,
    )
    def misuse(self, op: str, task: str, unknown: bool) -> None:
        """Any operation on an id no task has (``unknown``); else a claim with an empty agent,
        or an action with a token nobody issued."""
        if not self._supports(op):
            return
        agent = "a1" if unknown else ""
        self._perform(
            Call(
                Op(op),
                UNKNOWN_TASK_ID if unknown else task,
                agent=agent,
                token="",
                ttl=self.ttl_unit,
            )
        )

    def _token_of(self, task_id: str, holder: str) -> str:
        # The task's leases, newest first: the latest (current, if the task is claimed) and
        # the one before it (stale). A task never claimed has no token: use one never issued.
        tokens = [x.token for x in reversed(self.model.issued) if x.task_id == task_id]
        if not tokens:
            return ""
        return tokens[1] if holder == "previous" and len(tokens) > 1 else tokens[0]

    # -- rules: the clock ----------------------------------------------------------------------

    @rule(ticks=st.integers(1, 5))
    def advance_clock(self, ticks: int) -> None:
        """Move the clock forward by a few ticks (long leases end by ``at_expiry``); on the wall
        clock, sleep a few TTL units and a half, to land between expiry boundaries rather than
        on one (``at_expiry`` covers the boundaries), so the example replays alike."""
        step = ticks * self.ttl_unit + (self.ttl_unit / 2 if self.wall else timedelta(0))
        self._move_clock(self.clock.now() + step, "")

    # -- rules: the nemesis (SPEC 9) -------------------------------------------------------------

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The nemesis rules exist only on classes with the hooks: on every other class a
        # rule that is never enabled would still cost each step a rejected draw.
        super().__init_subclass__(**kwargs)
        for kind in cls.defined_nemesis():
            if kind not in cls.__dict__:
                setattr(cls, kind, _NEMESIS_RULES[kind])

    def _nemesis_ready(self, kind: str) -> bool:
        # No spacing rule: a precondition on the trace would keep the shrinker from
        # deleting the steps before a restart. Rare enough: one rule of many.
        return kind in self.nemesis_steps

    def run_nemesis(self, kind: str) -> None:
        """Run the nemesis hook ``kind`` (``"restart"`` or ``"drop"``) as a step of the trace.

        After a restart the snapshot is judged by SPEC 9 (see :meth:`restart_storage`) and
        the model goes on from it. After a drop nothing is read, so that the next call is
        the one that meets the dropped connection.
        """
        assert self._driver is not None
        hook = NEMESIS_HOOKS[kind]
        function = getattr(self, hook)
        if inspect.iscoroutinefunction(function) and not is_async_board(self.made_board):
            # An async hook for a sync board: its own loop, under the same time limit.
            function = functools.partial(_run_coroutine, function)
        step = Step(len(self.trace) + 1, self.clock.now(), nemesis=kind)
        self.trace.append(step)
        try:
            returned = self._driver.call(function, self.made_board)
        except Exception as exc:
            _raise_fault(self._fault(exc, step, f"{hook}(board)"))
        if kind == "drop":
            self.transitions[("nemesis", "drop_connections", "ok")] += 1
            return
        if returned is not None:
            if not isinstance(returned, Board):
                raise TypeError(
                    f"{type(self).__qualname__}.restart_storage returned {returned!r}, which is "
                    "neither None nor a Board"
                )
            self.made_board, self.board = returned, driven(returned, self._driver)
        snapshot = self._snapshot(step)
        durable = type(self).durable
        try:
            self.model, lost = self.model.restart(snapshot, durable=durable)
        except ContractViolation as violation:
            raise self._report(violation, step) from None
        for task in self.model.tasks:
            if task.lease is not None:
                self._untils[task.lease.token] = task.lease.until
                self._given_up.discard(task.lease.token)
        self._given_up |= lost
        verdict = (
            "durable: the snapshot shows every acknowledged change"
            if durable
            else f"not durable: lost {', '.join(sorted(map(self._label, lost)))}"
            if lost
            else "not durable: no lease lost"
        )
        self.transitions[("nemesis", "restart_storage", "lost leases" if lost else "ok")] += 1
        self.trace[-1] = dataclasses.replace(step, note=verdict)
        self._observe(self.trace[-1], snapshot)

    # On the wall clock whether a lease is still ahead depends on timing, so the rule is always
    # enabled (Hypothesis needs the same rules enabled whenever an example replays).
    @precondition(lambda self: self.wall or bool(self._expiring()))
    @rule(
        target=leases,
        which=_Choice(range(len(TASK_IDS))),
        early=BOOLEANS,
        then=_Choice(AT_EXPIRY),
        agent=_Choice(AGENTS),
        ttl_ticks=TTL_TICKS,
    )
    def at_expiry(self, which: int, early: bool, then: str, agent: str, ttl_ticks: int) -> Any:
        """Move the clock to exactly a live lease's ``until`` (or one tick before it), then act
        on its task at once: claim it as ``agent``, act with the lease's token, or nothing.

        Boundary bugs live exactly here, so the jump and the action are one step. On the
        wall clock, sleep to just before or just after ``until``, by the skew, the
        resolution and (before) the calls' latency, so the call's window is on one side."""
        expiring = self._expiring()
        if not expiring:  # the wall clock only: no lease ends soon, so no boundary to land on
            return self.claim(TASK_IDS[which], agent, ttl_ticks) if then == "claim" else multiple()
        task_id, token, until = expiring[which % len(expiring)]
        if self.wall:
            latency = max(self._latencies, default=timedelta(milliseconds=1))
            before = self.skew + self.tick + 2 * latency + WALL_LANDING
            after = self.skew + self.tick + WALL_LANDING
            target = until - before if early else until + after
            where = (
                f"{format_duration(before)} before" if early else f"{format_duration(after)} after"
            )
        else:
            target = until - self.tick if early else until
            where = "one tick before" if early else "exactly at"
        self._move_clock(max(target, self.clock.now()), f"to {where} {self._label(token)}'s until")
        if then == "claim":
            return self.claim(task_id, agent, ttl_ticks)
        if then != "nothing" and self._supports(then):
            self._perform(Call(Op(then), task_id, token=token, ttl=ttl_ticks * self.ttl_unit))
        return multiple()

    def _expiring(self) -> list[tuple[str, str, datetime]]:
        now = self.clock.now()
        # On the wall clock, waiting is real: only leases that end within the example.
        last = now + WALL_LONGEST_WAIT * self.ttl_unit if self.wall else None
        return [
            (t.id, t.lease.token, t.lease.until)
            for t in self.model.tasks
            if t.lease is not None
            and t.lease.until is not None
            and now < t.lease.until
            and (last is None or t.lease.until <= last)
        ]

    # -- the checks ----------------------------------------------------------------------------

    def _supports(self, op: str) -> bool:
        return (op != Op.RENEW or self.renewing) and (op != Op.FAIL or self.failing)

    def _move_clock(self, target: datetime | None, note: str) -> None:
        before = self.clock.now()
        if target is not None:
            self._clock_to(target)
        moved = self.clock.now() - before
        self.trace.append(Step(len(self.trace) + 1, before, advance=moved, note=note))

    def _clock_to(self, target: datetime) -> None:
        """Set the manual clock to ``target``; on the wall clock, sleep until it is reached."""
        if isinstance(self.clock, ManualClock):
            self.clock.set(target)
        else:
            sleep_until(self.clock, target)

    def _perform(self, call: Call, ref: str = "") -> Outcome:
        """Call the board, judge the outcome with the model, then check the snapshot.

        ``ref`` is the replayable reference of the call's token (see :class:`Step`);
        by default the label of the lease it belongs to, or the literal token.
        """
        assert self.board is not None
        now = self.clock.now()
        # On the wall clock what is allowed depends on when the call returns (SPEC 7).
        allowed = None if self.wall else self.model.expect(call, now)
        if not ref and call.op is not Op.CLAIM:
            ref = token_ref(call.token, self._labels)
        board_exc: Exception | None = None
        try:
            outcome = Outcome.returned(call.invoke(self.board))
        except Exception as exc:
            board_exc = exc
            outcome = Outcome.raised(exc)
        window = None
        if self.wall:
            returned = self.clock.now()
            self._latencies.append(returned - now)
            window = Window.around(now, returned, self.skew)
        when: When = now if window is None else window
        if allowed is None:
            allowed = self.model.expect(call, when)
        transition = self._transition(call, when)
        fault = board_exc if board_exc is not None and is_infrastructure_fault(board_exc) else None
        tolerated = fault is not None and self._tolerates(fault)
        self.transitions[(*transition, "fault" if fault else outcome.error or "ok")] += 1
        note = "infrastructure fault: the call's effect is unknown" if tolerated else ""
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
                _raise_fault(self._fault(fault, step))
            return self._settle(call, when, step, fault)
        self._label_lease(outcome)
        try:
            self.model = self.model.advance(call, when, outcome)
        except ContractViolation as violation:
            raise self._report(violation, step) from board_exc
        # The exception's traceback holds this frame, which holds the exception: a cycle only
        # the garbage collector would free, with every frame of the board's call in it.
        board_exc = None
        self._remember_untils(call, outcome)
        self._observe(step)
        return outcome

    def _tolerates(self, fault: Exception) -> bool:
        # A call that timed out, here or in the driver, may still land later (a query the
        # server goes on with), so no snapshot can settle it: timeouts end the run.
        tolerated = type(self).tolerate_faults
        if isinstance(tolerated, bool):
            return tolerated and not isinstance(fault, TimeoutError)
        return isinstance(fault, tolerated) and not isinstance(fault, TimeoutError)

    def _settle(self, call: Call, now: When, step: Step, fault: Exception) -> Outcome:
        """Tolerant mode, after ``call`` met an infrastructure fault: adopt the snapshot if it
        shows the board without the call or with it applied; returns what it returned if
        applied, else the fault's outcome."""
        snapshot = self._snapshot(step)
        try:
            self.model, applied = self.model.settle(call, now, snapshot)
        except ContractViolation as violation:
            raise self._report(violation, step) from fault
        if applied is not None:
            self._label_lease(applied)
            self._remember_untils(call, applied)
        lease = applied.task.lease if applied is not None and applied.task is not None else None
        verdict = (
            "the snapshot shows it not applied"
            if applied is None
            else f"the snapshot shows it applied ({self._label(lease.token)})"
            if lease is not None
            else "the snapshot shows it applied"
        )
        step = dataclasses.replace(step, note=f"infrastructure fault tolerated: {verdict}")
        self.trace[-1] = step
        self._observe(step, snapshot)
        assert step.outcome is not None
        return step.outcome if applied is None else applied

    def _label_lease(self, outcome: Outcome) -> None:
        if outcome.ok and outcome.task is not None and outcome.task.lease is not None:
            token = outcome.task.lease.token
            if isinstance(token, str) and token not in self._labels:
                self._labels[token] = f"L{len(self._labels) + 1}"

    def _transition(self, call: Call, when: When) -> tuple[str, str]:
        # (task state, operation): the state as the model sees it at ``when``, the operation
        # with the kind of token it carries, for the fuzzer's transition coverage.
        task = self.model.task(call.task_id)
        instants = self.model.instants(call, when) if isinstance(when, Window) else (when,)
        if task is None:
            state = "unknown id"
        elif task.state is State.CLAIMED and task.lease is not None:
            until = task.lease.until
            now = instants[0] if instants else when.latest  # type: ignore[union-attr]
            expiry = "live" if is_live(task.lease, now) else "expired"
            state = (
                "claimed, at until" if until == now or len(instants) > 1 else f"claimed, {expiry}"
            )
        else:
            state = str(task.state)
        if call.op is Op.CLAIM:
            return state, "claim" if call.agent else "claim (empty agent)"
        issued = self.model.lease_of(call.token)
        if task is not None and task.lease is not None and call.token == task.lease.token:
            kind = "current"
        elif issued is None:
            kind = "forged"
        elif issued.task_id != call.task_id:
            kind = "other task's"
        else:
            kind = "stale"
        return state, f"{call.op} ({kind} token)"

    def _remember_untils(self, call: Call, outcome: Outcome) -> None:
        if not outcome.ok:
            return
        if call.op in (Op.CLAIM, Op.RENEW):
            task = self.model.task(call.task_id)
            assert task is not None
            assert task.lease is not None
            self._untils[task.lease.token] = task.lease.until
        else:
            self._given_up.add(call.token)

    def _snapshot(self, step: Step | None) -> list[Task]:
        """``list_tasks()``; in tolerant mode, read again after an infrastructure fault."""
        assert self.board is not None
        attempts = SNAPSHOT_ATTEMPTS if type(self).tolerate_faults else 1
        for attempt in range(1, attempts + 1):
            try:
                return list(self.board.list_tasks())
            except BoardError as exc:
                violation = ContractViolation(
                    "SPEC 3.7", "list_tasks() to return a snapshot", f"raised {exc!r}"
                )
                raise self._report(violation, step) from exc
            except Exception as exc:
                if attempt == attempts or not self._tolerates(exc):
                    after = "" if step is None else f" after step {step.index}"
                    _raise_fault(self._fault(exc, step, f"list_tasks(){after}"))
        raise AssertionError("unreachable")  # pragma: no cover

    def _observe(self, step: Step | None, snapshot: list[Task] | None = None) -> None:
        if snapshot is None:
            snapshot = self._snapshot(step)
        try:
            self.model = self.model.reconcile(snapshot)
            # check() is a pure function of the snapshot: an equal snapshot (often, after a
            # rejected call) has the same problems, none, as the last one checked.
            problems = [] if snapshot == self._checked_snapshot else check(snapshot)
            if problems:
                raise ContractViolation(
                    "SPEC 4 and 6",
                    "check(list_tasks()) == [] after every step",
                    "listed a snapshot with problems: "
                    + "; ".join(f"{p.task!r} {p.code}: {p.text}" for p in problems),
                )
            self._checked_snapshot = snapshot
            self._check_live_holders()
        except ContractViolation as violation:
            raise self._report(violation, step) from None

    def _check_live_holders(self) -> None:
        # Independent of the model's snapshot: from the outcomes alone, who believes they hold
        # which task, live, right now (on the wall clock: at the last call's effect instant).
        now = self.model.floor if self.wall and self.model.floor else self.clock.now()
        holders: dict[str, list[str]] = {}
        for issued in self.model.issued:
            until = self._untils.get(issued.token)
            if issued.token not in self._given_up and (until is None or now < until):
                holders.setdefault(issued.task_id, []).append(issued.token)
        for task_id, tokens in holders.items():
            if len(tokens) > 1:
                raise ContractViolation(
                    "SPEC 6",
                    f"at most one live holder of task {task_id!r}",
                    "let " + " and ".join(map(self._label, tokens)) + " hold it live at once",
                )

    def _report(self, violation: ContractViolation, step: Step | None) -> ContractViolation:
        where = "the initial snapshot" if step is None else f"step {step.index}"
        lines = [f"contract violation at {where}", ""]
        if step is not None and step.call is not None:
            lines.append(f"  step      {render_step(step, self.start_time, self._label).strip()}")
        if step is not None and step.window is not None:
            lines.append(f"  window    {self._render_window(step.window)}")
        lines += [
            f"  clause    {violation.clause}",
            f"  expected  {violation.expected}",
            f"  board     {violation.observed}",
        ]
        report = ContractViolation(violation.clause, violation.expected, violation.observed)
        verdict = (violation.clause, violation.expected, violation.observed)
        self._finish(report, lines, step, verdict)
        return report

    def _render_window(self, window: Window) -> str:
        start = self.start_time
        earliest, latest = window.earliest - start, window.latest - start
        return (
            f"+{format_offset(earliest)} .. +{format_offset(latest)} (SPEC 7: the call "
            f"took effect at one instant of it, on the wall clock with skew "
            f"{format_duration(self.skew)})"
        )

    def _fault(self, exc: Exception, step: Step | None, during: str = "") -> InfrastructureFault:
        """The report of an infrastructure fault in ``step``'s call, or ``during`` something
        else (a ``list_tasks()`` or ``make_board``)."""
        timeout = isinstance(exc, CallTimeoutError)
        what = f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins.")
        where = during or ("set-up" if step is None else f"step {step.index}")
        lines = [
            f"infrastructure fault at {where}: "
            + ("a call hung" if timeout else f"the board raised {what}, not a contract outcome"),
            "",
        ]
        if not during and step is not None and step.call is not None:
            lines.append(f"  step      {render_step(step, self.start_time, self._label).strip()}")
            lines.append("  allowed   " + " or ".join(str(a) for a in step.allowed))
        lines.append(f"  fault     {what}: {exc}")
        frames = [] if timeout else host_frames(exc)
        if frames:
            lines.append("  raised at (the host's code, innermost last):")
            lines += frames
        if timeout:
            meaning = (
                "the call did not return within call_timeout; if the store is just slow, "
                "raise it (call_timeout = timedelta(seconds=...))"
            )
        elif during.startswith("list_tasks") and self._tolerates(exc):
            meaning = f"the board failed {SNAPSHOT_ATTEMPTS} reads in a row: the run cannot go on"
        else:
            meaning = (
                "the storage, its driver or the network failed (or the host raised an "
                "exception the contract does not name): not a contract violation"
            )
            if not during:
                meaning += ", and the call's effect is unknown"
            if not during or during.startswith("list_tasks"):
                meaning += self._how_to_tolerate(exc)
        lines.append(f"  meaning   {meaning}")
        report = InfrastructureFault("", exc)
        self._hung = self._hung or timeout
        clause = "infrastructure fault"
        self._finish(report, lines, step, (clause, "no infrastructure fault", f"raised {exc!r}"))
        return report

    def _how_to_tolerate(self, exc: Exception) -> str:
        tolerated = type(self).tolerate_faults
        if tolerated is False:
            return ". To fuzz through such faults, set tolerate_faults = True"
        if isinstance(exc, TimeoutError):
            return ". Timeouts are never tolerated: the call may still land later"
        return f". To fuzz through it, add {type(exc).__qualname__} to tolerate_faults"

    def _finish(
        self,
        report: ContractViolation | InfrastructureFault,
        lines: list[str],
        step: Step | None,
        verdict: tuple[str, str, str],
    ) -> None:
        """Add the trace to a report's lines, write the trace file, and set the message."""
        if hasattr(self, "start_time"):
            clock = (
                f"wall clock from {self.start_time.isoformat()}, skew "
                f"{format_duration(self.skew)}, TTL unit {format_duration(self.ttl_unit)}"
                if self.wall
                else f"clock starts at {self.start_time.isoformat()}"
            )
            lines += [
                "",
                f"trace ({clock}, resolution {format_duration(self.tick)}; L<n> is the n-th "
                "lease a claim returned):",
            ]
            for earlier in self.trace:
                marker = ">>" if step is not None and earlier.index == step.index else ""
                lines.append(render_step(earlier, self.start_time, self._label, marker=marker))
        report.step = step
        report.trace = tuple(self.trace)
        if hasattr(self, "start_time"):
            index = None if step is None else step.index
            report.recording = self.to_trace(Verdict(index, *verdict, "\n".join(lines)))
        self._failure = report
        _FIRST_FAILURES.setdefault(type(self), report)
        hung = isinstance(report, InfrastructureFault) and isinstance(
            report.exception, CallTimeoutError
        )
        directory = self._failure_record_dir(final_only=not hung)
        if directory and hasattr(self, "start_time"):
            lines += ["", _record(report, report.recording, directory)]
        report.args = ("\n".join(lines),)

    def _failure_record_dir(self, *, final_only: bool = True) -> str | None:
        """Where to write a failure's records: the trace dir, in Hypothesis's final replay of
        the shrunk failure only (not for the many failures met while shrinking), unless the
        failure ends the run unshrunk (a hang)."""
        directory = type(self).trace_dir_in_use()
        return directory if directory and (_in_final_replay() or not final_only) else None

    @classmethod
    def trace_dir_in_use(cls) -> str | None:
        """Where failing traces go: ``trace_dir``, else ``TASKBOARD_TRACE_DIR``, else nowhere."""
        return cls.trace_dir or os.environ.get(TRACE_DIR_ENV) or None

    def to_trace(self, verdict: Verdict | None = None) -> Trace:
        """This run so far as a :class:`Trace`, with the verdict if there is one."""
        cls = type(self)
        target = (
            f"{cls.__module__}:{cls.__qualname__}" if cls.trace_target is None else cls.trace_target
        )
        return Trace(
            start=self.start_time,
            resolution=self.tick,
            policy=cls.expired_lease_policy,
            tasks=self.tasks,
            steps=tuple(self.trace),
            verdict=verdict,
            target=target,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
            clock_mode=cls.clock_mode,
            skew=cls.clock_skew,
        )

    def _label(self, token: str) -> str:
        return self._labels.get(token, repr(token))
