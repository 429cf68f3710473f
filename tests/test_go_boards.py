"""The Go reference board and its mutants (go/), checked through ``taskboard fuzz --exec``
(SPEC 10): the reference passes, and each planted bug is caught."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from taskboard import ClaimRequest, Clock, ManualClock, SystemClock, Task
from taskboard._cli import main
from taskboard.protocol import exec_board
from tests.conftest import unavailable

GO_MODULE = Path(__file__).resolve().parent.parent / "go"

pytestmark = pytest.mark.slow
TTL = timedelta(milliseconds=5)


#: No module is fetched: the Go code uses the standard library only.
GO_ENV = {"GOFLAGS": "-mod=mod", "GOPROXY": "off"}


def go_command() -> str:
    """The go command; a skip (a failure in CI) without Go."""
    go = shutil.which("go")
    if go is None:
        unavailable("go is not installed (.ci/run installs Debian's golang-go)")
    return go


@pytest.fixture(scope="module")
def fileboard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go reference board, built from go/cmd/fileboard."""
    built = tmp_path_factory.mktemp("go") / "fileboard"
    env = {**os.environ, **GO_ENV}
    subprocess.run(
        [go_command(), "build", "-o", str(built), "./cmd/fileboard"],
        cwd=GO_MODULE,
        env=env,
        check=True,
    )
    return built


def fuzz_exec(command: str, tmp_path: Path, *options: str) -> int:
    """``taskboard fuzz --exec command``, with a fresh example database and traces in
    ``tmp_path``."""
    database, traces = str(tmp_path / "examples"), str(tmp_path)
    return main(
        [
            "fuzz",
            "--exec",
            command,
            "--quiet",
            "--database",
            database,
            "--trace-dir",
            traces,
            *options,
        ]
    )


def test_the_go_reference_board_passes(fileboard: Path, tmp_path: Path) -> None:
    """The Go file board, served by the Go adapter, passes 150 examples in the default mixed
    mode, clients as processes included."""
    assert fuzz_exec(str(fileboard), tmp_path, "--max-examples", "150", "--seed", "1") == 0


def test_the_go_reference_board_passes_on_the_wall_clock(fileboard: Path, tmp_path: Path) -> None:
    """The same board keeping its own time (Go's time.Now) passes in wall mode."""
    options = ("--max-examples", "5", "--seed", "1", "--clock", "wall")
    assert fuzz_exec(str(fileboard), tmp_path, *options) == 0


@pytest.mark.parametrize(
    ("mutant", "budget"),
    [
        ("release-ignores-token", "60s"),
        ("fence-kept-on-takeover", "60s"),
        # A race between client processes: caught in the parallel part of the mixed mode.
        ("claim-atomic-in-process", "240s"),
    ],
)
def test_each_go_mutant_is_caught(
    fileboard: Path, tmp_path: Path, mutant: str, budget: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each planted bug in the Go board is a contract violation (exit 1) with a trace."""
    code = fuzz_exec(f"{fileboard} -mutant {mutant}", tmp_path, "--budget", budget)
    out = capsys.readouterr().out
    assert code == 1, out
    assert "contract violation" in out
    assert list(tmp_path.glob("*.json"))


def test_an_unknown_mutant_is_a_usage_error_with_the_boards_stderr(
    fileboard: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Go board that exits at start: exit 2, with what it wrote on stderr."""
    assert main(["fuzz", "--exec", f"{fileboard} -mutant nonsense", "--budget", "5s"]) == 2
    assert 'unknown mutant "nonsense"' in capsys.readouterr().err


@pytest.mark.parametrize("clock", [ManualClock(), SystemClock()], ids=["manual", "wall"])
def test_a_go_client_process_keeps_the_checkers_time(fileboard: Path, clock: Clock) -> None:
    """A Go client process after connect reads the manual clock the checker sets, or the
    system clock in wall mode: the lease it grants ends one ttl after now."""
    board = exec_board([str(fileboard)], [Task("t1")], clock)
    client = board.open_client()
    try:
        before = clock.now()
        got = client.claim("t1", "a1", ClaimRequest(TTL))
        after = clock.now()
    finally:
        client.close()
        board.close()
    assert got.lease is not None
    assert got.lease.until is not None
    assert before + TTL <= got.lease.until <= after + TTL


def run_contract(
    pytester: pytest.Pytester, command: str, *args: str, criteria_rounds: int = 20
) -> pytest.RunResult:
    """BoardContract.for_command(command) as a host's pytest suite would run it."""
    pytester.makepyfile(
        f"""
        from hypothesis import settings
        from taskboard.boardtest import BoardContract

        class TestGoBoard(BoardContract.for_command({command!r})):
            machine_settings = settings(max_examples=30, database=None, derandomize=True)
            parallel_settings = settings(max_examples=10, database=None, derandomize=True)
            criteria_rounds = {criteria_rounds}
        """
    )
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def test_the_go_reference_board_passes_the_contract_suite(
    fileboard: Path, pytester: pytest.Pytester
) -> None:
    """BoardContract.for_command runs every contract test on the Go board, clients as
    processes, with no false alarm."""
    result = run_contract(pytester, str(fileboard), "-n", "0")
    outcomes = result.parseoutcomes()
    assert set(outcomes) == {"passed"}, result.stdout.str()  # none failed, none skipped


def test_the_criteria_race_one_go_process_per_agent(
    fileboard: Path, pytester: pytest.Pytester
) -> None:
    """A Go board whose claim is atomic only inside one process fails the one-winner
    criterion: each agent claims through a process of its own."""
    # A race between processes: on a loaded machine 20 rounds missed it about one run in
    # four, so this run gives it more rounds to happen in.
    result = run_contract(
        pytester,
        f"{fileboard} -mutant claim-atomic-in-process",
        *("-n", "0", "-k", "one_winner"),
        criteria_rounds=200,
    )
    result.assert_outcomes(failed=1)
    assert "winner" in result.stdout.str()


def test_go_test_with_the_helper_fails_on_a_planted_bug_and_keeps_the_trace(
    tmp_path: Path,
) -> None:
    """protocoltest.Fuzz under `go test`: the memboard with a release that ignores the token
    fails its test with the checker's report, and the trace it names survives the run."""
    traces = tmp_path / "traces"
    env = {
        **os.environ,
        **GO_ENV,
        "MEMBOARD_BUG": "release-ignores-token",
        "TASKBOARD_TRACE_DIR": str(traces),
        # This checkout's checker, whichever taskboard is on the PATH.
        "TASKBOARD_COMMAND": f"{sys.executable} -m taskboard",
        "TASKBOARD_FUZZ_ARGS": f"--database {tmp_path / 'examples'} --shrink-budget 20s",
    }
    test = [go_command(), "test", "-count=1", "-run", "TestMemboardKeepsTheContract"]
    result = subprocess.run(
        [*test, "./memboard"], cwd=GO_MODULE, env=env, capture_output=True, text=True
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "--- FAIL: TestMemboardKeepsTheContract" in out
    assert "taskboard fuzz found a contract violation" in out
    assert "SPEC 3.2" in out
    kept = list(traces.glob("*.json"))
    assert len(kept) == 1, out
    assert f"the trace is kept in {kept[0]}" in out
    serve = "TASKBOARD_GO_SERVE=TestMemboardKeepsTheContract"
    assert f"go test -c -o board.test && {serve} taskboard replay {kept[0]} --exec" in out

    # The replay the message gives: the test binary as the board replays the violation.
    binary = tmp_path / "board.test"
    build = [*test[:2], "-c", "-o", str(binary), "./memboard"]
    subprocess.run(build, cwd=GO_MODULE, env=env, check=True)
    board = f"{binary} -test.run=^TestMemboardKeepsTheContract$"
    replay = [sys.executable, "-m", "taskboard", "replay", str(kept[0]), "--exec", board]
    env["TASKBOARD_GO_SERVE"] = "TestMemboardKeepsTheContract"
    replayed = subprocess.run(replay, env=env, capture_output=True, text=True)
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "SPEC 3.2" in replayed.stdout
