"""Every process ``taskboard fuzz --exec`` starts is ended when the run ends (SPEC 10): on a
pass, a violation, an infrastructure fault, Ctrl-C and a usage error, in sequential and
parallel (client) runs.

Each test runs the real command line as a subprocess, with the board processes of
tests/protocol_boards.py recording their pids in ``TASKBOARD_TEST_PIDDIR`` as they start, so
the check covers every process the run started: boards, clients, the ``hello`` probe and
spares started ahead of need that never served a board. Such a process that the checker left
running does not exit when the checker is gone (see protocol_boards.py), so a leak is still
there to be seen once the run has ended.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("protocol_boards.py")
PIDDIR = "TASKBOARD_TEST_PIDDIR"
#: How long the processes of a run may take to be gone after it ended (seconds).
GRACE = 3.0
#: How long after a run a process still starting may take to record its pid (seconds).
SETTLE = 0.5
#: How long a run may take after Ctrl-C (seconds): it ends its processes first.
INTERRUPT_GRACE = 10.0

pytestmark = pytest.mark.skipif(
    sys.platform != "linux", reason="reads the state of processes in /proc"
)


class Started:
    """The board processes one test's runs start: their pid files, and which are running."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.directory = directory
        self.env = {**os.environ, PIDDIR: str(directory)}
        self._mark = f"{PIDDIR}={directory}".encode()

    def pids(self) -> list[int]:
        """Every process that recorded its pid so far."""
        return sorted(int(path.name) for path in self.directory.iterdir())

    def running(self, pid: int) -> bool:
        """Whether ``pid`` is one of these processes and still runs (a zombie has ended)."""
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False  # gone, or another user's process under a reused pid
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False  # gone meanwhile
        if re.search(r"^State:\s*Z", status, re.MULTILINE):
            return False
        # A pid reused by an unrelated process since is not one of these.
        return self._mark in environ.split(b"\0")

    def left_running(self) -> tuple[list[int], list[int]]:
        """Once the run is over: every process it started, and those still running after
        :data:`GRACE` seconds (none, as soon as all are gone and :data:`SETTLE` has passed)."""
        start = time.monotonic()
        while True:
            pids = self.pids()
            running = [pid for pid in pids if self.running(pid)]
            waited = time.monotonic() - start
            if (not running and waited >= SETTLE) or waited >= GRACE:
                return pids, running
            time.sleep(0.05)

    def describe(self, pids: list[int]) -> str:
        lines = []
        for pid in pids:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                cmdline = b"(gone)"
            lines.append(f"  pid {pid}: {cmdline.decode(errors='replace').strip()}")
        return "\n".join(lines)

    def end_leftovers(self) -> None:
        """SIGKILL whatever a failing test left running, so that no leak outlives it."""
        for pid in self.pids():
            if self.running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Started]:
    """The pid directory of this test's runs; what they left running is killed afterwards."""
    record = Started(tmp_path / "pids")
    yield record
    record.end_leftovers()


def fuzz_argv(tmp_path: Path, board: str, *options: str) -> list[str]:
    """``taskboard fuzz --exec`` of a board of protocol_boards.py, writing only in tmp_path."""
    return [
        *(sys.executable, "-m", "taskboard", "fuzz"),
        *("--exec", shlex.join([sys.executable, str(SCRIPT), board])),
        *("--seed", "1", "--quiet", "--budget", "60s"),
        *("--database", str(tmp_path / "examples"), "--trace-dir", str(tmp_path / "traces")),
        *options,
    ]


def fuzz(tmp_path: Path, started: Started, board: str, *options: str) -> tuple[int, str]:
    """Run ``taskboard fuzz`` to its end; its exit code and its output."""
    done = subprocess.run(
        fuzz_argv(tmp_path, board, *options),
        cwd=tmp_path,
        env=started.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def assert_all_ended(started: Started, output: str, *, at_least: int = 2) -> list[int]:
    """Every process the run started has ended; it started ``at_least`` of them."""
    pids, running = started.left_running()
    assert len(pids) >= at_least, f"only {pids} started: the check is vacuous\n{output}"
    assert not running, (
        f"{len(running)} of the {len(pids)} processes the run started are still running "
        f"{GRACE:g} s after it ended:\n{started.describe(running)}\n--- its output:\n{output}"
    )
    return pids


def test_a_pass_ends_every_process(tmp_path: Path, started: Started) -> None:
    """A run that passes ends every board process it started."""
    code, output = fuzz(tmp_path, started, "memory", "--max-examples", "3")
    assert code == 0, output
    assert "no violation found" in output
    assert_all_ended(started, output, at_least=4)  # the hello, a board per example, a spare


def test_a_parallel_run_with_clients_ends_every_process(tmp_path: Path, started: Started) -> None:
    """A parallel run of a board that declares connect ends its boards and clients."""
    code, output = fuzz(tmp_path, started, "sqlite", "--mode", "parallel", "--max-examples", "2")
    assert code == 0, output
    assert re.search(r"\b[1-9]\d* parallel program runs?\b", output), output
    # The hello, and per program run a board and a client per thread, and a spare.
    assert_all_ended(started, output, at_least=5)


def test_a_violation_ends_every_process_also_those_of_shrinking(
    tmp_path: Path, started: Started
) -> None:
    """A run that finds a violation ends every process, those of shrinking included."""
    code, output = fuzz(tmp_path, started, "blind")
    assert code == 1, output
    assert "FAILED: a contract violation" in output
    shrunk = re.search(r"to shrink it: (\d+) Hypothesis runs?", output)
    assert shrunk is not None, output
    assert int(shrunk.group(1)) >= 1, output
    assert_all_ended(started, output, at_least=3)


def test_a_fault_ends_every_process(tmp_path: Path, started: Started) -> None:
    """A run stopped by an infrastructure fault (a non-JSON answer) ends every process."""
    code, output = fuzz(tmp_path, started, "garbage-list")
    assert code == 3, output
    assert "STOPPED: an infrastructure fault" in output
    assert "not json" in output  # the offending line is named
    assert_all_ended(started, output, at_least=3)


@pytest.mark.deep  # minutes each: every shrink run starts a Python process
@pytest.mark.parametrize(
    ("board", "code"),
    [
        pytest.param("RenewWithoutTokenCheck", 1, id="violation"),
        pytest.param("garbage", 3, id="fault"),
    ],
)
def test_a_run_that_shrinks_for_minutes_ends_every_process(
    tmp_path: Path, started: Started, board: str, code: int
) -> None:
    """A gallery mutant or the garbage board, shrunk over hundreds of processes: all end."""
    # A minute or two each: every shrink run starts a process.
    returned, output = fuzz(tmp_path, started, board, "--mode", "sequential")
    assert returned == code, output
    assert_all_ended(started, output, at_least=20)


@pytest.mark.slow
def test_a_board_that_never_answers_hello_is_ended_and_so_is_its_spare(
    tmp_path: Path, started: Started
) -> None:
    """A command that never answers hello is a usage error; it and the spare are ended."""
    # The hello timeout is 10 s.
    code, output = fuzz(tmp_path, started, "silent")
    assert code == 2, output
    assert "did not answer hello" in output
    assert_all_ended(started, output, at_least=2)


@pytest.mark.parametrize(
    ("board", "options", "running"),
    [
        pytest.param("memory", (), 3, id="mixed"),
        pytest.param("sqlite", ("--mode", "parallel"), 5, id="parallel-clients"),
    ],
)
def test_ctrl_c_ends_every_process(
    tmp_path: Path, started: Started, board: str, options: tuple[str, ...], running: int
) -> None:
    """Ctrl-C in the middle of a run: it exits 130 soon and ends every process it started."""
    out = tmp_path / "output.txt"
    with out.open("w") as sink:
        run = subprocess.Popen(
            fuzz_argv(tmp_path, board, *options),
            cwd=tmp_path,
            env=started.env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 30
        while len(started.pids()) < running:  # the hello, boards and a spare: under way
            assert run.poll() is None, out.read_text()
            assert time.monotonic() < deadline, f"{started.pids()} started\n{out.read_text()}"
            time.sleep(0.05)
        # The checker alone: its processes run in sessions of their own, as at a terminal.
        run.send_signal(signal.SIGINT)
        try:
            code = run.wait(timeout=INTERRUPT_GRACE)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {INTERRUPT_GRACE:g} s after Ctrl-C\n{out.read_text()}")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    output = out.read_text()
    assert code == 130, output
    assert "Ctrl-C" in output  # in a batch its summary says so; in between, one line does
    assert_all_ended(started, output, at_least=running)


def test_a_process_left_running_is_seen(tmp_path: Path, started: Started) -> None:
    """The check can fail: a board process whose starter exits without ending it is seen."""
    # Starts the board, waits until it has recorded its pid, and exits without ending it.
    launch = (
        "import os, subprocess, sys, time\n"
        "board = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE)\n"
        "while not os.path.exists(os.path.join(sys.argv[1], str(board.pid))):\n"
        "    time.sleep(0.01)\n"
    )
    board = [sys.executable, str(SCRIPT), "memory"]
    subprocess.run(
        [sys.executable, "-c", launch, str(started.directory), *board],
        env=started.env,
        check=True,
        timeout=60,
    )
    pids, running = started.left_running()
    assert len(pids) == 1
    assert running == pids
