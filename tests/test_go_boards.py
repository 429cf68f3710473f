"""The Go module (go/): the reference board and its mutants, checked through ``taskboard fuzz
--exec`` (SPEC 10), the reference passing and each planted bug caught; ``protocoltest.Fuzz``
failing ``go test`` on a planted bug with a trace that survives; and Go's ``Check`` agreeing
with ``check()``."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest

from taskboard import ClaimRequest, Clock, Lease, ManualClock, State, SystemClock, Task, check
from taskboard._cli import main
from taskboard.protocol import exec_board
from taskboard.stateful import BoardMachine, load_trace, replay_trace
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


def test_the_go_claim_atomic_in_process_is_caught_shrunk_and_replayed_under_control(
    fileboard: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under controlled scheduling the Go mutant's YieldPoint between its check and its write
    is a point like a request: the race is caught, shrunk to two client processes, and its
    trace fails on the first run of every replay."""
    command = f"{fileboard} -mutant claim-atomic-in-process"
    controlled = ("--parallel", "--race-scheduling", "controlled", "--seed", "1")
    code = fuzz_exec(command, tmp_path, *controlled, "--max-examples", "50")
    out = capsys.readouterr().out
    assert code == 1, out
    assert "claim: yield_point(claim checked, not yet written)" in out
    named = out.split("trace written to ", 1)[1].split(";", 1)[0]
    trace = load_trace(named)
    assert trace.program is not None
    assert len(trace.program.threads) == 2
    machine = BoardMachine.for_command(command, race_scheduling="controlled")
    for _ in range(3):
        result = replay_trace(trace, machine)
        assert not result.passed
        assert result.steps_run == 1  # the first run of the program failed


def test_the_go_reference_board_passes_under_control(fileboard: Path, tmp_path: Path) -> None:
    """The correct Go board's client processes, one request at a time as drawn: no false
    alarm and no hang."""
    controlled = ("--parallel", "--race-scheduling", "controlled", "--seed", "1")
    assert fuzz_exec(str(fileboard), tmp_path, *controlled, "--max-examples", "30") == 0


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


#: A Go program that prints taskboard.Check's problems for each snapshot it reads.
GO_CHECK_MAIN = """package main

import (
\t"encoding/json"
\t"os"

\ttaskboard "github.com/taskboard-contract/taskboard/go"
)

func main() {
\tvar snapshots [][]taskboard.Task
\tif err := json.NewDecoder(os.Stdin).Decode(&snapshots); err != nil {
\t\tpanic(err)
\t}
\tfound := make([][]taskboard.Problem, len(snapshots))
\tfor i, tasks := range snapshots {
\t\tfound[i] = taskboard.Check(tasks)
\t}
\tif err := json.NewEncoder(os.Stdout).Encode(found); err != nil {
\t\tpanic(err)
\t}
}
"""


def random_snapshot(rng: random.Random) -> list[Task]:
    """A small snapshot with every kind of fault: repeated and empty ids, unknown states and
    dependencies, self loops, cycles, and holders where they do not belong."""
    ids = ["a", "b", "c", "d", "e", ""]
    states = ["open", "claimed", "done", "failed", "lost"]
    tasks = []
    for _ in range(rng.randint(0, 9)):
        lease = None
        if rng.random() < 0.5:
            # A present lease has a fence: Go's zero Lease (no token, fence 0) is no lease.
            lease = Lease(rng.choice(["", "tok"]), rng.randint(1, 3), None)
        tasks.append(
            Task(
                rng.choice(ids[:-1] if rng.random() < 0.95 else ids),
                deps=tuple(rng.choices(["a", "b", "c", "d", "e", "x", "y"], k=rng.randint(0, 3))),
                state=State(s) if (s := rng.choice(states)) != "lost" else cast(State, s),
                owner=rng.choice(["", "", "w1"]),
                lease=lease,
            )
        )
    return tasks


def test_go_check_agrees_with_python_check(tmp_path: Path) -> None:
    """taskboard.Check in Go reports what check() reports on 1,500 random snapshots: the
    same problems in the same order, the texts alike but for Go's quotes."""
    rng = random.Random(34)
    snapshots = [random_snapshot(rng) for _ in range(1500)]
    wire = [
        [
            {
                "id": t.id,
                "deps": list(t.deps),
                "state": str(t.state),
                "owner": t.owner,
                "lease": None
                if t.lease is None
                else {"token": t.lease.token, "fence": t.lease.fence},
            }
            for t in tasks
        ]
        for tasks in snapshots
    ]
    program = tmp_path / "checkjson"
    program.mkdir()
    (program / "main.go").write_text(GO_CHECK_MAIN)
    (program / "go.mod").write_text(
        "module checkjson\n\ngo 1.19\n\n"
        "require github.com/taskboard-contract/taskboard/go v0.0.0\n\n"
        f"replace github.com/taskboard-contract/taskboard/go => {GO_MODULE}\n"
    )
    env = {**os.environ, **GO_ENV}
    result = subprocess.run(
        [go_command(), "run", "."],
        cwd=program,
        env=env,
        input=json.dumps(wire),
        capture_output=True,
        text=True,
        check=True,
    )
    go_found = json.loads(result.stdout)
    for tasks, in_go in zip(snapshots, go_found, strict=True):
        in_python = [(p.task, p.code.value, p.text.replace("'", '"')) for p in check(tasks)]
        assert [(p["Task"], p["Code"], p["Text"]) for p in in_go or []] == in_python, tasks
