"""Trace files: a failing run as versioned JSON, to replay, share and turn into a test.

A trace holds what a board needs to run the steps again (the initial tasks, the start
time, the clock resolution and mode, the SPEC 3.4 pin) and every step as recorded: the call, the
clock, what the board returned and what the model allowed. Tokens are written as
references to the lease that minted them (``L3``), so a trace recorded on one board
replays on another, which mints other tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from taskboard._clock import ClockMode
from taskboard._contract import Task
from taskboard.model import ExpiredLeasePolicy, Step
from taskboard.stateful._fields import Reader as _Reader
from taskboard.stateful._fields import TraceFileError
from taskboard.stateful._fields import kind_of as _kind
from taskboard.stateful._fields import read_task as _task
from taskboard.stateful._fields import task_json as _task_json
from taskboard.stateful._settings import SETTING, SETTINGS
from taskboard.stateful._steps import (
    ParallelProgram,
    ProgramStep,
    read_program_step,
    read_step,
    write_step,
)

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "TRACE_DIR_ENV",
    "ParallelProgram",
    "ProgramStep",
    "Trace",
    "TraceFileError",
    "Verdict",
    "load_trace",
    "parse_trace",
    "render_regression_test",
    "trace_to_json",
    "write_trace",
]

SCHEMA = "taskboard-trace"
#: The trace format version this taskboard writes, and the newest it reads. Version 2 added
#: the clock mode, the skew and each call's window (SPEC 7); a version 1 trace is manual.
#: Version 3 added nemesis steps (SPEC 9), in the steps and in a program's prefix. Version 4
#: writes each program step with its own fields (``advance`` its ``ticks``, ``expiry`` its
#: ``lead``, a nemesis step its ``op`` alone). Version 5 names a board command's target
#: ``exec:COMMAND`` and adds its ``declared_ops``; versions 1 to 4 still read.
SCHEMA_VERSION = 5
#: How a trace names a board command (SPEC 10) as its target: ``exec:./myboard --flag``.
EXEC_PREFIX = "exec:"
#: Environment variable naming a directory: failing traces are written there.
TRACE_DIR_ENV = "TASKBOARD_TRACE_DIR"


@dataclass(frozen=True)
class Verdict:
    """What the checker concluded about the traced run: the violation, as reported."""

    step: int | None
    clause: str
    expected: str
    observed: str
    report: str


@dataclass(frozen=True)
class Trace:
    """A run of the machine as data: enough to replay it on any board."""

    start: datetime
    resolution: timedelta
    policy: ExpiredLeasePolicy
    tasks: tuple[Task, ...]
    steps: tuple[Step, ...]
    verdict: Verdict | None = None
    #: ``module:Name`` of the board factory or machine the trace was recorded on, if known.
    target: str = ""
    created: str = ""
    #: A parallel-mode trace: the program (its prefix and threads) that gave a history with
    #: no sequential order the contract allows; ``steps`` then hold that history's calls.
    program: ParallelProgram | None = None
    #: SPEC 7: ``"wall"`` for a run on the wall clock, which replays on the wall clock too.
    clock_mode: ClockMode = "manual"
    #: SPEC 7: the board's clock skew the run was judged with (wall clock only).
    skew: timedelta = timedelta(milliseconds=1)
    #: How far each client's ``time.time()`` was shifted (``client_clock_skew``; none: 0).
    client_skew: timedelta = timedelta(0)
    #: How often the board renewed its leases by itself (``keep_alive_interval``; ``None``:
    #: it did not).
    keep_alive: timedelta | None = None
    #: A board command's (``exec:COMMAND``, SPEC 10): the ops its hello declared; ``None``
    #: for a board in this process, or a trace from before version 5.
    declared_ops: tuple[str, ...] | None = None


# -- writing --------------------------------------------------------------------------------


def _program_json(program: ParallelProgram) -> dict[str, Any]:
    return {
        "deps": {task: list(deps) for task, deps in program.deps.items()},
        "prefix": [step.to_json() for step in program.prefix],
        "threads": [[step.to_json() for step in steps] for steps in program.threads],
        # Only a controlled race has one: older readers never see the key otherwise.
        **({} if program.schedule is None else {"schedule": list(program.schedule)}),
        **({"explored": program.explored} if program.explored else {}),
    }


def trace_to_json(trace: Trace) -> str:
    """The trace as JSON text (schema :data:`SCHEMA`, version :data:`SCHEMA_VERSION`)."""
    verdict = trace.verdict
    document = {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "created": trace.created,
        "start": trace.start.isoformat(),
        **{field.key: field.encode(getattr(trace, field.field)) for field in _HEADER},
        "declared_ops": None if trace.declared_ops is None else list(trace.declared_ops),
        "tasks": [_task_json(t) for t in trace.tasks],
        "steps": [write_step(s) for s in trace.steps],
        "program": None if trace.program is None else _program_json(trace.program),
        "verdict": None
        if verdict is None
        else {
            "step": verdict.step,
            "clause": verdict.clause,
            "expected": verdict.expected,
            "observed": verdict.observed,
            "report": verdict.report,
        },
    }
    return json.dumps(document, indent=2, ensure_ascii=False, default=repr) + "\n"


def write_trace(trace: Trace, directory: str | os.PathLike[str]) -> Path:
    """Write the trace into ``directory`` (created if missing) and return the file's path.

    The name comes from the failure, not the run: the clause and a digest of the
    steps, so the same shrunk failure found twice is one file.
    """
    text = trace_to_json(trace)
    # Digest what the steps did, not the tokens the board happened to mint (often random).
    shape = [
        (step.at, step.advance, step.token_ref, step.outcome and step.outcome.error)
        + ((step.call.op, step.call.task_id, step.call.agent, step.call.ttl) if step.call else ())
        for step in trace.steps
    ]
    digest = hashlib.sha256(repr((shape, trace.program)).encode()).hexdigest()[:10]
    clause = trace.verdict.clause if trace.verdict else "passing"
    slug = re.sub(r"[^a-z0-9]+", "-", clause.lower()).strip("-")[:40]
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    target = path / f"trace-{slug}-{digest}.json"
    target.write_text(text, encoding="utf-8")
    return target


# -- reading --------------------------------------------------------------------------------


def _program(reader: _Reader, task_ids: Sequence[str]) -> ParallelProgram:
    deps_reader = reader.child("deps", reader.get("deps", dict))
    if sorted(deps_reader.value) != sorted(task_ids):
        raise reader.error("deps", f"must name exactly the trace's tasks {sorted(task_ids)!r}")
    deps: dict[str, tuple[str, ...]] = {}
    for task in deps_reader.value:
        listed = deps_reader.get(task, list)
        if not all(isinstance(dep, str) for dep in listed):
            raise deps_reader.error(task, "expected a list of task ids")
        deps[task] = tuple(listed)
    prefix = tuple(
        read_program_step(reader.child(f"prefix[{i}]", item))
        for i, item in enumerate(reader.get("prefix", list))
    )
    threads = []
    for t, ops in enumerate(reader.get("threads", list)):
        if not isinstance(ops, list):
            raise reader.error(f"threads[{t}]", f"expected a list, got {_kind(ops)}")
        threads.append(
            tuple(
                read_program_step(reader.child(f"threads[{t}][{i}]", op))
                for i, op in enumerate(ops)
            )
        )
    schedule = reader.get("schedule", list, optional=True)
    if schedule is not None and not all(
        isinstance(choice, int) and not isinstance(choice, bool) and choice >= 0
        for choice in schedule
    ):
        raise reader.error("schedule", "expected a list of non-negative integers")
    explored = reader.get("explored", str, optional=True) or ""
    return ParallelProgram(
        deps,
        prefix,
        tuple(threads),
        None if schedule is None else tuple(schedule),
        explored=explored,
    )


def parse_trace(text: str, source: str = "<trace>") -> Trace:
    """Read a trace from JSON text.

    Raises:
        TraceFileError: not JSON, not a taskboard trace, a schema version newer than
            :data:`SCHEMA_VERSION`, or a field of the wrong kind (named by its path).
    """
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFileError(f"{source}: not JSON: {exc}") from None
    top = _Reader(source, "", document)
    if top.get("schema", str) != SCHEMA:
        raise top.error("schema", f"expected {SCHEMA!r}: this is not a taskboard trace")
    version = top.get("version", int)
    if version > SCHEMA_VERSION:
        raise top.error(
            "version",
            f"trace schema version {version} is newer than this taskboard reads "
            f"({SCHEMA_VERSION}); upgrade taskboard to replay it",
        )
    if version < 1:
        raise top.error("version", f"expected a version from 1, got {version}")
    header = _header(top)
    tasks = tuple(
        _task(top.child(f"tasks[{i}]", item)) for i, item in enumerate(top.get("tasks", list))
    )
    ids = [task.id for task in tasks]
    if len(set(ids)) != len(ids):
        raise top.error("tasks", f"task ids must be unique, got {ids!r}")
    steps = tuple(
        read_step(top.child(f"steps[{i}]", item), i + 1)
        for i, item in enumerate(top.get("steps", list))
    )
    verdict_json = top.get("verdict", dict, optional=True)
    verdict = None
    if verdict_json is not None:
        vr = top.child("verdict", verdict_json)
        verdict = Verdict(
            vr.get("step", int, optional=True),
            vr.get("clause", str),
            vr.get("expected", str),
            vr.get("observed", str),
            vr.get("report", str),
        )
    start = top.when("start")
    assert start is not None
    declared = top.get("declared_ops", list, optional=True)
    if declared is not None and not all(isinstance(op, str) for op in declared):
        raise top.error("declared_ops", "expected a list of op names")
    program_json = top.get("program", dict, optional=True)
    program = None if program_json is None else _program(top.child("program", program_json), ids)
    return Trace(
        start=start,
        tasks=tasks,
        steps=steps,
        verdict=verdict,
        created=top.get("created", str, optional=True) or "",
        program=program,
        declared_ops=None if declared is None else tuple(declared),
        **header,
    )


#: The settings a trace's header records (SPEC 7's clock among them), in the table's order.
_HEADER = tuple(setting.trace for setting in SETTINGS if setting.trace is not None)


def _header(top: _Reader) -> dict[str, Any]:
    """The settings a trace's header records, by :class:`Trace` field; one that is missing
    (an older trace) or null is left to the field's default.

    Raises:
        TraceFileError: a required one is missing, one has a value its setting does not
            take, or one that needs ``clock_mode`` 'wall' is set on another clock.
    """
    header: dict[str, Any] = {}
    for field in _HEADER:
        if field.optional and top.value.get(field.key) in (None, ""):
            continue
        header[field.field] = field.read(top, field.key)
    mode = SETTING["clock_mode"].trace
    assert mode is not None
    wall = header.get(mode.field) == "wall"
    for setting in SETTINGS:
        if setting.wall_only and setting.trace and header.get(setting.trace.field) and not wall:
            raise top.error(setting.trace.key, "needs clock_mode 'wall'")
    return header


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """Read a trace file.

    Raises:
        TraceFileError: the file is missing or unreadable, or :func:`parse_trace` rejects it.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFileError(f"{path}: cannot read the trace: {exc}") from None
    return parse_trace(text, str(path))


def render_regression_test(trace: Trace, board: str, name: str = "") -> str:
    """A standalone pytest module that replays ``trace`` against ``board``: ``module:Name``,
    or ``exec:COMMAND``, a board command (SPEC 10) the test starts as the trace did.

    The test fails while the board still breaks the contract on these steps, and passes
    once it is fixed: a shrunk failure becomes a regression test.
    """
    clause = trace.verdict.clause if trace.verdict else "the contract"
    test_name = name or "test_" + re.sub(r"[^a-z0-9]+", "_", f"replays {clause}".lower()).strip("_")
    steps = len(trace.steps)
    wall = (
        "# Recorded on the wall clock (SPEC 7): a replay sleeps to keep each step's offset, but\n"
        "# cannot repeat the timing exactly, so this test may pass while the bug remains.\n"
        if trace.clock_mode == "wall"
        else ""
    )
    if board.startswith(EXEC_PREFIX):
        # The command as the trace ran it: a string literal, never code.
        imports = "from taskboard.stateful import BoardMachine, parse_trace, replay_trace\n"
        setup = f"COMMAND = {board.removeprefix(EXEC_PREFIX)!r}\n\n"
        against = "BoardMachine.for_command(COMMAND)"
    else:
        module, _, attr = board.partition(":")
        top = attr.partition(".")[0]
        imports = (
            f"from {module} import {top}\n"
            "from taskboard.stateful import parse_trace, replay_trace\n"
        )
        setup = ""
        against = attr
    return (
        f'"""Regression test generated by taskboard from a shrunk failing trace ({clause})."""\n'
        "\n"
        f"{imports}"
        "\n"
        f"{setup}"
        f"TRACE = {_python_string(trace_to_json(trace))}\n"
        "\n"
        "\n"
        f"{wall}"
        f"def {test_name}() -> None:\n"
        f'    """The {steps} recorded steps that once broke {clause} now keep the contract."""\n'
        f"    result = replay_trace(parse_trace(TRACE), {against})\n"
        "    assert result.passed, result.report\n"
    )


def _python_string(text: str) -> str:
    # A raw triple-quoted literal when the JSON allows it; repr otherwise.
    if "'''" not in text and not text.endswith("\\"):
        return "r'''" + text + "'''"
    return repr(text)
