"""The table of settings (stateful/_settings.py): every setting in it reaches every way of
running a check (the machine, BoardContract's machine and its own boards, ``taskboard fuzz``,
trace files and ``replay``), and the two bugs the copies before it caused stay fixed."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import settings

from taskboard import Clock, Task
from taskboard._cli import main
from taskboard._fuzz import FuzzOptions, Target
from taskboard.boardtest import BoardContract
from taskboard.boardtest._harness import WALL_TICK_UNITS, ContractHarness, OpenBoard
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import ExpiryOnClientClock
from taskboard.model import ContractViolation, violations_in
from taskboard.stateful import BoardMachine, Trace, parse_trace, replay_trace, trace_to_json
from taskboard.stateful._config import MachineConfig, wall_ttl_unit
from taskboard.stateful._limits import LeaseLimits
from taskboard.stateful._reports import RunStart
from taskboard.stateful._settings import SETTINGS, Setting

MS = timedelta(milliseconds=1)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "testing-your-storage.md"
PROTOCOL_BOARDS = Path(__file__).with_name("protocol_boards.py")
WALL = settings(max_examples=15, deadline=None, database=None, derandomize=True)

#: A value of each setting other than its default; all of them hold together, on the wall
#: clock, for a machine that defines both nemesis hooks.
EXAMPLES: dict[str, Any] = {
    "clock_resolution": 2 * MS,
    "clock_mode": "wall",
    "clock_skew": 3 * MS,
    "client_clock_skew": 4 * MS,
    "shortest_lease": 5 * MS,
    "lease_limits": LeaseLimits(expiring=False),
    "keep_alive_interval": 6 * MS,
    "expired_lease_policy": "reject",
    "call_timeout": timedelta(seconds=7),
    "tolerate_faults": (ConnectionError,),
    "parallel_processes": True,
    "race_scheduling": "controlled",
    "race_exploration": "pct",
    "pct_depth": 2,
    "answers_vary": True,
    "durable": False,
    "nemesis": ("drop",),
    "trace_dir": "some/traces",
    "trace_target": "some.module:Board",
}

#: For each setting a ``taskboard fuzz`` option sets: the option's value, and the value the
#: machine's configuration then holds.
FUZZ_EXAMPLES: dict[str, tuple[Any, object]] = {
    "clock_mode": ("wall", "wall"),
    "clock_skew": (3.0, 3 * MS),
    "client_clock_skew": (4.0, 4 * MS),
    "shortest_lease": (5.0, 5 * MS),
    "lease_limits": ("no-expiry-only", LeaseLimits(expiring=False)),
    "call_timeout": (7.0, timedelta(seconds=7)),
    "tolerate_faults": (True, True),
    "parallel_processes": (True, True),
    "race_scheduling": ("controlled", "controlled"),
    "race_exploration": ("pct", "pct"),
    "pct_depth": (2, 2),
    "nemesis": ("drop", ("drop",)),
    "trace_dir": ("some/traces", "some/traces"),
    "expired_lease_policy": ("reject", "reject"),
}


#: The options a fuzz option applies only with (its usage error says so otherwise).
FUZZ_NEEDS: dict[str, dict[str, Any]] = {"pct_depth": {"race_exploration": "pct"}}


def no_nemesis(board: Any) -> None:
    """A nemesis hook that does nothing: the examples' ``nemesis`` names one of two."""


#: Both nemesis hooks, so that the default nemesis (every hook) differs from the example's.
HOOKS = {"restart_storage": no_nemesis, "drop_connections": no_nemesis}


def machine_with(**attributes: Any) -> type[BoardMachine]:
    """A MemoryBoard machine on the wall clock with both nemesis hooks, and ``attributes``."""
    return BoardMachine.for_board(MemoryBoard, **HOOKS, **{"clock_mode": "wall", **attributes})


def configured(setting: Setting, machine: type) -> Any:
    """What ``machine``'s configuration holds for ``setting``."""
    return getattr(MachineConfig.of(machine), setting.config)


def by_name(setting: Setting) -> str:
    return setting.name


def test_every_setting_has_an_example() -> None:
    """Each setting of the table has an example here, so every walk below covers it."""
    assert set(EXAMPLES) == {setting.name for setting in SETTINGS}
    assert all(EXAMPLES[s.name] != s.default for s in SETTINGS)


@pytest.mark.parametrize("setting", SETTINGS, ids=by_name)
def test_the_machine_has_every_setting_with_its_default_and_reads_it(setting: Setting) -> None:
    """BoardMachine has each setting as a class attribute with the table's default, documents
    it (and the table has its doc line), and its configuration holds a value the class sets."""
    assert getattr(BoardMachine, setting.name) == setting.default
    assert setting.name in BoardMachine.__annotations__
    assert setting.doc
    assert "\n" not in setting.doc
    assert f"``{setting.name}``" in (BoardMachine.__doc__ or "")
    assert f"`{setting.name}`" in DOCS.read_text(encoding="utf-8")
    chosen = machine_with(**{setting.name: EXAMPLES[setting.name]})
    assert configured(setting, chosen) == EXAMPLES[setting.name]


@pytest.mark.parametrize("setting", SETTINGS, ids=by_name)
def test_a_factory_carries_exactly_the_settings_the_table_lets_it(setting: Setting) -> None:
    """for_board takes a setting from the factory's own attribute when the table says a
    factory may carry it, and leaves it alone otherwise."""
    own = {setting.name: EXAMPLES[setting.name]}
    if setting.wall_only:
        own["clock_mode"] = "wall"
    factory = type("Factory", (MemoryBoard,), own)
    carried = configured(setting, BoardMachine.for_board(factory, **HOOKS))
    assert (carried == EXAMPLES[setting.name]) is setting.for_board


def contract_with(**attributes: Any) -> type[BoardContract]:
    """A BoardContract subclass on MemoryBoard, with both nemesis hooks and ``attributes``."""

    def make_board(self: Any, tasks: Sequence[Task], clock: Clock) -> MemoryBoard:
        return MemoryBoard(tasks, clock)

    namespace = {"make_board": make_board, **{hook: staticmethod(f) for hook, f in HOOKS.items()}}
    return type("Contract", (BoardContract,), {**namespace, **attributes})


@pytest.mark.parametrize("setting", SETTINGS, ids=by_name)
def test_board_contract_hands_its_settings_to_its_machine(setting: Setting) -> None:
    """A BoardContract has each of the table's contract settings with its default, and the
    machine it runs holds the value the class sets; it names itself as the trace target."""
    contract = contract_with(**{"clock_mode": "wall", setting.name: EXAMPLES[setting.name]})
    handed = configured(setting, contract()._machine_class("Machine"))
    assert (handed == EXAMPLES[setting.name]) is setting.contract
    if setting.contract:
        assert getattr(ContractHarness, setting.name) == setting.default


def probe_resolution_and_skew(harness: Any, board: Any, clock: Any) -> None:
    """The example tests' tick comes from the class's resolution and skew."""
    unit = wall_ttl_unit(EXAMPLES["clock_resolution"], EXAMPLES["clock_skew"])
    assert harness.tick == WALL_TICK_UNITS * unit


def probe_clock_mode(harness: Any, board: Any, clock: Any) -> None:
    """In wall mode the clock is the system's, and a command's processes keep their own time
    (so the criteria's client processes race)."""
    assert abs(clock.now() - datetime.now(UTC)) < timedelta(minutes=1)
    assert harness.made[-1].clock_mode == "wall"


def probe_call_timeout(harness: Any, board: Any, clock: Any) -> None:
    """Each call on a board from open_board is cut off after the class's call_timeout."""
    assert board.driver.timeout == EXAMPLES["call_timeout"].total_seconds()


#: How BoardContract's own boards and clock are seen to honour each criteria setting.
CRITERIA_PROBES: dict[str, Callable[[Any, Any, Any], None]] = {
    "clock_resolution": probe_resolution_and_skew,
    "clock_skew": probe_resolution_and_skew,
    "clock_mode": probe_clock_mode,
    "call_timeout": probe_call_timeout,
}


def test_every_criteria_setting_has_a_probe() -> None:
    """Each setting the table says BoardContract's own boards honour is probed below."""
    assert set(CRITERIA_PROBES) == {setting.name for setting in SETTINGS if setting.criteria}


MEMORY_CHILD = [sys.executable, str(PROTOCOL_BOARDS), "memory"]


class TestBoardContractsOwnBoardsReadTheSettings(ContractHarness):
    """The harness of BoardContract, on boards of a command (SPEC 10), with every criteria
    setting set to its example."""

    clock_resolution = EXAMPLES["clock_resolution"]
    clock_mode = "wall"
    clock_skew = EXAMPLES["clock_skew"]
    call_timeout = EXAMPLES["call_timeout"]
    made: ClassVar[list[Any]] = []

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Any:
        # The command's own hooks, as BoardContract.for_command makes them, on this class.
        made = ContractHarness.for_command(MEMORY_CHILD).make_board(self, tasks, clock)
        self.made.append(made)
        return made

    def close_board(self, board: Any) -> Any:
        return board.close()

    def test_each_criteria_setting_reaches_the_boards_and_the_clock(
        self, open_board: OpenBoard, clock: Any
    ) -> None:
        """open_board's boards and the clock the criteria and example tests use honour each
        criteria setting of the table."""
        board = open_board(Task("t1"))
        for name, probe in CRITERIA_PROBES.items():
            assert getattr(self, name) == EXAMPLES[name]
            probe(self, board, clock)


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.fuzz is not None], ids=by_name)
def test_each_fuzz_option_sets_its_setting(
    setting: Setting, capsys: pytest.CaptureFixture[str]
) -> None:
    """``taskboard fuzz`` has the flag the table names, and the option sets the setting on
    the machine it runs."""
    assert setting.fuzz is not None
    option, expected = FUZZ_EXAMPLES[setting.name]
    chosen: dict[str, Any] = {"clock": "wall", setting.fuzz.field: option}
    chosen.update(FUZZ_NEEDS.get(setting.name, {}))
    options = FuzzOptions(**chosen)
    target = Target("settings-test", machine_with())
    assert configured(setting, options.checked(target).machine(target)) == expected
    with pytest.raises(SystemExit):
        main(["fuzz", "--help"])
    assert setting.fuzz.flag in capsys.readouterr().out


def test_every_fuzz_option_has_an_example() -> None:
    """Each setting a fuzz option sets has an option example above."""
    assert set(FUZZ_EXAMPLES) == {setting.name for setting in SETTINGS if setting.fuzz}


def recorded_trace() -> Trace:
    """The trace of a run (no steps) of a machine with every example setting, as written to a
    file and read back."""
    machine = machine_with(**EXAMPLES)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    trace = RunStart(machine, MachineConfig.of(machine), (Task("t1"),), start).to_trace([])
    return parse_trace(trace_to_json(trace))


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.trace is not None], ids=by_name)
def test_trace_files_record_each_traced_setting(setting: Setting) -> None:
    """A trace records the run's value of each traced setting under the table's JSON key,
    and reads it back; a trace from before the key reads as the setting's default."""
    assert setting.trace is not None
    trace = recorded_trace()
    assert getattr(trace, setting.trace.field) == EXAMPLES[setting.name]
    document = json.loads(trace_to_json(trace))
    assert setting.trace.key in document
    if setting.trace.optional and setting.replay is not None:
        del document[setting.trace.key]
        if setting.name == "clock_mode":  # what needs the wall clock goes with it
            for other in SETTINGS:
                if other.wall_only and other.trace:
                    del document[other.trace.key]
        older = parse_trace(json.dumps(document))
        assert getattr(older, setting.trace.field) == setting.default


class RecordingMachine(BoardMachine):
    """A machine that notes the configuration of each example it makes a board for."""

    seen: ClassVar[list[MachineConfig]] = []
    expired_lease_policy = "accept"

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> MemoryBoard:
        self.seen.append(self.config)
        return MemoryBoard(tasks, clock)

    def restart_storage(self, board: Any) -> None:
        pass

    def drop_connections(self, board: Any) -> None:
        pass


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.replay is not None], ids=by_name)
def test_replay_runs_with_the_settings_the_trace_recorded(setting: Setting) -> None:
    """A replay's machine takes each replayed setting from the trace, and the SPEC 3.4 pin
    from the machine replayed on, which declares its own."""
    result = replay_trace(recorded_trace(), RecordingMachine)
    assert result.passed, result.report
    replayed = getattr(RecordingMachine.seen[-1], setting.config)
    if setting.replay == "trace":
        assert replayed == EXAMPLES[setting.name]
    else:
        assert replayed == RecordingMachine.expired_lease_policy


# -- the bugs the copies caused ---------------------------------------------------------------


class OnClientClocks(BoardContract):
    """ExpiryOnClientClock under BoardContract, with clients' clocks 20 ms apart."""

    clock_mode = "wall"
    client_clock_skew = ExpiryOnClientClock.client_clock_skew
    machine_settings = WALL

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> ExpiryOnClientClock:
        return ExpiryOnClientClock(tasks, clock)


def test_board_contract_catches_expiry_judged_on_the_clients_clock() -> None:
    """BoardContract with client_clock_skew: its state-machine test catches a board that
    stamps leases on the calling client's time.time() (it passed before, the skew unused)."""
    assert MachineConfig.of(OnClientClocks()._machine_class("Machine")).client_skew == 20 * MS
    with pytest.raises((ContractViolation, ExceptionGroup)) as caught:
        OnClientClocks().test_state_machine()
    assert violations_in(caught.value)


def test_board_contract_hands_keep_alive_interval_to_its_machine() -> None:
    """BoardContract with keep_alive_interval: its machine expects the board to renew leases
    by itself, and the example tests that need a lease to expire skip, saying why."""
    contract = contract_with(clock_mode="wall", keep_alive_interval=15 * MS)
    config = MachineConfig.of(contract()._machine_class("Machine"))
    assert config.keep_alive == 15 * MS
    with pytest.raises(pytest.skip.Exception, match="keep_alive_interval"):
        contract().needs_leases_to_expire()


@pytest.mark.slow
def test_board_contract_passes_a_correct_keep_alive_board(pytester: pytest.Pytester) -> None:
    """BoardContract on a board with a correct keep-alive, keep_alive_interval declared: no
    failure; the seven examples that need a lease to expire are skipped."""
    pytester.makepyfile(
        """
        from hypothesis import settings
        from taskboard.boardtest import BoardContract
        from taskboard.hosts.mutants import _KeepAliveBoard

        class TestKeepAlive(BoardContract):
            clock_mode = "wall"
            keep_alive_interval = _KeepAliveBoard.keep_alive_interval
            shortest_lease = _KeepAliveBoard.shortest_lease
            machine_settings = settings(max_examples=10, deadline=None, database=None)
            parallel_settings = settings(max_examples=5, deadline=None, database=None)
            criteria_rounds = 3

            def make_board(self, tasks, clock):
                return _KeepAliveBoard(tasks, clock)
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0, result.stdout.str()
    assert outcomes["skipped"] == 7


def test_for_command_in_wall_mode_races_the_client_processes(pytester: pytest.Pytester) -> None:
    """BoardContract.for_command with clock_mode = "wall": the concurrency criterion's client
    processes race for real, so a claim atomic only inside one process has more than one
    winner (before, the harness's sleeping clock made the processes take turns)."""
    split_claim = shlex.join([sys.executable, str(PROTOCOL_BOARDS), "sqlite-split-claim"])
    pytester.makepyfile(
        f"""
        from taskboard.boardtest import BoardContract

        class TestSplitClaim(BoardContract.for_command({split_claim!r})):
            clock_mode = "wall"
            criteria_rounds = 5
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "one_winner")
    result.assert_outcomes(failed=1)
    assert "agents won the same claim" in result.stdout.str()
