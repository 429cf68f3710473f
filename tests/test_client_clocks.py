"""client_clock_skew: clients whose clocks disagree, for libraries that read time on the client."""

from __future__ import annotations

import datetime as datetime_module
import json
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard._cli import main
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import ExpiryOnClientClock
from taskboard.model import ContractViolation
from taskboard.stateful import BoardMachine
from taskboard.stateful._client_clocks import (
    client_offset,
    covers_datetime,
    machine_clock,
    shifted_time,
)
from taskboard.stateful._config import MachineConfig
from taskboard.strategies import AGENTS

MS = timedelta(milliseconds=1)
SKEW = ExpiryOnClientClock.client_clock_skew
#: A MemoryBoard served by a Python child process (SPEC 10).
MEMORY_CHILD = f"{sys.executable} {Path(__file__).with_name('protocol_boards.py')} memory"
WALL = settings(max_examples=15, deadline=None, database=None, derandomize=True)


def test_time_reads_shifted_inside_the_block_and_real_after_it() -> None:
    """shifted_time moves time.time() and time.time_ns() by the offset, in this thread only,
    and puts the real functions back when the block ends."""
    real, real_ns = time.time, time.time_ns
    seen_elsewhere: list[float] = []
    with shifted_time(timedelta(seconds=3600)):
        shifted = time.time() - time.perf_counter()
        shifted_ns = time.time_ns()
        other = threading.Thread(target=lambda: seen_elsewhere.append(time.time()))
        other.start()
        other.join()
    assert time.time is real
    assert time.time_ns is real_ns
    assert shifted - (time.time() - time.perf_counter()) == pytest.approx(3600, abs=0.5)
    assert shifted_ns - time.time_ns() == pytest.approx(3600e9, abs=0.5e9)
    assert seen_elsewhere[0] == pytest.approx(time.time(), abs=0.5)


def test_each_agent_has_its_own_clock_offset() -> None:
    """The first agent's client runs slow by the skew, the second's fast, the third's right;
    an unknown agent and a call with none read the machine's clock."""
    assert client_offset("a1", AGENTS, SKEW) == -SKEW
    assert client_offset("a2", AGENTS, SKEW) == SKEW
    assert client_offset(AGENTS[-1], AGENTS, SKEW) == timedelta(0)
    assert client_offset("stranger", AGENTS, SKEW) == timedelta(0)
    assert client_offset(None, AGENTS, SKEW) == timedelta(0)
    assert client_offset("a1", AGENTS, timedelta(0)) == timedelta(0)


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"client_clock_skew": -MS, "clock_mode": "wall"}, "non-negative timedelta"),
        ({"client_clock_skew": 20, "clock_mode": "wall"}, "non-negative timedelta"),
        ({"client_clock_skew": 20 * MS}, "clock_mode = 'wall'"),
    ],
)
def test_a_client_clock_skew_the_machine_cannot_use_is_a_type_error(
    attributes: dict[str, object], message: str
) -> None:
    """client_clock_skew is a non-negative timedelta, and only on the wall clock."""
    with pytest.raises(TypeError, match=message):
        MachineConfig.of(BoardMachine.for_board(MemoryBoard, **attributes))


@pytest.mark.slow
def test_a_library_that_judges_expiry_on_the_client_is_caught_with_skewed_clients() -> None:
    """ExpiryOnClientClock stamps leases on the caller's time.time(): with clients 20 ms apart
    the first claim's until is off by the slow client's 20 ms, and the report names the
    clients' clocks."""
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(
            BoardMachine.for_board(ExpiryOnClientClock, trace_target=""), settings=WALL
        )
    report = str(caught.value)
    assert "too early" in report or "too late" in report or "TakenError" in report
    assert "time.time() of each agent's client shifted: 'a1' -20ms, 'a2' +20ms" in report


def test_the_same_library_passes_when_its_clients_agree() -> None:
    """With client_clock_skew 0 ExpiryOnClientClock passes: the skew is what catches it."""
    agreeing = BoardMachine.for_board(
        ExpiryOnClientClock, client_clock_skew=timedelta(0), trace_target=""
    )
    run_state_machine_as_test(agreeing, settings=WALL)


def test_a_board_on_its_own_clock_passes_with_skewed_clients() -> None:
    """A board that reads the clock it was given, not time.time(), never sees the shift."""
    machine = BoardMachine.for_board(
        MemoryBoard, clock_mode="wall", client_clock_skew=SKEW, trace_target=""
    )
    run_state_machine_as_test(machine, settings=WALL)


@pytest.mark.slow
def test_fuzz_catches_it_and_replay_recurs_with_the_recorded_skew(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """taskboard fuzz on the mutant exits 1 with a trace that records client_clock_skew_us;
    taskboard replay of it shifts the clients again and the violation recurs."""
    target = "taskboard.hosts.mutants:ExpiryOnClientClock"
    options = ["--max-examples", "20", "--seed", "1", "--mode", "sequential", "--quiet"]
    paths = ["--database", str(tmp_path / "db"), "--trace-dir", str(tmp_path)]
    assert main(["fuzz", target, "--shrink-budget", "5s", *options, *paths]) == 1
    # The trace the report names (shrinking by replay writes its own beside Hypothesis's).
    named = capsys.readouterr().out.rsplit("replay it with: taskboard replay ", 1)[1]
    trace = Path(named.split()[0])
    assert json.loads(trace.read_text())["client_clock_skew_us"] == 20_000
    capsys.readouterr()
    assert main(["replay", str(trace)]) == 1
    assert "client shifted" in capsys.readouterr().out


@pytest.mark.slow
def test_fuzz_takes_client_clock_skew_in_milliseconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--client-clock-skew 0 overrides the mutant's own 20 ms, and it passes."""
    target = "taskboard.hosts.mutants:ExpiryOnClientClock"
    options = ["--max-examples", "10", "--seed", "1", "--mode", "sequential", "--quiet"]
    paths = ["--database", str(tmp_path / "db"), "--trace-dir", str(tmp_path)]
    code = main(["fuzz", target, "--client-clock-skew", "0", *options, *paths])
    assert code == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--client-clock-skew", "-1", "--clock", "wall"], "must be a number of milliseconds"),
        (["--client-clock-skew", "20"], "applies to the wall clock only"),
        (
            ["--client-clock-skew", "20", "--clock", "wall", "--exec", MEMORY_CHILD],
            "reads the clock of its own process",
        ),
    ],
)
def test_a_bad_client_clock_skew_is_a_usage_error(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--client-clock-skew out of range, on the manual clock or with --exec: exit 2, one
    line, no traceback."""
    assert main(["fuzz", *arguments, "--budget", "1s"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_shift_reaches_datetime_now_and_utcnow_in_this_thread_only() -> None:
    """With time-machine, a client's shift reaches datetime.now() and utcnow(), also through
    `from datetime import datetime`, in the shifted thread only; the board's own clock
    (machine_clock) reads the real time inside the block."""
    from datetime import datetime as imported_datetime

    assert covers_datetime()
    board_clock = machine_clock(SKEW)
    elsewhere: list[datetime_module.datetime] = []
    with shifted_time(timedelta(hours=8)):
        local = imported_datetime.now()
        utc = datetime_module.datetime.utcnow()
        aware = datetime_module.datetime.now(datetime_module.UTC)
        real = board_clock.now()
        other = threading.Thread(target=lambda: elsewhere.append(imported_datetime.now()))
        other.start()
        other.join()
    after = imported_datetime.now()
    hours = timedelta(hours=8)
    assert abs(local - after - hours) < timedelta(seconds=5)
    assert abs(utc - datetime_module.datetime.utcnow() - hours) < timedelta(seconds=5)
    assert abs(aware - real - hours) < timedelta(seconds=5)
    assert abs(elsewhere[0] - after) < timedelta(seconds=5)
    assert abs(real - datetime_module.datetime.now(datetime_module.UTC)) < timedelta(seconds=5)


def test_a_library_on_naive_datetime_now_is_caught_with_skewed_clients() -> None:
    """A board that stamps leases with the caller's datetime.now() (a library on the client)
    is caught by client_clock_skew, as one on time.time() is."""
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(
            BoardMachine.for_board(
                lambda tasks, clock: MemoryBoard(tasks, _NaiveNowClock()),
                clock_mode="wall",
                client_clock_skew=SKEW,
                trace_target="",
            ),
            settings=WALL,
        )
    assert "time.time() of each agent's client shifted" in str(caught.value)


class _NaiveNowClock:
    """What a library that stamps leases with naive ``datetime.now()`` reads (in UTC here)."""

    def now(self) -> datetime_module.datetime:
        return datetime_module.datetime.now().replace(tzinfo=datetime_module.UTC)
