"""``taskboard fuzz --clock virtual --server redis|postgres`` (issue 30): the run starts the
server, the board gets its URL, and the server is gone when the run ends.

The runs skip without redis-server, PostgreSQL or a C compiler (and fail instead when CI sets
``TASKBOARD_REQUIRE_SERVERS=1``); the usage errors need none of them.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import taskboard.servers
from taskboard import Clock, Task
from taskboard._cli import main
from taskboard._fuzz import FuzzOptions, fuzz
from taskboard._fuzz.serving import SERVER_URL_VARIABLE, process_server
from taskboard._virtual import _postgres, _preload
from taskboard.hosts.redis import RedisBoard
from taskboard.stateful import BoardMachine
from tests.conftest import unavailable
from tests.test_cli import MEMORY, SUMMARY, minimal_trace_json

ROOT = Path(__file__).resolve().parent.parent


def _require(server: str) -> None:
    if server == "redis" and shutil.which("redis-server") is None:
        unavailable("redis-server is not on PATH: no server to put on the virtual clock")
    if server == "postgres":
        pytest.importorskip("psycopg")
        binaries = _postgres._bindir(None)
        if not (binaries / "initdb").exists():
            unavailable(f"no PostgreSQL binaries (initdb, postgres) in {binaries}")
    try:
        _preload.preload_library()
    except taskboard.servers.VirtualClockUnavailable as exc:
        unavailable(str(exc))


def _taskboard(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m taskboard ARGV`` in ``tmp_path``, with the tests importable."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env.pop(SERVER_URL_VARIABLE, None)
    return subprocess.run(
        [sys.executable, "-m", "taskboard", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _fuzz(tmp_path: Path, target: str, server: str, *more: str) -> subprocess.CompletedProcess[str]:
    """``taskboard fuzz TARGET --clock virtual --server SERVER``, sequential, seeded."""
    return _taskboard(
        tmp_path,
        "fuzz", target, "--clock", "virtual", "--server", server,
        "--mode", "sequential", "--budget", "60s", "--seed", "1",
        "--trace-dir", str(tmp_path / "traces"), "--database", str(tmp_path / "db"),
        *more,
    )  # fmt: skip


# -- usage errors ---------------------------------------------------------------------------------


def test_a_server_without_the_virtual_clock_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """fuzz --server on the manual (or wall) clock exits 2 before the run, with no
    traceback."""
    for clock in ([], ["--clock", "wall"]):
        assert main(["fuzz", MEMORY, "--server", "redis", *clock, "--budget", "5s"]) == 2
        err = capsys.readouterr().err
        assert "--server starts a server on the checker's clock: it needs --clock virtual" in err
        assert "Traceback" not in err


def test_an_unknown_server_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """fuzz --server NAME for a server it cannot start exits 2, naming the ones it can."""
    argv = ["fuzz", MEMORY, "--clock", "virtual", "--server", "mongodb", "--budget", "5s"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--server must be one of redis, postgres, got 'mongodb'" in err
    assert "Traceback" not in err


def test_a_server_satisfies_the_virtual_clock_and_becomes_the_machines() -> None:
    """With --server, a machine that names no server passes the virtual clock's check, and
    the run's machine has this process's server as its server attribute."""

    class Named(BoardMachine):
        clock_mode = "virtual"

        def make_board(self, tasks: list[Task], clock: Clock) -> Any:
            return RedisBoard(tasks, "server", self.server.url)

    from taskboard._fuzz.targets import Target

    target = Target(f"{__name__}:Named", Named)
    options = FuzzOptions(clock="virtual", server="redis").checked(target)
    machine = options.machine(target)
    assert machine.server is process_server("redis")  # type: ignore[attr-defined]
    assert not process_server("redis").running  # made, not started


#: The URLs :func:`recording_board` was made with.
seen: list[str] = []


def recording_board(tasks: list[Task], clock: Clock) -> RedisBoard:
    """The reference RedisBoard on the server's clock, noting the URL it is given."""
    seen.append(os.environ[SERVER_URL_VARIABLE])
    return RedisBoard(tasks, "server", os.environ[SERVER_URL_VARIABLE])


recording_board.clock_resolution = RedisBoard.clock_resolution  # type: ignore[attr-defined]


# -- runs -----------------------------------------------------------------------------------------


# The whole command line, a server started per run: seconds each, so CI's slow run has them.
@pytest.mark.slow
@pytest.mark.parametrize("server", ["redis", "postgres"])
def test_a_correct_server_clock_board_passes_a_virtual_fuzz_run(
    tmp_path: Path, server: str
) -> None:
    """fuzz --clock virtual --server S of the reference board on S's clock (a factory that
    reads TASKBOARD_SERVER_URL) exits 0."""
    _require(server)
    result = _fuzz(
        tmp_path, f"tests.virtual_boards:{server}_server_clock", server, "--max-examples", "30"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    match = SUMMARY.match(result.stdout.splitlines()[0])
    assert match is not None, result.stdout
    assert int(match.group(1)) == 30, result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("server", ["redis", "postgres"])
def test_a_boundary_mutant_is_found_by_a_virtual_fuzz_run(tmp_path: Path, server: str) -> None:
    """fuzz --clock virtual --server S of a board that keeps a lease live at exactly its
    until (<= on S's clock) exits 1 and writes a virtual-mode trace, which replay --server S
    fails again (exit 1); replay without a server is a usage error (exit 2)."""
    _require(server)
    result = _fuzz(tmp_path, f"tests.virtual_boards:{server}_expiry_inclusive", server)
    assert result.returncode == 1, result.stdout + result.stderr
    traces = list((tmp_path / "traces").glob("*.json"))
    assert traces, result.stdout
    assert '"clock_mode": "virtual"' in traces[0].read_text(encoding="utf-8")
    replayed = _taskboard(tmp_path, "replay", str(traces[0]), "--server", server)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "FAIL:" in replayed.stdout
    serverless = _taskboard(tmp_path, "replay", str(traces[0]))
    assert serverless.returncode == 2, serverless.stdout + serverless.stderr
    assert "pass --server redis|postgres" in serverless.stderr
    assert "Traceback" not in serverless.stderr


@pytest.mark.slow
@pytest.mark.parametrize("server", ["redis", "postgres"])
def test_an_exec_board_runs_on_a_virtual_server(tmp_path: Path, server: str) -> None:
    """fuzz --exec CMD --clock virtual --server S: a board process that keeps its own time
    on set_time, its data on S (TASKBOARD_SERVER_URL, inherited), passes; one that reads
    S's clock and keeps a lease live at exactly its until is caught (exit 1), in a
    virtual-mode trace that replay --exec CMD --server S fails again."""
    _require(server)
    script = ROOT / "tests" / "protocol_boards.py"

    def exec_fuzz(board: str, *more: str) -> subprocess.CompletedProcess[str]:
        command = shlex.join([sys.executable, str(script), f"{server}-{board}"])
        return _taskboard(
            tmp_path,
            "fuzz", "--exec", command, "--clock", "virtual", "--server", server,
            "--mode", "sequential", "--budget", "60s", "--seed", "1",
            "--trace-dir", str(tmp_path / "traces"), "--database", str(tmp_path / board),
            *more,
        )  # fmt: skip

    passed = exec_fuzz("own-time", "--max-examples", "10")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    match = SUMMARY.match(passed.stdout.splitlines()[0])
    assert match is not None, passed.stdout
    assert int(match.group(1)) == 10, passed.stdout
    caught = exec_fuzz("expiry-inclusive", "--shrink-budget", "5s")
    assert caught.returncode == 1, caught.stdout + caught.stderr
    assert "contract violation" in caught.stdout, caught.stdout
    traces = list((tmp_path / "traces").glob("*.json"))
    assert traces, caught.stdout
    assert '"clock_mode": "virtual"' in traces[0].read_text(encoding="utf-8")
    command = shlex.join([sys.executable, str(script), f"{server}-expiry-inclusive"])
    replayed = _taskboard(tmp_path, "replay", str(traces[0]), "--exec", command, "--server", server)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "FAIL:" in replayed.stdout


def test_replay_on_a_server_needs_a_virtual_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay --server of a trace from manual mode exits 2, with no traceback."""
    trace = tmp_path / "manual.json"
    trace.write_text(minimal_trace_json(), encoding="utf-8")
    assert main(["replay", str(trace), "--board", MEMORY, "--server", "redis"]) == 2
    err = capsys.readouterr().err
    assert "this trace is from 'manual' mode, not 'virtual'" in err
    assert "Traceback" not in err


def test_the_run_stops_its_server_and_restores_the_variable(tmp_path: Path) -> None:
    """fuzz() in this process starts its --server for the run, names it in
    TASKBOARD_SERVER_URL while it runs, and stops it and unsets the variable at the end."""
    _require("redis")
    seen.clear()
    report = fuzz(
        f"{__name__}:recording_board",
        clock="virtual",
        server="redis",
        max_examples=5,
        mode="sequential",
        budget=60,
        trace_dir=str(tmp_path / "traces"),
        database=str(tmp_path / "db"),
        progress=None,
    )
    assert report.failure is None
    assert seen
    assert all(url.startswith("redis://127.0.0.1:") for url in seen)
    assert not process_server("redis").running
    assert SERVER_URL_VARIABLE not in os.environ
