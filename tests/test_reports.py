"""What a failing test shows under pytest: the report, not taskboard's internals."""

from __future__ import annotations

import pytest

MACHINE = """
from taskboard.hosts.mutants import RenewWithoutTokenCheck
from taskboard.stateful import BoardMachine


class BrokenMachine(BoardMachine):
    def make_board(self, tasks, clock):
        return RenewWithoutTokenCheck(tasks, clock)


TestBroken = BrokenMachine.TestCase
"""

CONTRACT = """
from taskboard.boardtest import BoardContract
from taskboard.hosts.mutants import RenewWithoutTokenCheck


class TestBroken(BoardContract):
    def make_board(self, tasks, clock):
        return RenewWithoutTokenCheck(tasks, clock)
"""


@pytest.mark.parametrize(
    ("source", "test"), [(MACHINE, "TestBroken"), (CONTRACT, "TestBroken::test_state_machine")]
)
def test_a_failure_shows_the_report_without_taskboards_frames(
    pytester: pytest.Pytester, source: str, test: str
) -> None:
    """A machine's TestCase or a BoardContract failing under pytest shows the violation and
    its trace under the public class path; no frame of the machine's internals, no
    Hypothesis frame, no explain-phase line pointing into taskboard."""
    pytester.makepyfile(test_board=source)
    result = pytester.runpytest_subprocess(f"test_board.py::{test}", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "taskboard.model.ContractViolation: contract violation at step" in output
    assert "clause    SPEC 3.5" in output
    assert "trace (clock starts at" in output
    for internal in ("def _perform", "self.model.advance", "hypothesis/stateful.py", "_model.py"):
        assert internal not in output, internal
    assert "Explanation:" not in output
    assert len([line for line in output.splitlines() if line.startswith(">")]) <= 2
