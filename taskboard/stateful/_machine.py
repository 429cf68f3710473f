"""BoardMachine: Hypothesis drives a host's Board and the reference model side by side.

The machine is the rules Hypothesis draws and the hooks a host defines; each rule hands its
call to the :class:`~taskboard.stateful._session.Session` of the example, which makes it and
judges it.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
)

from taskboard._clock import Clock, ClockMode
from taskboard._contract import Board, Task
from taskboard.model import BoardModel, ExpiredLeasePolicy, Step
from taskboard.stateful._command import exec_machine
from taskboard.stateful._config import (
    MachineConfig,
    chosen_nemesis,
    defined_nemesis,
    hook_defined,
    hook_stub,
)
from taskboard.stateful._generation import (
    TASK_IDS,
    dependency_graphs,
    grid_start,
    is_acyclic,
)
from taskboard.stateful._hypothesis import (
    key_database_by,
    state_machine_test_case,
    use_rule_draws,
)
from taskboard.stateful._limits import LeaseLimits
from taskboard.stateful._parallel import parallel_test_case
from taskboard.stateful._reports import failures_reported
from taskboard.stateful._session import Session, end_example
from taskboard.stateful._session_options import session_run
from taskboard.stateful._settings import SETTINGS, default
from taskboard.stateful._steps import LEASES, machine_rules
from taskboard.stateful._tracefile import Trace, Verdict

__all__ = ["BoardFactory", "BoardMachine", "close_own"]

#: Makes a fresh board of the given tasks on the given clock (an ``async def`` will do).
BoardFactory = Callable[[Sequence[Task], Clock], Any]

#: The class attributes :meth:`BoardMachine.for_board` takes from a factory that has them.
_FACTORY_ATTRIBUTES = tuple(setting.name for setting in SETTINGS if setting.for_board)


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


def _async_make_board(factory: Callable[..., Any]) -> Callable[..., Any]:
    async def make_board(self: BoardMachine, tasks: Sequence[Task], clock: Clock) -> Any:
        return await factory(tasks, clock)

    return make_board


def _machine_for_board(
    base: type[BoardMachine],
    factory: BoardFactory,
    *,
    close: Callable[[Any], Any] | None,
    open_client: Callable[[Any], Any] | None,
    close_client: Callable[[Any], Any] | None,
    restart_storage: Callable[[Any], Any] | None,
    drop_connections: Callable[[Any], Any] | None,
    attributes: dict[str, Any],
) -> type[BoardMachine]:
    """:meth:`BoardMachine.for_board`: a subclass of ``base`` whose boards come from
    ``factory``, with the given closer, client and nemesis hooks, and class attributes."""
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
    machine = type(f"{name}Machine", (base,), namespace)
    # Hypothesis keys its example database by a digest of the machine's source, which
    # every such class shares: the factory's own name tells them apart.
    key_database_by(machine, where.encode())
    return machine


class _RunOfTestCase:
    """A run of a machine's ``TestCase``: as the test session's options say (``pytest
    --taskboard-seed``, ``--taskboard-budget``), with its failures reported. A class, not a
    generator, so that the traceback ``failures_reported`` gives a failure stays."""

    def __init__(self, machine: type[BoardMachine], test: Any) -> None:
        self.session = session_run(machine, test.settings)
        self.reported = failures_reported(machine)
        self.test = test

    def __enter__(self) -> None:
        self.test.settings = self.session.__enter__()
        self.reported.__enter__()

    def __exit__(self, kind: type[BaseException] | None, error: Any, tb: Any) -> bool:
        __tracebackhide__ = True
        try:
            self.reported.__exit__(kind, error, tb)  # raises a failure as its report
        finally:
            stopped = self.session.__exit__(kind, error, tb)
        return stopped


class _TestCaseProperty:
    """``MyMachine.TestCase``: Hypothesis's test case of the machine, whose failures are
    reported as what they were (see :func:`failures_reported`)."""

    def __get__(self, obj: object, owner: type[BoardMachine]) -> Any:
        case = state_machine_test_case(owner, lambda test: _RunOfTestCase(owner, test))
        # So that `taskboard fuzz` and `replay` take the TestCase as a target.
        case._taskboard_machine = owner
        return case

    def __set__(self, obj: object, value: object) -> None:
        raise AttributeError("Cannot set TestCase")


class _ParallelTestCaseProperty:
    """``MyMachine.ParallelTestCase``: the parallel mode as a unittest case, like ``TestCase``."""

    def __get__(self, obj: object, owner: type[BoardMachine]) -> Any:
        return parallel_test_case(owner)


class BoardMachine(RuleBasedStateMachine):
    """Checks a host's Board against the reference model, step by step.

    Subclass it and define :meth:`make_board`; ``TestMyBoard = MyMachine.TestCase`` then runs
    it under pytest or unittest. Hypothesis interleaves claims, renews, releases,
    completions, failures, stale and forged tokens, unknown ids and clock jumps (including to
    exactly a lease's expiry and one tick before it). After every step the machine checks the
    outcome against the model, the whole ``list_tasks()`` snapshot task by task, ``check()``,
    fence growth, token freshness, that no two holders are live at once, and ``seq`` (SPEC
    section 6). A failure raises :class:`taskboard.model.ContractViolation` with the step,
    what the contract expected and why, what the board did, and the trace that led there.

    Class attributes a host may set:

    * ``clock_resolution``: the smallest time step the store keeps (default 1 ms, what Redis
      ``PX`` keeps). Start times, TTLs and clock jumps are drawn as multiples of it (and one
      TTL as half of it), so expiry boundaries stay exact; an ``until`` off by less than one
      resolution is accepted.
    * ``clock_mode``: SPEC 7, where the board's time comes from. ``"manual"`` (default):
      ``make_board`` gets a :class:`~taskboard.ManualClock` that only the machine moves, and
      every call is judged at one exact instant. ``"wall"``: for boards that keep time on
      their own server (Redis ``PX``, SQL ``now()``) or call ``time.time()``; ``make_board``
      gets a :class:`~taskboard.SystemClock` the board may ignore, clock rules sleep, and
      each call is judged on its window ``[before - clock_skew, after + clock_skew]``. An
      off-by-one at exactly ``until`` inside that window cannot be seen: prefer ``"manual"``
      where the board can take an injected clock. ``"virtual"``: as ``"manual"``, and every
      move of the clock also moves the clock of the machine's ``server``
      (``server = taskboard.servers.Redis()`` or ``.Postgres()``, Linux, whose ``url`` the
      board connects to; ``.NoServer()`` for none), and each board call reads it as this
      process's time, so a store that keeps its own time is checked at exact instants;
      each example starts on an emptied server, and an ``until`` up to one resolution past
      ``now + ttl`` is accepted (a store keeps a key through its deadline tick).
    * ``clock_skew``: in wall mode, how far the board's clock may be from the machine's
      (default 1 ms; zero for a board that reads the machine's own clock).
    * ``client_clock_skew``: in wall mode, how far apart the clocks of the hosts your
      clients run on may be (default none). Each call's ``time.time()`` is then shifted by
      its agent's client's offset (``-skew``, ``+skew`` or none), while every call is still
      judged on the machine's clock: a library that judges expiry on the client is caught.
    * ``shortest_lease``: the shortest lease the store honours (default ``None``: any). TTLs
      and clock jumps are drawn as multiples of a unit no shorter (a Redlock's drift, a
      store that keeps whole seconds).
    * ``lease_limits``: what leases the store can hold, a
      :class:`~taskboard.stateful.LeaseLimits` (default ``None``: every lease SPEC 2
      describes): leases without expiry only, no renew to no expiry, a longest or shortest
      TTL, whole units only. The machine then asks for no other lease: a drawn TTL becomes
      the nearest one the store holds. A board that cannot hold a lease it is asked for may
      also say so by raising ``NotImplementedError`` from ``claim`` or ``renew`` (changing
      nothing; the protocol's ``unsupported``): the run learns the limit from it and asks for
      no such lease again, and ``taskboard fuzz`` reports what was declared and refused.
    * ``keep_alive_interval``: in wall mode, the board renews each lease by itself (a
      library's keep-alive or watchdog), at least this often, until its holder releases,
      completes or fails it (default ``None``: it does not). Leases then never expire, their
      ``until`` and ``seq`` may move on their own, and after each release the machine waits
      one interval: a keep-alive that outlives its lease is caught on that step.
    * ``expired_lease_policy``: SPEC 3.4, what the board does with
      release/complete/fail by the current token of an expired lease nobody has
      taken over: ``"either"`` (default, both accepted), ``"accept"`` or ``"reject"``.
    * ``call_timeout``: how long one board call (``make_board`` and ``close_board``
      included) may take before it is cut off and reported as an
      :class:`InfrastructureFault` (default 10 s; ``None``: no limit). A sync board is cut
      off by ``SIGALRM``, so only in the main thread; an async board's call is cancelled.
    * ``tolerate_faults``: fuzz through infrastructure faults (default off). After a call
      fails with one, its effect is unknown: the machine reads ``list_tasks()`` and accepts
      the snapshot only if it matches the board without the call or with it applied, then
      goes on from there. ``True`` tolerates every fault; a tuple of exception classes
      (``(ConnectionError, psycopg.OperationalError)``) only those, so a ``KeyError`` from
      the host's own code is still reported. A timeout (any ``TimeoutError``) still ends it.
    * ``parallel_processes``: SPEC 8, run each thread of a parallel program in an OS process
      of its own, on a client it opens by unpickling the board (default off; ``taskboard
      fuzz --processes``; see docs/clients.md).
    * ``race_scheduling``: how the threads of a parallel program interleave. ``"os"`` (the
      default) runs them at once, as the operating system schedules them; ``"controlled"``
      runs them one at a time, switching only at their round trips to the store (sqlite3
      statements, redis-py commands, sync or ``redis.asyncio``, psycopg statements,
      ``taskboard.races.yield_point`` and ``async_yield_point``), in an order Hypothesis
      draws, shrinks and replays exactly. A board with no such point (an async one on
      another client, one in processes) races as with ``"os"``; see docs/races.md.
    * ``race_exploration``: how a controlled race's drawn data picks who goes on at each
      point. ``"random"`` (the default): a drawn choice at each point, shrinking to round
      robin. ``"pct"`` (probabilistic concurrency testing): drawn priorities, the highest
      one that may go on goes on, and ``pct_depth - 1`` drawn change points, before each of
      which the thread that ran last drops below every other. The picks are recorded, so a
      replay is exact either way; see docs/races.md.
    * ``pct_depth``: with ``race_exploration = "pct"``, the depth of race aimed at, from 1
      (strict priorities, no change point) to 10 (default 3). A race that needs ``d``
      ordering constraints is found with probability at least ``1 / (n * k ** (d - 1))``
      per run (``n`` threads, ``k`` points) at depth ``d``.
    * ``answers_vary``: the board may answer the same steps differently from one run to the
      next where SPEC leaves it a choice (SPEC 3.4 decided per call, a reaper thread that
      ends expired leases when it gets to them). Default ``False``: the rules then draw
      from what the board answered, which Hypothesis needs to repeat on a replay; ``True``
      makes the draws independent of answers, as on the wall clock. A run that meets such a
      board without it stops with :class:`~taskboard.stateful.AnswersVaried`; ``taskboard
      fuzz`` and ``BoardContract`` then go on with it set, and say so.
    * ``durable``: SPEC 9, whether the board keeps everything it acknowledged across
      :meth:`restart_storage` (default ``True``). ``False``: after a restart it may show, per
      task, any state it held since the last restart; fences and tokens never repeat.
    * ``nemesis``: which of the defined nemesis hooks run as rules, ``"restart"`` and
      ``"drop"`` (default ``None``: every defined hook; ``()``: none).
    * ``trace_dir``: where the shrunk failing trace is written as JSON (default ``None``: the
      ``TASKBOARD_TRACE_DIR`` environment variable; no trace is written if it is unset).
    * ``trace_target``: ``module:Name`` recorded in trace files as what to replay against
      (default ``None``: this class; ``""`` records none, and ``taskboard replay`` then
      needs ``--board``).

    The attributes are read once per example into :attr:`config` (a
    :class:`~taskboard.stateful._config.MachineConfig`), and checked there. Each is one
    record of :data:`~taskboard.stateful._settings.SETTINGS`, which says how it travels
    (from a factory, a BoardContract, a ``taskboard fuzz`` option, a trace file).

    Async boards need no wrapper: each example runs on an event loop of its own, from before
    ``make_board`` to after ``close_board`` (either may be ``async def``); clients that bind
    to a loop must be made in ``make_board``.
    """

    # The settings (docstring above), typed here; their defaults are the table's.
    clock_resolution: ClassVar[timedelta] = default("clock_resolution")
    clock_mode: ClassVar[ClockMode] = default("clock_mode")
    clock_skew: ClassVar[timedelta] = default("clock_skew")
    client_clock_skew: ClassVar[timedelta] = default("client_clock_skew")
    shortest_lease: ClassVar[timedelta | None] = default("shortest_lease")
    lease_limits: ClassVar[LeaseLimits | None] = default("lease_limits")
    keep_alive_interval: ClassVar[timedelta | None] = default("keep_alive_interval")
    expired_lease_policy: ClassVar[ExpiredLeasePolicy] = default("expired_lease_policy")
    call_timeout: ClassVar[timedelta | None] = default("call_timeout")
    tolerate_faults: ClassVar[bool | tuple[type[Exception], ...]] = default("tolerate_faults")
    parallel_processes: ClassVar[bool] = default("parallel_processes")
    race_scheduling: ClassVar[str] = default("race_scheduling")
    race_exploration: ClassVar[str] = default("race_exploration")
    pct_depth: ClassVar[int] = default("pct_depth")
    answers_vary: ClassVar[bool] = default("answers_vary")
    durable: ClassVar[bool] = default("durable")
    nemesis: ClassVar[tuple[str, ...] | None] = default("nemesis")
    trace_dir: ClassVar[str | None] = default("trace_dir")
    trace_target: ClassVar[str | None] = default("trace_target")

    leases = LEASES
    TestCase = _TestCaseProperty()
    ParallelTestCase = _ParallelTestCaseProperty()

    #: The session class each example runs (a benchmark's stripped-down one, say).
    _session_class: ClassVar[type[Session]] = Session

    def __init__(self) -> None:
        super().__init__()
        #: The class attributes, read and checked once for this example.
        self.config = MachineConfig.of(type(self))
        use_rule_draws(self)
        #: The example's run of the board; ``None`` until ``start`` made the board.
        self.session: Session | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The nemesis rules exist only on classes with the hooks: on every other class a
        # rule that is never enabled would still cost each step a rejected draw.
        super().__init_subclass__(**kwargs)
        for name, rule_function in machine_rules(defined_nemesis(cls)).items():
            if not hasattr(cls, name):
                setattr(cls, name, rule_function)

    # -- the class, checked --------------------------------------------------------------------

    @classmethod
    def check_definition(cls) -> None:
        """Check the hooks and class attributes a subclass set, before anything runs.

        Raises:
            TypeError: ``make_board`` is missing, or a setting (``clock_resolution``,
                ``clock_mode``, ``clock_skew``, ``expired_lease_policy``, ``call_timeout``,
                ``tolerate_faults``, ``durable``, ``nemesis``, ...) has a value the machine
                cannot use.
        """
        MachineConfig.of(cls)

    @classmethod
    def defined_nemesis(cls) -> tuple[str, ...]:
        """The nemesis steps this class can run (SPEC 9): ``"restart"`` when it defines
        :meth:`restart_storage`, ``"drop"`` when it defines :meth:`drop_connections`."""
        return defined_nemesis(cls)

    @classmethod
    def nemesis_hooks(cls) -> tuple[str, ...]:
        """The nemesis steps this class runs as rules: ``nemesis``, or every defined one.

        Raises:
            TypeError: ``nemesis`` is not a tuple of ``"restart"`` and ``"drop"``, or names
                a step whose hook the class does not define.
        """
        return chosen_nemesis(cls, defined_nemesis(cls))

    @classmethod
    def has_clients(cls) -> bool:
        """True when the machine defines :meth:`open_client` (SPEC 8)."""
        return hook_defined(cls, "open_client")

    @classmethod
    def trace_dir_in_use(cls) -> str | None:
        """Where failing traces go: ``trace_dir``, else ``TASKBOARD_TRACE_DIR``, else nowhere."""
        return MachineConfig.of(cls).trace_dir

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
        ``clock_skew``, ``client_clock_skew``, ``shortest_lease``, ``keep_alive_interval``,
        ``expired_lease_policy`` and ``durable`` attributes are used when it has them, and
        ``attributes`` set any class attribute (``clock_mode="wall"``, say).
        Boards are closed with ``close(board)``, or with their own ``aclose()`` or
        ``close()`` method; an ``async def`` factory or closer is awaited on the
        machine's loop. Clients (SPEC 8) come from ``open_client(board)``, or from the
        factory's own ``open_client`` attribute (a board class's ``open_client`` method
        will do), and are closed with ``close_client(client)`` or their own ``aclose()``
        or ``close()``; with neither, every thread shares the board. ``restart_storage(board)``
        and ``drop_connections(board)`` are the nemesis hooks (SPEC 9), each may be
        ``async def``; set ``durable=False`` with them for a store that may lose
        acknowledged changes. A factory's own ``restart_storage`` and ``drop_connections``
        attributes (a board class's methods will do) are used as well.
        """
        return _machine_for_board(
            cls,
            factory,
            close=close,
            open_client=open_client,
            close_client=close_client,
            restart_storage=restart_storage,
            drop_connections=drop_connections,
            attributes=attributes,
        )

    @classmethod
    def for_command(
        cls, command: str | Sequence[str], *, timeout: float = 10.0, **attributes: Any
    ) -> type[BoardMachine]:
        """A machine class whose boards are child processes of ``command``, a board in any
        language served over the board protocol (SPEC 10, ``docs/protocol.md``).

        ``TestMyGoBoard = BoardMachine.for_command("./myboard").TestCase``. The command is
        split like a shell line and started once now, to hear its ``hello``: clients are
        more processes when it declares ``connect``, the nemesis steps are those it declares,
        and ``durable`` is its own. ``timeout`` bounds each answer, in seconds;
        ``attributes`` set class attributes as in :meth:`for_board`.

        Raises:
            taskboard.protocol.ExecStartError: the command does not start or answer ``hello``.
        """
        machine: type[BoardMachine] = exec_machine(cls, command, timeout=timeout, **attributes)
        return machine

    # -- hooks -------------------------------------------------------------------------------

    @hook_stub
    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Any:
        """Return a fresh, isolated Board holding ``tasks`` that reads time only from ``clock``.

        ``clock`` is a :class:`~taskboard.ManualClock`; with ``clock_mode = "wall"`` it is a
        :class:`~taskboard.SystemClock`, which a board keeping its own time may ignore.

        May be ``async def``, and the board's methods may be coroutines (see the class
        docstring for the event loop they run on).
        """
        raise NotImplementedError

    @hook_stub
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

    @hook_stub
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

    @hook_stub
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
        """End the example's session: hand the board to :meth:`close_board`, then stop the
        board's event loop.

        After a hung call the board is left alone (it may still be inside the call).
        A failing ``close_board`` is an infrastructure fault, or a note on the report
        already on its way.
        """
        end_example(self.session)

    # -- the run, as the hooks and subclasses see it -------------------------------------------

    @property
    def made_board(self) -> Any:
        """The board as :meth:`make_board` returned it (or ``restart_storage`` replaced it)."""
        return None if self.session is None else self.session.made_board

    @property
    def board(self) -> Board | None:
        """The board as the machine calls it (through its driver); ``None`` before ``start``."""
        return None if self.session is None else self.session.board

    @property
    def clock(self) -> Clock | None:
        """The clock the board was given; ``None`` before ``start``."""
        return None if self.session is None else self.session.clock

    @property
    def model(self) -> BoardModel | None:
        """The reference model as it stands after the last step; ``None`` before ``start``."""
        return None if self.session is None else self.session.model

    @property
    def trace(self) -> list[Step]:
        """Every step of the example so far."""
        return [] if self.session is None else self.session.trace

    @property
    def transitions(self) -> Counter[tuple[str, str, str]]:
        """How often each (task state, operation, outcome) transition ran in this example."""
        return Counter() if self.session is None else self.session.transitions

    def to_trace(self, verdict: Verdict | None = None) -> Trace:
        """This run so far as a :class:`Trace`, with the verdict if there is one."""
        return self._session.to_trace(verdict)

    def open_clients(self, count: int) -> list[tuple[Any, Board]]:
        """``count`` clients of the board from :meth:`open_client`, each as opened and as the
        machine calls it (through the board's driver).

        Raises:
            InfrastructureFault: ``open_client`` raised, or returned no Board.
        """
        return self._session.open_clients(count)

    def close_clients(self, clients: Sequence[tuple[Any, Board]]) -> None:
        """Hand every client to :meth:`close_client`; the first failure is a fault."""
        self._session.close_clients(clients)

    def run_nemesis(self, kind: str) -> None:
        """Run the nemesis hook ``kind`` (``"restart"`` or ``"drop"``) as a step of the trace.

        After a restart the snapshot is judged by SPEC 9 (see :meth:`restart_storage`) and
        the model goes on from it. After a drop nothing is read, so that the next call is
        the one that meets the dropped connection.
        """
        self._session.run_nemesis(kind)

    @property
    def _session(self) -> Session:
        assert self.session is not None, "the board is made by start(), the first step"
        return self.session

    # -- set-up --------------------------------------------------------------------------------

    @initialize(deps=dependency_graphs(), start_ticks=st.integers(0, 10**6))
    def start(self, deps: dict[str, tuple[str, ...]], start_ticks: int) -> None:
        """Make a board of three open tasks with the drawn dependencies, at the drawn time."""
        assert is_acyclic(deps), f"generated a cyclic graph {deps!r}"
        tick = self.config.resolution
        tasks = [Task(id=t, title=f"task {t}", deps=deps[t]) for t in TASK_IDS]
        self.session = self._session_class(self, tasks, grid_start(tick) + start_ticks * tick)
        self.session.observe(None)


# The rules are the kinds of step's (taskboard/stateful/_steps): each is a method of the
# machine, named as Hypothesis prints it. The nemesis rules join a class that defines the
# hooks (see __init_subclass__).
for _name, _rule in machine_rules(()).items():
    setattr(BoardMachine, _name, _rule)
