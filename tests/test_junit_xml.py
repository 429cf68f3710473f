"""``taskboard fuzz --junit-xml FILE``: each outcome as a JUnit reader (junitparser) sees it, a
usage mistake that writes nothing, and a file that is written whole or not at all."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from junitparser import Error, Failure, JUnitXml, TestCase, TestSuite

from taskboard._cli import main
from taskboard._fuzz import FuzzReport
from taskboard._fuzz.junit import JUnitRun, junit_xml, write_junit_xml
from taskboard.stateful import TRACE_DIR_ENV
from tests.test_cli_usage import project, run

__all__ = ["project"]  # the fixture: the working directory, holding targets.py

MEMORY = "taskboard.hosts.memory:MemoryBoard"
#: Caught within a few examples: renew accepts any token (SPEC 3.5).
MUTANT = "taskboard.hosts.mutants:RenewWithoutTokenCheck"


def fuzz(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``taskboard fuzz ARGS --quiet`` in this process, as a completed process."""
    return run(capsys, "fuzz", *args, "--quiet")


def the_case(path: Path) -> tuple[TestSuite, TestCase, dict[str, str]]:
    """The one test suite and test case a JUnit reader finds in ``path``, and its properties."""
    xml = JUnitXml.fromfile(str(path))
    [suite] = list(xml)
    [case] = list(suite)
    assert suite.name == "taskboard fuzz"
    assert case.name == "contract"
    assert (suite.tests, xml.tests) == (1, 1)
    return suite, case, {p.name: p.value for p in suite.properties()}


def test_a_violation_is_a_failure_with_the_report_as_its_text(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A contract violation: a <failure> whose message is one line naming the step and SPEC
    clause, and whose text is the printed report, with the trace file's path."""
    result = fuzz(
        capsys, MUTANT, "--seed", "1", "--max-examples", "200", "--trace-dir", "traces",
        "--database", "db", "--junit-xml", "ci/taskboard.xml",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    suite, case, properties = the_case(project / "ci" / "taskboard.xml")
    assert case.classname == MUTANT
    assert case.is_failure
    assert not case.is_error
    assert (suite.failures, suite.errors) == (1, 0)
    [failure] = case.result
    assert isinstance(failure, Failure)
    assert failure.type == "ContractViolation"
    assert "\n" not in failure.message
    assert failure.message.startswith("contract violation at step ")
    assert failure.message.endswith("(SPEC 3.5)")
    # The trace the report names: shrinking by replay writes its own beside Hypothesis's.
    trace = Path(properties["trace_file"])
    assert (project / trace).exists()
    assert "  clause    SPEC 3.5" in failure.text
    assert "  expected  LeaseLostError" in failure.text
    assert f"trace written to {Path('traces') / trace.name}" in failure.text
    assert failure.text in result.stdout  # the report the command printed, as it printed it
    assert properties["trace_file"] == str(Path("traces") / trace.name)
    assert properties["clause"] == "SPEC 3.5"
    assert (properties["verdict"], properties["exit_code"]) == ("violation", "1")
    assert properties["target"] == MUTANT
    assert properties["seed"] == "1"
    assert "FAILED: a contract violation" in case.system_out
    assert "JUnit XML written to ci/taskboard.xml" in result.stderr


def test_an_infrastructure_fault_is_an_error_with_the_fault_report(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An infrastructure fault (exit 3): an <error>, not a <failure>, whose text is the
    fault report."""
    result = fuzz(
        capsys, "targets:FlakyStore", "--seed", "1", "--max-examples", "50",
        "--database", "db", "--junit-xml", "taskboard.xml",
    )  # fmt: skip
    assert result.returncode == 3, result.stdout + result.stderr
    suite, case, properties = the_case(project / "taskboard.xml")
    assert case.is_error
    assert not case.is_failure
    assert (suite.failures, suite.errors) == (0, 1)
    [error] = case.result
    assert isinstance(error, Error)
    assert error.type == "InfrastructureFault"
    assert error.message.startswith("infrastructure fault at ")
    assert "ConnectionError" in error.message
    assert "  fault     ConnectionError: connection reset by peer" in error.text
    assert error.text in result.stdout
    assert (properties["verdict"], properties["exit_code"]) == ("fault", "3")
    assert "clause" not in properties


def test_a_pass_is_a_passing_case_that_says_what_ran(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No violation (exit 0): a passing test case, with the examples, steps, seed, target, mode
    and clock as properties and the printed summary as its system-out."""
    result = fuzz(
        capsys, MEMORY, "--seed", "3", "--max-examples", "20", "--mode", "sequential",
        "--database", "db", "--junit-xml", "taskboard.xml",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    suite, case, properties = the_case(project / "taskboard.xml")
    assert case.is_passed
    assert case.classname == MEMORY
    assert (suite.failures, suite.errors, suite.skipped) == (0, 0, 0)
    assert properties["examples"] == "20"
    assert int(properties["steps"]) > 0
    assert float(properties["seconds"]) >= 0
    assert properties["seed"] == "3"
    assert (properties["mode"], properties["clock"], properties["workers"]) == (
        "sequential",
        "manual",
        "1",
    )
    assert (properties["verdict"], properties["exit_code"]) == ("pass", "0")
    assert properties["max_examples"] == "20"
    assert case.system_out == result.stdout.rstrip("\n")
    assert "key transitions:" in case.system_out
    assert suite.timestamp
    assert case.time == suite.time


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("a-file/taskboard.xml", "is a file, not a directory"),
        (".", "is a directory, not a file"),
        ("", "needs a file name"),
    ],
    ids=["under-a-file", "a-directory", "empty"],
)
def test_an_unwritable_path_is_a_usage_error_before_the_run(
    project: Path, capsys: pytest.CaptureFixture[str], value: str, needle: str
) -> None:
    """--junit-xml that cannot be written: exit 2, one line on stderr, no traceback, no
    file, and nothing run (no start line, no summary)."""
    (project / "a-file").write_text("", encoding="utf-8")
    before = sorted(p.name for p in project.iterdir())
    result = fuzz(capsys, MEMORY, "--max-examples", "5", "--junit-xml", value)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("taskboard fuzz: error: --junit-xml ")
    assert needle in lines[0]
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert sorted(p.name for p in project.iterdir()) == before


def test_a_directory_it_may_not_write_in_is_a_usage_error(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--junit-xml in a directory this process may not write in (the temporary file goes
    there): exit 2, one line naming the directory, no file."""
    (project / "ci").mkdir()
    monkeypatch.setattr("taskboard._fuzz.junit.os.access", lambda path, mode: False)
    result = fuzz(capsys, MEMORY, "--max-examples", "5", "--junit-xml", "ci/taskboard.xml")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"taskboard fuzz: error: --junit-xml 'ci/taskboard.xml': cannot write in "
        f"{str(Path.cwd() / 'ci')!r}"
    ]
    assert list((project / "ci").iterdir()) == []


def test_a_usage_mistake_leaves_no_file_not_even_an_old_one(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A usage mistake found once the command runs (a bad target): exit 2 and no file; a
    file an earlier run left at the path is gone, so it cannot stand for this run."""
    (project / "taskboard.xml").write_text("<testsuites/>", encoding="utf-8")
    result = fuzz(capsys, "no_such_module_xyz:Board", "--junit-xml", "taskboard.xml")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot import" in result.stderr
    assert not (project / "taskboard.xml").exists()


def test_two_workers_write_one_file_with_one_case(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--workers 2: one valid file, one test case for the whole run, the violation a worker
    found as its failure, with workers=2 among the properties."""
    result = fuzz(
        capsys, MUTANT, "--seed", "1", "--max-examples", "400", "--workers", "2",
        "--shrink-budget", "1s", "--trace-dir", "traces", "--database", "db",
        "--junit-xml", "taskboard.xml",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    _, case, properties = the_case(project / "taskboard.xml")
    assert case.is_failure
    [failure] = case.result
    # Shrinking is cut at 1 s (a quick test): the step, even the clause, may vary.
    assert properties["clause"].startswith("SPEC ")
    assert failure.message.endswith(f"({properties['clause']})")
    assert f"  clause    {properties['clause']}" in failure.text
    assert properties["workers"] == "2"
    assert properties["trace_file"] in failure.text
    assert [p.name for p in project.glob("*.xml")] == ["taskboard.xml"]


def test_a_run_stopped_by_its_budget_is_a_valid_pass(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that ends on its --budget (no example limit): a valid file, a pass over what ran."""
    result = fuzz(
        capsys, MEMORY, "--seed", "4", "--budget", "1s", "--database", "db",
        "--junit-xml", "taskboard.xml",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    _, case, properties = the_case(project / "taskboard.xml")
    assert case.is_passed
    assert properties["budget"] == "1s"
    assert "max_examples" not in properties
    assert int(properties["examples"]) > 0
    assert properties["interrupted"] == "false"


def test_ctrl_c_writes_a_pass_over_what_ran(tmp_path: Path) -> None:
    """Ctrl-C (exit 130): the file is written, a pass over the examples run so far, marked
    interrupted."""
    env = {k: v for k, v in os.environ.items() if k not in (TRACE_DIR_ENV, "HYPOTHESIS_PROFILE")}
    process = subprocess.Popen(
        [
            sys.executable, "-m", "taskboard", "fuzz", MEMORY, "--budget", "5m", "--seed", "5",
            "--quiet", "--database", "db", "--junit-xml", "taskboard.xml",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        assert process.stderr.readline().startswith("taskboard fuzz: ")  # the run has started
        time.sleep(1.5)  # into the batches
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, out + err
    _, case, properties = the_case(tmp_path / "taskboard.xml")
    assert case.is_passed
    assert properties["interrupted"] == "true"
    assert (properties["verdict"], properties["exit_code"]) == ("interrupted", "130")
    assert int(properties["examples"]) > 0
    assert "INTERRUPTED (Ctrl-C)" in case.system_out


def test_a_file_that_cannot_be_written_at_the_end_still_prints_the_verdict(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails after the run (a full disk): the summary prints, a line on stderr
    says the file was not written, and the exit code is the run's."""

    def full_disk(path: str, report: FuzzReport, run: JUnitRun) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("taskboard._cli.write_junit_xml", full_disk)
    result = fuzz(
        capsys, MEMORY, "--seed", "1", "--max-examples", "5", "--database", "db",
        "--junit-xml", "taskboard.xml",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no violation found" in result.stdout
    assert "JUnit XML NOT written to taskboard.xml: [Errno 28] No space left on device" in (
        result.stderr
    )


def test_the_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is written to a temporary beside it and moved into place: a failed move leaves
    the old file whole and no temporary behind; a good one leaves only the new file."""
    path = tmp_path / "taskboard.xml"
    path.write_text("old", encoding="utf-8")
    run = JUnitRun(MEMORY, 0, "summary", "60s")

    def refused(source: str, destination: str) -> None:
        raise OSError("refused")

    with monkeypatch.context() as patched:
        patched.setattr(os, "replace", refused)
        with pytest.raises(OSError, match="refused"):
            write_junit_xml(str(path), FuzzReport(seed=1), run)
    assert [p.name for p in tmp_path.iterdir()] == ["taskboard.xml"]
    assert path.read_text(encoding="utf-8") == "old"
    write_junit_xml(str(path), FuzzReport(seed=1), run)
    assert [p.name for p in tmp_path.iterdir()] == ["taskboard.xml"]
    assert the_case(path)[1].is_passed


def test_text_xml_cannot_hold_is_escaped() -> None:
    """Control characters in a report (a board's garbled bytes) are written as escapes, so
    the file stays well-formed XML."""
    report = FuzzReport(failure="the board returned 'a\x00b\x1b[31m'\nmore", seed=1)
    document = JUnitXml.fromstring(junit_xml(report, JUnitRun("exec:./board --x", 1, "s", "1s")))
    [suite] = list(document)
    [case] = list(suite)
    assert case.classname == "exec:./board --x"
    [failure] = case.result
    assert failure.text == "the board returned 'a\\x00b\\x1b[31m'\nmore"
    assert failure.type == "RunStopped"


def test_help_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    """taskboard fuzz --help describes --junit-xml."""
    with pytest.raises(SystemExit) as exited:
        main(["fuzz", "--help"])
    assert exited.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--junit-xml FILE" in out
    assert "JUnit XML" in out
