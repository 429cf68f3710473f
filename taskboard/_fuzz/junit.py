"""``taskboard fuzz --junit-xml FILE``: a run's verdict as a JUnit XML file that CI systems read.

One file per run, one test case per run (``--workers`` included): test suite
``taskboard fuzz``, class name the target (``module:Name`` or ``exec:CMD``), test name
``contract``. A contract violation is a ``<failure>``, an infrastructure fault an
``<error>``, anything else (the budget or example count spent, or Ctrl-C) a pass. The file
is written atomically: a temporary file in the same directory, then :func:`os.replace`.
"""

from __future__ import annotations

import os
import re
import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from taskboard._fuzz.options import write_atomically
from taskboard._fuzz.report import FuzzReport
from taskboard._fuzz.targets import UsageError

__all__ = [
    "SUITE",
    "TEST_NAME",
    "JUnitRun",
    "check_junit_path",
    "junit_xml",
    "remove_old_junit",
    "verdict_of",
    "write_junit_xml",
]

#: The test suite's name: what a CI system groups a night's runs by.
SUITE = "taskboard fuzz"
#: The test case's name; its class name is the target.
TEST_NAME = "contract"
#: The longest ``message`` attribute (a one-line summary; the text has the whole report).
_MESSAGE_LIMIT = 300
#: Characters XML 1.0 does not allow (control characters, lone surrogates, U+FFFE/U+FFFF).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


@dataclass(frozen=True)
class JUnitRun:
    """What the command line knows of a run besides its report."""

    #: The target as given: ``module:Name`` or ``exec:CMD``.
    target: str
    #: The command's exit code for this run (0, 1, 3 or 130).
    exit_code: int
    #: The summary the command printed (counts, coverage): the test case's ``system-out``.
    summary: str
    #: ``--budget`` as given (``60s``).
    budget: str
    max_examples: int | None = None


def check_junit_path(path: str) -> None:
    """Check that ``path`` can receive the file: not a directory, and in a directory this
    process may write in (created if missing), since the file is written beside it first.

    Raises:
        UsageError: it cannot.
    """
    if not path.strip():
        raise UsageError("--junit-xml needs a file name")
    where = Path(path).absolute()
    if where.is_dir():
        raise UsageError(f"--junit-xml {path!r} is a directory, not a file")
    existing = next(p for p in where.parents if p.exists())
    if not existing.is_dir():
        raise UsageError(f"--junit-xml {path!r}: {str(existing)!r} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"--junit-xml {path!r}: cannot write in {str(existing)!r}")


def remove_old_junit(path: str) -> None:
    """Remove a file an earlier run left at ``path``, so that a run that ends without a
    verdict (killed, a second Ctrl-C, a usage mistake) leaves no stale result behind.

    Raises:
        UsageError: it cannot be removed.
    """
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        reason = exc.strerror or exc
        raise UsageError(f"--junit-xml {path!r}: cannot remove the old file: {reason}") from None


def junit_xml(report: FuzzReport, run: JUnitRun, *, now: datetime | None = None) -> bytes:
    """The JUnit XML document of ``report`` (UTF-8, with its declaration)."""
    ended = now or datetime.now(UTC)
    started = (ended - timedelta(seconds=report.seconds)).isoformat(timespec="seconds")
    seconds = f"{report.seconds:.3f}"
    violation = report.failure is not None and not report.fault
    fault = report.failure is not None and report.fault
    counts = {
        "tests": "1",
        "failures": str(int(violation)),
        "errors": str(int(fault)),
        "skipped": "0",
        "time": seconds,
    }
    root = ET.Element("testsuites", {"name": SUITE, **counts})
    suite = ET.SubElement(
        root,
        "testsuite",
        {"name": SUITE, **counts, "timestamp": started, "hostname": socket.gethostname()},
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in _properties(report, run):
        ET.SubElement(properties, "property", {"name": name, "value": _clean(value)})
    case = ET.SubElement(
        suite, "testcase", {"classname": _clean(run.target), "name": TEST_NAME, "time": seconds}
    )
    if report.failure is not None:
        kind = "InfrastructureFault" if fault else "ContractViolation"
        if not fault and report.clause is None:
            kind = "RunStopped"  # a crash of the board's hooks or of a worker: exit 1 too
        result = ET.SubElement(
            case,
            "error" if fault else "failure",
            {"message": _clean(_message(report)), "type": kind},
        )
        result.text = _clean(_failure_text(report))
    ET.SubElement(case, "system-out").text = _clean(run.summary)
    ET.indent(root)
    body = ET.tostring(root, encoding="unicode")
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{body}\n'.encode()


def write_junit_xml(path: str, report: FuzzReport, run: JUnitRun) -> None:
    """Write :func:`junit_xml` to ``path`` atomically: a reader sees the old file or the new
    one, never half of one. Missing directories on the path are created.

    Raises:
        OSError: the file could not be written (the path was checked before the run).
    """
    write_atomically(Path(path), junit_xml(report, run))


def verdict_of(report: FuzzReport) -> str:
    """The run's verdict in one word: ``pass``, ``violation``, ``failure`` (the run stopped on
    an error of the board's hooks), ``fault`` or ``interrupted``."""
    if report.failure is not None:
        if report.fault:
            return "fault"
        return "failure" if report.clause is None else "violation"
    return "interrupted" if report.interrupted else "pass"


def _properties(report: FuzzReport, run: JUnitRun) -> list[tuple[str, str]]:
    rows = [
        ("target", run.target),
        ("verdict", verdict_of(report)),
        ("exit_code", str(run.exit_code)),
        ("examples", str(report.examples)),
        ("parallel_programs", str(report.parallel_programs)),
        ("steps", str(report.steps)),
        ("seconds", f"{report.seconds:.1f}"),
        ("seed", "" if report.seed is None else str(report.seed)),
        ("workers", str(report.workers)),
        ("mode", report.mode),
        ("clock", report.clock_mode),
        ("budget", run.budget),
        ("interrupted", "true" if report.interrupted else "false"),
    ]
    if run.max_examples is not None:
        rows.append(("max_examples", str(run.max_examples)))
    if report.clause is not None:
        rows.append(("clause", report.clause))
    if report.trace_file is not None:
        rows.append(("trace_file", report.trace_file))
    if report.shrink_runs:
        rows.append(("shrink_runs", str(report.shrink_runs)))
    if report.settings:
        rows.append(("settings", report.settings))
    return rows


def _message(report: FuzzReport) -> str:
    """One line: the report's first line, with the SPEC clause of a violation."""
    assert report.failure is not None
    first = next((line.strip() for line in report.failure.splitlines() if line.strip()), "")
    if report.clause is not None and report.clause not in first:
        first = f"{first} ({report.clause})"
    if len(first) > _MESSAGE_LIMIT:
        first = first[: _MESSAGE_LIMIT - 1] + "…"
    return first


def _failure_text(report: FuzzReport) -> str:
    """The report the command printed, with the trace file named even when its own lines
    do not (a fault report written before the trace was)."""
    assert report.failure is not None
    text = report.failure
    if report.trace_file is not None and report.trace_file not in text:
        text += f"\n\ntrace file: {report.trace_file}"
    return text


def _clean(text: str) -> str:
    """``text`` with the characters XML 1.0 cannot hold written as escapes (``\\x1b``)."""
    return _NOT_XML.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
