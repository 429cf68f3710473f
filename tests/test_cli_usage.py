"""What the CLI says when a newcomer gets something wrong, or stops a run: one line and exit 2
for a usage mistake, test classes accepted as targets, Ctrl-C as exit 130 with a summary,
the seed of every run, and a fault report that shows the host's own frames."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard._cli import main
from taskboard.hosts.mutants import NonAtomicClaim, RenewWithoutTokenCheck
from taskboard.stateful import (
    TRACE_DIR_ENV,
    BoardMachine,
    ContractViolation,
    run_parallel_state_machine,
)
from tests.test_cli import MEMORY, minimal_trace_json, summary
from tests.test_protocol_exec import command

#: A module of targets a user might write, put in the run's working directory.
TARGETS = """
from taskboard.boardtest import BoardContract
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import RenewWithoutTokenCheck
from taskboard.stateful import BoardMachine


class NotABoard:
    def __init__(self, tasks, clock):
        self.tasks = tasks


def makes_a_list(tasks, clock):
    return list(tasks)


class TestPlain:
    def test_something(self):
        pass


class TestMemory(BoardContract):
    expired_lease_policy = "accept"

    def make_board(self, tasks, clock):
        return MemoryBoard(tasks, clock)


class TestBroken(BoardContract):
    def make_board(self, tasks, clock):
        return RenewWithoutTokenCheck(tasks, clock)


TestMemoryMachine = BoardMachine.for_board(MemoryBoard).TestCase
TestMemoryParallel = BoardMachine.for_board(MemoryBoard).ParallelTestCase


class FlakyStore(MemoryBoard):
    def release(self, task_id, token):
        return self._send_release(task_id, token)

    def _send_release(self, task_id, token):
        raise ConnectionError("connection reset by peer")
"""


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The working directory, holding ``targets.py`` (importable as ``targets``)."""
    (tmp_path / "targets.py").write_text(textwrap.dedent(TARGETS), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "targets", raising=False)
    monkeypatch.delenv(TRACE_DIR_ENV, raising=False)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``taskboard ARGS`` in this process (quicker than a new one), as a completed process."""
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["taskboard", *args], code, out, err)


def one_line_usage_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2, one line on stderr naming each needle, no traceback, nothing on stdout."""
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert result.stdout == ""


# -- targets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        ("targets:NotABoard", "no list_tasks, claim, release, complete"),
        ("targets:makes_a_list", "made a list, which is no board"),
        ("json:dumps", "cannot be called as a board factory (tasks, clock)"),
        ("targets:TestPlain", "is a test class, not a board"),
        ("unittest:TestCase", "is a test class, not a board"),
        ("taskboard.boardtest:BoardContract", "defines no make_board"),
    ],
)
def test_a_target_that_is_no_board_is_a_usage_error(
    project: Path, capsys: pytest.CaptureFixture[str], target: str, needle: str
) -> None:
    """A class or factory that is no board, or a plain test class: exit 2, one line saying
    what to pass, before anything runs."""
    result = run(capsys, "fuzz", target, "--max-examples", "5", "--quiet")
    one_line_usage_error(result, needle, "pass module:Name of a board class")
    assert not (project / "taskboard-traces").exists()


@pytest.mark.parametrize(
    "target", ["targets:TestMemory", "targets:TestMemoryMachine", "targets:TestMemoryParallel"]
)
def test_a_contract_or_a_machines_test_case_is_fuzzed_through_its_machine(
    project: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    """A BoardContract subclass, a machine's TestCase and its ParallelTestCase are targets."""
    result = run(capsys, "fuzz", target, "--max-examples", "30", "--seed", "1", "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    assert int(summary(result).group(1)) >= 27  # after one parallel program's three runs


def test_a_contracts_trace_names_it_and_replays_as_printed(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A violation found through a BoardContract writes a trace that names the contract; the
    printed replay command runs as it is and fails the same way."""
    found = run(capsys, "fuzz", "targets:TestBroken", "--seed", "3", "--quiet")
    assert found.returncode == 1, found.stdout + found.stderr
    command = next(line for line in found.stdout.splitlines() if "replay it with:" in line)
    path = command.rpartition("taskboard replay ")[2]
    assert '"target": "targets:TestBroken"' in (project / path).read_text(encoding="utf-8")
    replayed = run(capsys, "replay", path)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "on targets:TestBroken" in replayed.stdout
    assert "SPEC 3.5" in replayed.stdout


# -- unusable paths ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("--trace-dir", "a-file", "is not a directory"),
        ("--trace-dir", "a-file/traces", "is a file, not a directory"),
        ("--database", "a-file", "is not a directory"),
        ("--database", "a-file/db", "is a file, not a directory"),
    ],
)
def test_an_unusable_directory_is_a_usage_error_before_the_run(
    project: Path, capsys: pytest.CaptureFixture[str], option: str, value: str, needle: str
) -> None:
    """A --trace-dir or --database that cannot be a directory: exit 2 and one line, at once."""
    (project / "a-file").write_text("", encoding="utf-8")
    result = run(capsys, "fuzz", MEMORY, option, value, "--max-examples", "5", "--quiet")
    one_line_usage_error(result, option, needle)


@pytest.mark.parametrize(
    ("value", "needle"),
    [("a-file/test_x.py", "'a-file' is not a directory"), (".", "is a directory")],
)
def test_an_unusable_emit_test_is_a_usage_error_before_the_replay(
    project: Path, capsys: pytest.CaptureFixture[str], value: str, needle: str
) -> None:
    """replay --emit-test under a file or onto a directory: exit 2, one line, before
    anything is replayed."""
    (project / "a-file").write_text("", encoding="utf-8")
    (project / "trace.json").write_text(minimal_trace_json(), encoding="utf-8")
    result = run(capsys, "replay", "trace.json", "--emit-test", value)
    one_line_usage_error(result, "--emit-test", needle)


def test_a_finding_prints_even_when_its_trace_cannot_be_written(tmp_path: Path) -> None:
    """When the trace directory cannot be written, the violation still reaches the caller,
    with a line saying the trace was not written."""
    blocker = tmp_path / "blocker"
    blocker.write_text("", encoding="utf-8")
    machine = BoardMachine.for_board(RenewWithoutTokenCheck)
    machine.trace_dir = str(blocker / "traces")
    quick = settings(max_examples=300, database=None, phases=[Phase.generate, Phase.shrink])
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(machine, settings=quick)
    assert "contract violation at step" in str(caught.value)
    assert f"trace NOT written to {blocker / 'traces'}" in str(caught.value)
    assert caught.value.trace_file is None


# -- seeds, Ctrl-C and faults ------------------------------------------------------------------


def test_every_run_prints_its_seed_and_the_seed_repeats_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run without --seed prints the seed it drew; --seed with it repeats the run exactly."""
    first = run(capsys, "fuzz", MEMORY, "--max-examples", "30", "--mode", "sequential")
    assert first.returncode == 0, first.stdout + first.stderr
    seed = first.stdout.split("rerun with --seed ", 1)[1].split()[0]
    assert f"seed {seed}" in first.stderr
    again = run(
        capsys, "fuzz", MEMORY, "--max-examples", "30", "--mode", "sequential", "--seed", seed
    )
    assert summary(again).group(2) == summary(first).group(2)  # the same steps


def test_a_mistake_met_by_the_workers_is_a_usage_error(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --workers, a target that makes no board is still exit 2, ending on one line that
    says what to pass: each worker probes it, and the first to find the mistake stops all."""
    result = run(capsys, "fuzz", "targets:makes_a_list", "--workers", "2", "--quiet")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "made a list, which is no board" in last
    assert "Error" not in result.stdout


@pytest.mark.parametrize("workers", ["1", "2"])
def test_ctrl_c_prints_the_summary_and_exits_130(tmp_path: Path, workers: str) -> None:
    """Ctrl-C (SIGINT to the process group, as a terminal sends it): the summary so far, no
    traceback and no @seed line, exit 130; with --workers every worker stops."""
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    process = subprocess.Popen(
        [sys.executable, "-m", "taskboard", "fuzz", MEMORY, "--budget", "5m", "--workers", workers],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    status: list[str] = []
    reader = threading.Thread(target=lambda: status.extend(process.stderr or ()), daemon=True)
    reader.start()
    try:
        # Ctrl-C once a status line shows an example done (past start-up, however loaded the
        # machine is), not after a fixed sleep.
        deadline = time.monotonic() + 120
        while not any(re.match(r"examples [1-9]", line) for line in list(status)):
            assert time.monotonic() < deadline, "".join(status)
            assert process.poll() is None, "".join(status)
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        out, _ = process.communicate(timeout=60)
        reader.join(timeout=60)
        err = "".join(status)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, out + err
    assert "INTERRUPTED (Ctrl-C)" in out
    assert int(summary(subprocess.CompletedProcess([], 0, out, err)).group(1)) > 0
    assert "key transitions:" in out
    assert "Traceback" not in out + err
    assert "@seed" not in out + err


def test_a_fault_report_shows_the_hosts_own_frames(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An infrastructure fault's report lists the frames of the host's code that raised it,
    and none of taskboard's internals."""
    result = run(capsys, "fuzz", "targets:FlakyStore", "--max-examples", "50", "--quiet")
    assert result.returncode == 3, result.stdout + result.stderr
    frames = result.stdout.split("raised at (the host's code, innermost last):", 1)[1]
    frames = frames.split("meaning", 1)[0]
    assert "targets.py" in frames
    assert "in _send_release" in frames
    assert 'raise ConnectionError("connection reset by peer")' in frames
    assert "stateful" not in frames
    assert "_driver" not in frames


def test_replaying_a_parallel_trace_names_the_concurrent_history(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """taskboard replay of a parallel-mode trace says the contract broke in the concurrent
    history of its threads, not in the initial snapshot."""
    machine = BoardMachine.for_board(NonAtomicClaim)
    machine.trace_dir = str(project / "traces")
    with pytest.raises(ContractViolation) as caught:
        run_parallel_state_machine(machine, settings=settings(max_examples=50, database=None))
    assert caught.value.trace_file is not None
    result = run(capsys, "replay", caught.value.trace_file, "--board", MEMORY)
    assert "recorded: SPEC 3 and 5 broken at the concurrent history of its threads" in (
        result.stdout
    )
    assert "initial snapshot" not in result.stdout


def test_no_install_line_names_the_unrelated_pypi_project() -> None:
    """Every pip install line in the package, README and docs names taskboard-contract,
    never PyPI's unrelated taskboard."""
    root = Path(__file__).resolve().parent.parent
    files = [root / "README.md", *(root / "docs").glob("*.md"), *(root / "taskboard").rglob("*.py")]

    def installs_the_wrong_project(line: str) -> bool:
        command = re.split(r"&&|;|`", line.partition("pip install")[2])[0]
        names = [word.strip("'\"") for word in command.split()]
        return any(name == "taskboard" or name.startswith("taskboard[") for name in names)

    wrong = [
        f"{path.relative_to(root)}: {line.strip()}"
        for path in files
        for line in path.read_text(encoding="utf-8").splitlines()
        if "pip install" in line and installs_the_wrong_project(line)
    ]
    assert wrong == []
    assert 'name = "taskboard-contract"' in (root / "pyproject.toml").read_text(encoding="utf-8")


def test_emit_test_creates_the_directories_it_names(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay --emit-test tests/regress/test_x.py in a project with no tests/ yet writes it."""
    (project / "trace.json").write_text(minimal_trace_json(), encoding="utf-8")
    result = run(capsys, "replay", "trace.json", "--emit-test", "tests/regress/test_x.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "tests" / "regress" / "test_x.py").read_text(encoding="utf-8")


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """taskboard check piped into a reader that stops early (``| head -1``): exit 141 and
    no BrokenPipeError traceback."""
    (tmp_path / "s.json").write_text(
        '{"tasks": ['
        + ", ".join(f'{{"id": "t{n}", "deps": ["x{n}"]}}' for n in range(5000))
        + "]}",
        encoding="utf-8",
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "taskboard", "check", "s.json"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdout.readline()
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert process.returncode == 141, err
    assert b"Traceback" not in err


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--race-exploration", "pct", "--pct-depth", "0"], "from 1 to 10, got 0"),
        (["--race-scheduling", "controlled", "--pct-depth", "3"], "applies to PCT only"),
    ],
)
def test_a_bad_pct_depth_is_a_usage_error_before_the_run(
    capsys: pytest.CaptureFixture[str], options: list[str], needle: str
) -> None:
    """--pct-depth out of range, or without PCT: exit 2 and one line, before any program."""
    result = run(capsys, "fuzz", MEMORY, "--parallel", *options, "--max-examples", "5")
    one_line_usage_error(result, "--pct-depth", needle)


def test_the_virtual_clock_on_a_board_without_a_server_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """fuzz --clock virtual on a machine that names no server exits 2 before the run, saying
    how to name one, with no traceback."""
    assert main(["fuzz", MEMORY, "--clock", "virtual", "--budget", "5s"]) == 2
    err = capsys.readouterr().err
    assert "--clock virtual needs a server whose clock it moves: --server redis|postgres" in err
    assert "server = taskboard.servers.Redis()" in err
    assert "Traceback" not in err


def test_the_virtual_clock_on_an_exec_board_without_a_server_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """fuzz --exec CMD --clock virtual without --server exits 2 before the run: the child
    keeps its own time, and no server follows the clock."""
    argv = ["fuzz", "--exec", shlex.join(command("sqlite")), "--clock", "virtual"]
    assert main([*argv, "--budget", "5s"]) == 2
    err = capsys.readouterr().err
    assert "--clock virtual on an --exec board needs --server redis|postgres" in err
    assert "Traceback" not in err
