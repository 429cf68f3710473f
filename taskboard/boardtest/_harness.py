"""ContractHarness: what BoardContract's tests stand on, and what a host overrides.

The class attributes, the hooks a host defines (``make_board`` and the optional ones), the
``clock`` and ``open_board`` fixtures, the clock tick and the helpers the tests call. It holds
no test (and its name does not start with ``Test``, so pytest never collects it);
BoardContract (:mod:`taskboard.boardtest._suite`) brings the tests on top of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest
from hypothesis import settings

from taskboard._clock import Clock, ClockMode, ManualClock, SystemClock
from taskboard._contract import Board, ClaimRequest, FailingBoard, RenewingBoard, Task
from taskboard._driver import Driver, _Driven, close_driven, driven, make_driven
from taskboard._protocol.board import exec_board, split_command
from taskboard._protocol.spares import hello_of
from taskboard._virtual._process_time import on_virtual_clock
from taskboard._virtual._servers import VirtualServer
from taskboard.model import ExpiredLeasePolicy, describe_task
from taskboard.stateful._config import wall_ttl_unit
from taskboard.stateful._generation import grid_start
from taskboard.stateful._limits import LeaseLimits
from taskboard.stateful._machine import close_own
from taskboard.stateful._session import sleep_until
from taskboard.stateful._settings import default
from taskboard.stateful._virtual_clock import virtual_clock

__all__ = [
    "WALL_LONGEST_SLEEP",
    "WALL_TICK_UNITS",
    "ContractHarness",
    "ExampleMismatch",
    "OpenBoard",
]

OpenBoard = Callable[..., Board]

#: In wall mode, an example test's tick in the machine's TTL units: 20 ms with the defaults, so
#: the tests' margins outlast a sleep that overshoots on a loaded machine.
WALL_TICK_UNITS = 4
#: In wall mode, the longest an example test's ``clock.advance`` sleeps, in ticks.
WALL_LONGEST_SLEEP = 10


class _SleepingClock(ManualClock):
    """The wall clock for the example tests in wall mode (SPEC 7): moving it sleeps.

    ``advance(delta)`` sleeps ``delta`` (at most :data:`WALL_LONGEST_SLEEP` ticks: "however
    long we wait" need not be days) and then ``landing`` more, the skew and resolution
    past the target, so that "at until" lands after the board's until, not on it.
    """

    def __init__(self, tick: timedelta, landing: timedelta) -> None:
        super().__init__(SystemClock().now())
        self._tick = tick
        self._landing = landing
        self._wall: Clock = SystemClock()

    def now(self) -> datetime:
        return self._wall.now()

    def advance(self, delta: timedelta) -> datetime:
        target = self.now() + min(delta, WALL_LONGEST_SLEEP * self._tick) + self._landing
        sleep_until(self._wall, target)
        return self.now()

    def set(self, when: datetime) -> datetime:
        sleep_until(self._wall, when + self._landing)
        return self.now()

    def __repr__(self) -> str:
        return "SystemClock()"


class _OnVirtualClock:
    """A driver whose calls run at the virtual clock's instant, as the machine's calls do in
    virtual mode: a library's own ``time.time()`` and ``datetime.now()`` read ``clock``
    (see :mod:`taskboard._virtual._process_time`)."""

    def __init__(self, driver: Driver, clock: Clock) -> None:
        self.driver = driver
        self.clock = clock

    @property
    def wedged(self) -> bool:
        return self.driver.wedged

    @wedged.setter
    def wedged(self, value: bool) -> None:
        self.driver.wedged = value

    def call(self, function: Callable[..., Any], *args: Any) -> Any:
        with on_virtual_clock(self.clock.now()):
            return self.driver.call(function, *args)

    def close(self) -> None:
        self.driver.close()


class ContractHarness:
    """The class attributes (documented on :class:`~taskboard.boardtest.BoardContract`), hooks,
    fixtures and helpers of BoardContract.

    The optional hooks' stubs live here, so :attr:`has_clients` and BoardContract's machine
    tell a hook the subclass defines from one it left alone by comparing against this class.
    """

    # The settings BoardContract hands its machine (``contract`` in the table), as on the
    # machine; their defaults are the table's.
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
    machine_settings: ClassVar[settings | None] = None
    parallel_settings: ClassVar[settings | None] = None
    #: With ``clock_mode = "virtual"``: the server whose clock the tests move
    #: (``taskboard.servers.Redis()``, ``.Postgres()``, ``.NoServer()``).
    server: ClassVar[VirtualServer | None] = None

    #: The clients :meth:`clients_of` opened and not yet closed, each with its board's driver.
    _clients_opened: list[tuple[Any, Driver]]
    criteria_rounds: ClassVar[int] = 20
    criteria_participants: ClassVar[int] = 8

    # -- hooks -------------------------------------------------------------------------------

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Any:
        """Return a fresh, isolated Board holding ``tasks`` that reads time only from ``clock``.

        May be ``async def``, and the board's methods may be coroutines.
        """
        raise NotImplementedError(
            f"{type(self).__qualname__} must define make_board(self, tasks, clock) returning a "
            "fresh Board that holds `tasks` and reads time only from `clock`"
        )

    def close_board(self, board: Any) -> Any:
        """Release what :meth:`make_board` acquired; runs after every test that made a board.

        May be ``async def``; ``board`` is what :meth:`make_board` returned.
        """

    def open_client(self, board: Any) -> Any:
        """Optional (SPEC 8): another client of the same storage as ``board``, as another
        process would open it. When defined, the parallel mode runs every thread on a client
        of its own, and both criteria race one client per participant. May be ``async def``.
        """
        raise NotImplementedError

    def close_client(self, client: Any) -> Any:
        """Release what :meth:`open_client` acquired: by default the client's own ``aclose()``
        or ``close()``, unless the client is the board itself. May be ``async def``."""
        return None if client in getattr(self, "_boards_made", ()) else close_own(client)

    def restart_storage(self, board: Any) -> Any:
        """Optional (SPEC 9): stop the storage and start it again, keeping what it persists;
        return the board to use from then on, or ``None`` to keep ``board``. When defined,
        the state-machine and parallel runs restart the storage now and then, and judge the
        snapshot after it by :attr:`durable`. May be ``async def``."""
        raise NotImplementedError

    def drop_connections(self, board: Any) -> Any:
        """Optional (SPEC 9): kill ``board``'s live connections from the server's side; the
        board must reconnect by itself (set :attr:`tolerate_faults` for the call that meets
        the dropped connection). When defined, the runs drop connections now and then. May
        be ``async def``."""
        raise NotImplementedError

    @classmethod
    def for_command(
        cls, command: str | Sequence[str], *, timeout: float = 10.0
    ) -> type[ContractHarness]:
        """A subclass whose boards are child processes of ``command``, a board in any language
        served over the board protocol (SPEC 10, ``docs/protocol.md``):
        ``class TestMyGoBoard(BoardContract.for_command("./myboard")): ...``.

        The command is split like a shell line and started once now, to hear its ``hello``.
        When it declares ``connect``, every client is another process, so the criteria race
        one process per agent; the nemesis hooks are those it declares, and :attr:`durable`
        is its own. ``timeout`` bounds each answer, in seconds.

        Raises:
            taskboard.protocol.ExecStartError: the command does not start or answer ``hello``.
        """
        argv = split_command(command)
        hello = hello_of(argv, timeout)
        hooks: dict[str, Any] = {
            "durable": hello.durable,
            "make_board": lambda self, tasks, clock: exec_board(
                argv, tasks, clock, timeout=timeout, clock_mode=self.clock_mode
            ),
            "close_board": lambda self, board: board.close(),
        }
        if "connect" in hello.ops:
            hooks["open_client"] = lambda self, board: board.open_client()
            hooks["close_client"] = lambda self, client: client.close()
        for op in ("restart_storage", "drop_connections"):
            if op in hello.ops:
                hooks[op] = lambda self, board, op=op: getattr(board, op)()
        return type(f"{cls.__name__}[{hello.name or ' '.join(argv)}]", (cls,), hooks)

    @property
    def has_clients(self) -> bool:
        """True when the class defines :meth:`open_client` (SPEC 8)."""
        return type(self).open_client is not ContractHarness.open_client

    def clients_of(self, board: Board, count: int) -> list[Board] | None:
        """``count`` clients of ``board`` (one made by ``open_board``), closed after the test;
        ``None`` when the class defines no :meth:`open_client`."""
        if not self.has_clients:
            return None
        assert isinstance(board, _Driven), "clients_of takes a board from open_board"
        clients = []
        for _ in range(count):
            raw = board.driver.call(self.open_client, board.board)
            self._clients_opened.append((raw, board.driver))
            clients.append(driven(raw, board.driver))
        return clients

    def _close_clients(self, *, raising: bool = True) -> list[Exception]:
        """Close every client :meth:`clients_of` opened so far (so that a criterion's rounds
        do not pile up connections); the errors, raised as a group when ``raising``."""
        errors: list[Exception] = []
        opened = self._clients_opened
        self._clients_opened = []
        for client, driver in opened:
            try:
                driver.call(self.close_client, client)
            except Exception as exc:
                errors.append(exc)
        if errors and raising:
            raise ExceptionGroup("close_client failed", errors)
        return errors

    # -- fixtures ------------------------------------------------------------------------------

    @pytest.fixture(scope="class", autouse=True)
    @classmethod
    def _stop_server(cls) -> Iterator[None]:
        """In virtual mode, the class's server (started on first use) stops after the class's
        last test, however the tests ended."""
        yield
        stop = getattr(cls.server, "stop", None)
        if stop is not None:
            stop()

    @pytest.fixture
    def clock(self) -> ManualClock:
        """A manual clock on the resolution grid; in wall mode, one that sleeps to move; in
        virtual mode, one that moves the emptied server's clock with it (see
        :func:`~taskboard.stateful._virtual_clock.virtual_clock`)."""
        if self.clock_mode == "wall":
            return _SleepingClock(self.tick, self.clock_skew + self.clock_resolution)
        if self.clock_mode == "virtual":
            return virtual_clock(self, grid_start(self.tick), self.tick)
        return ManualClock(grid_start(self.tick))

    @pytest.fixture
    def open_board(self, clock: ManualClock) -> Iterator[OpenBoard]:
        """``open_board(*tasks)`` makes a board on ``clock``; every board is closed afterwards.

        The board comes back synchronous whatever the host's is: an async board runs on
        an event loop of its own, made before ``make_board`` and stopped after
        ``close_board``; calls are cut off after ``call_timeout``.
        """
        opened: list[tuple[Any, Driver]] = []
        self._boards_made: list[Any] = []
        self._clients_opened = []

        def factory(*tasks: Task) -> Board:
            made, board, driver = make_driven(
                self.make_board, (list(tasks), clock), self.call_timeout
            )
            if self.clock_mode == "virtual":
                board = driven(made, _OnVirtualClock(driver, clock))
            opened.append((made, driver))
            self._boards_made.append(made)
            return board

        yield factory
        errors = self._close_clients(raising=False)  # clients first, then their boards
        for made, driver in opened:  # each board is closed, whatever the others do
            try:
                close_driven(self.close_board, made, driver)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise ExceptionGroup("close_client or close_board failed", errors)

    @property
    def tick(self) -> timedelta:
        """One unit of the host's clock resolution; in wall mode, :data:`WALL_TICK_UNITS` of the
        machine's TTL unit, so that "one tick before until" survives a loaded machine's sleeps."""
        if self.clock_mode == "wall":
            return WALL_TICK_UNITS * wall_ttl_unit(self.clock_resolution, self.clock_skew)
        return self.clock_resolution

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def snapshot(board: Board) -> dict[str, Task]:
        """``list_tasks()`` by id."""
        return {t.id: t for t in board.list_tasks()}

    def claim(self, board: Board, task_id: str, agent: str = "a1", ticks: int = 10) -> Task:
        """Claim for ``ticks`` clock ticks (0: no expiry) and return what the board returned."""
        return board.claim(task_id, agent, ClaimRequest(ticks * self.tick))

    @staticmethod
    def token(task: Task) -> str:
        """The lease token of a task that must have a lease."""
        assert task.lease is not None, f"expected a lease on {task}"
        return task.lease.token

    @staticmethod
    def fence(task: Task) -> int:
        """The lease fence of a task that must have a lease."""
        assert task.lease is not None, f"expected a lease on {task}"
        return task.lease.fence

    @staticmethod
    def renewing(board: Board) -> RenewingBoard:
        """The board as a RenewingBoard; a test failure (not a skip) when it is not one."""
        if not isinstance(board, RenewingBoard):
            pytest.fail(
                f"{type(board).__qualname__} has no renew(task_id, token, request): boardtest "
                "verifies RenewingBoard, and fails rather than skips, since a skip would "
                "pass 'not tested' off as 'passed'"
            )
        return board

    def needs_leases_to_expire(self) -> None:
        """Skip the test, with the reason, when the board renews its leases by itself
        (``keep_alive_interval``): none expires while its holder lives, and the state
        machine checks the keep-alive instead (that it ends with the lease)."""
        if self.keep_alive_interval is not None:
            pytest.skip(
                "keep_alive_interval: the board renews every held lease by itself, so no "
                "lease expires here; test_state_machine checks that its keep-alive ends"
            )

    @staticmethod
    def failing(board: Board) -> FailingBoard:
        """The board as a FailingBoard; skips the test, with the reason, when it is not one."""
        if not isinstance(board, FailingBoard):
            pytest.skip(f"{type(board).__qualname__} has no fail(): SPEC 3.6 is optional")
        return board

    def assert_rejected_unchanged(
        self, board: Board, error: type[Exception], action: Callable[[], object]
    ) -> None:
        """``action`` raises ``error`` and the snapshot, seq included, stays as it was (SPEC 3).

        Raises:
            ExampleMismatch: it returned, raised something else, or changed the board; the
                error says what was expected and what the board did.
        """
        expected = f"{error.__name__}, and the board unchanged (SPEC 3)"
        before = self.snapshot(board)
        try:
            result = action()
        except error:
            pass
        except Exception as exc:
            raise ExampleMismatch(expected, f"raised {type(exc).__name__}: {exc}") from exc
        else:
            raise ExampleMismatch(expected, f"returned {_shown(result)}")
        after = self.snapshot(board)
        changed = [
            f"{describe_task(after[key])} (was {describe_task(was)})"
            for key, was in before.items()
            if key in after and after[key] != was
        ]
        changed += [f"{key!r} gone" for key in before.keys() - after.keys()]
        changed += [f"{key!r} added" for key in after.keys() - before.keys()]
        if changed:
            raise ExampleMismatch(
                expected, f"raised {error.__name__}, but changed the board: " + "; ".join(changed)
            )


class ExampleMismatch(AssertionError):
    """What an example test expected of the board, and what the board did instead: its
    failure names the test's SPEC clause with both (see
    :func:`taskboard.boardtest._examples.reporting_clauses`)."""

    def __init__(self, expected: str, did: str) -> None:
        super().__init__(f"expected {expected}; the board {did}")
        self.expected, self.did = expected, did


def _shown(result: object) -> str:
    """What an operation returned, as a failure shows it."""
    if isinstance(result, Task):
        return describe_task(result)
    return "without an error" if result is None else repr(result)
