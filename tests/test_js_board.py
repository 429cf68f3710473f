"""A JavaScript board written by someone else, checked through ``taskboard fuzz --exec``
(SPEC 10): tests/boards/jsboard.js was written independently, from SPEC 10 and
docs/protocol.md alone. The correct board passes on the manual and the wall clock, each of
its three planted bugs is caught, and a child that exits at once is a usage error."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parent.parent
BOARD = ROOT / "tests" / "boards" / "jsboard.js"


@pytest.fixture(scope="module")
def node() -> str:
    """The ``node`` on PATH; a skip (a failure in CI) without it."""
    found = shutil.which("node")
    if found is None:
        unavailable("node is not on PATH (.ci/run installs Debian's nodejs)")
    return found


def fuzz(tmp_path: Path, command: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``python -m taskboard fuzz --exec command``, with a fresh example database and the
    traces in ``tmp_path``; its stdout and stderr together in ``stdout``."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "taskboard",
            "fuzz",
            "--exec",
            command,
            "--quiet",
            "--database",
            str(tmp_path / "examples"),
            "--trace-dir",
            str(tmp_path),
            *options,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )


def board(node: str, *arguments: str) -> str:
    """The command line that serves the JavaScript board, with ``arguments``."""
    return shlex.join([node, str(BOARD), *arguments])


@pytest.mark.slow
def test_the_js_board_passes_on_the_manual_clock(node: str, tmp_path: Path) -> None:
    """The correct board passes 100 examples on the manual clock in the default mixed mode,
    parallel programs on client processes included."""
    options = ("--clock", "manual", "--max-examples", "100", "--seed", "1", "--budget", "240s")
    run = fuzz(tmp_path, board(node), *options)
    assert run.returncode == 0, run.stdout
    assert "no violation found" in run.stdout
    assert "parallel program runs" in run.stdout


@pytest.mark.slow
def test_the_js_board_passes_on_the_wall_clock(node: str, tmp_path: Path) -> None:
    """The correct board keeping its own time (Date.now) passes in wall mode."""
    options = ("--clock", "wall", "--max-examples", "15", "--seed", "1", "--budget", "120s")
    run = fuzz(tmp_path, board(node), *options)
    assert run.returncode == 0, run.stdout
    assert "no violation found" in run.stdout
    assert "wall clock" in run.stdout


#: Each planted bug: a seed that finds it within seconds, and what its report must name.
CAUGHT = {
    "release-ignores-token": ("1", "clause    SPEC 3.2"),
    "renew-expired": ("1", "clause    SPEC 3.5"),
    # A race between client processes (check and write in two file transactions), caught in
    # the parallel programs of the default mixed mode.
    "claim-not-atomic": ("6", "contract violation in a concurrent history"),
}


@pytest.mark.slow
@pytest.mark.parametrize("bug", list(CAUGHT))
def test_each_bug_of_the_js_board_is_caught(node: str, tmp_path: Path, bug: str) -> None:
    """Each planted bug is a contract violation (exit 1) naming its clause, with a trace."""
    seed, named = CAUGHT[bug]
    options = ("--seed", seed, "--budget", "240s", "--shrink-budget", "30s")
    run = fuzz(tmp_path, board(node, "--bug", bug), *options)
    assert run.returncode == 1, run.stdout
    assert "FAILED: a contract violation" in run.stdout
    assert named in run.stdout
    assert list(tmp_path.glob("trace-*.json"))


def test_a_node_child_that_exits_at_once_is_a_usage_error(node: str, tmp_path: Path) -> None:
    """A node command that exits before hello: exit 2 naming its status, no traceback."""
    run = fuzz(tmp_path, shlex.join([node, "-e", "process.exit(3)"]), "--budget", "10s")
    assert run.returncode == 2, run.stdout
    assert "did not answer hello" in run.stdout
    assert "status 3" in run.stdout
    assert "Traceback" not in run.stdout
