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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from taskboard._clock import ClockMode, as_utc
from taskboard._contract import Lease, Task
from taskboard.model import Allowed, Call, ExpiredLeasePolicy, Op, Outcome, Step, Window
from taskboard.stateful._settings import SETTING, SETTINGS
from taskboard.stateful._trace import FORGERIES, NEMESIS_HOOKS

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "TRACE_DIR_ENV",
    "ParallelOp",
    "ParallelProgram",
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
#: Version 3 added nemesis steps (SPEC 9), in the steps and in a program's prefix.
SCHEMA_VERSION = 3
#: Environment variable naming a directory: failing traces are written there.
TRACE_DIR_ENV = "TASKBOARD_TRACE_DIR"


class TraceFileError(ValueError):
    """A trace file that cannot be read: not JSON, not a trace, a newer schema, a bad field.

    The message names the file and the offending field, e.g. ``steps[3].op``. Loading
    a trace never changes anything, so fixing the file and loading again is safe.
    """


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


@dataclass(frozen=True)
class ParallelOp:
    """One operation of a program, with its token named, not given (boards mint tokens)."""

    op: str
    task: str
    agent: str = "a1"
    token: str = "latest"
    ttl_ticks: int = 0

    def __str__(self) -> str:
        if self.op == "claim":
            return f"claim({self.task!r}, agent={self.agent!r}, ttl={self.ttl_ticks})"
        if self.op == "advance":
            return f"advance({self.ttl_ticks} ticks)"
        if self.op == "expiry":
            return f"expiry({self.task!r}, lead={self.ttl_ticks})"
        if self.op in NEMESIS_HOOKS:
            return f"{NEMESIS_HOOKS[self.op]}(board)"
        return f"{self.op}({self.task!r}, token={self.token})"


@dataclass(frozen=True)
class ParallelProgram:
    """A sequential prefix, then one list of operations per thread."""

    deps: dict[str, tuple[str, ...]]
    prefix: tuple[ParallelOp, ...]
    threads: tuple[tuple[ParallelOp, ...], ...]


# -- writing --------------------------------------------------------------------------------


def _micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _when(value: object) -> object:
    return as_utc(value).isoformat() if isinstance(value, datetime) else value


def _task_json(task: Task) -> dict[str, Any]:
    lease = task.lease
    return {
        "id": task.id,
        "title": task.title,
        "deps": list(task.deps) if isinstance(task.deps, tuple | list) else task.deps,
        "state": str(task.state) if isinstance(task.state, str) else task.state,
        "owner": task.owner,
        "lease": None
        if not isinstance(lease, Lease)
        else {"token": lease.token, "fence": lease.fence, "until": _when(lease.until)},
        "seq": task.seq,
    }


def _step_json(step: Step) -> dict[str, Any]:
    record: dict[str, Any] = {"index": step.index, "at": step.at.isoformat()}
    if step.nemesis:
        record.update(kind="nemesis", hook=step.nemesis)
        if step.note:
            record["note"] = step.note
        return record
    if step.call is None:
        record.update(kind="clock", advance_us=_micros(step.advance or timedelta(0)))
        if step.note:
            record["note"] = step.note
        return record
    call, outcome = step.call, step.outcome or Outcome()
    record.update(
        kind="call",
        op=str(call.op),
        task_id=call.task_id,
        agent=call.agent,
        token_ref=step.token_ref,
        ttl_us=_micros(call.ttl),
        outcome={
            "error": outcome.error,
            "message": outcome.message,
            "task": None if outcome.task is None else _task_json(outcome.task),
        },
        allowed=[{"error": a.error, "clause": a.clause, "reason": a.reason} for a in step.allowed],
    )
    if step.window is not None:
        record["window"] = [step.window.earliest.isoformat(), step.window.latest.isoformat()]
    if step.note:
        record["note"] = step.note
    return record


def _op_json(op: ParallelOp) -> dict[str, Any]:
    return {
        "op": op.op,
        "task": op.task,
        "agent": op.agent,
        "token": op.token,
        "ttl_ticks": op.ttl_ticks,
    }


def _program_json(program: ParallelProgram) -> dict[str, Any]:
    return {
        "deps": {task: list(deps) for task, deps in program.deps.items()},
        "prefix": [_op_json(op) for op in program.prefix],
        "threads": [[_op_json(op) for op in ops] for ops in program.threads],
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
        "tasks": [_task_json(t) for t in trace.tasks],
        "steps": [_step_json(s) for s in trace.steps],
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


class _Reader:
    """Typed access to one JSON object, naming the path of whatever is wrong."""

    def __init__(self, source: str, where: str, value: object) -> None:
        if not isinstance(value, dict):
            raise self._error(source, where, f"expected an object, got {_kind(value)}")
        self.source, self.where, self.value = source, where, value

    @staticmethod
    def _error(source: str, where: str, problem: str) -> TraceFileError:
        return TraceFileError(f"{source}: {where or 'top level'}: {problem}")

    def error(self, key: str, problem: str) -> TraceFileError:
        return self._error(self.source, self._at(key), problem)

    def _at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if key not in self.value:
            if optional:
                return None
            raise self.error(key, "missing")
        value = self.value[key]
        if value is None and optional:
            return None
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.error(key, f"expected {names}, got {_kind(value)}")
        return value

    def duration(self, key: str, *, positive: bool = False) -> timedelta:
        """A non-negative (or positive) whole number of microseconds, as a timedelta."""
        micros = self.get(key, int)
        if micros > _LONGEST_US:
            raise self.error(key, f"{micros} microseconds is longer than a trace can span")
        if micros < 0 or (positive and micros == 0):
            raise self.error(
                key, f"must be {'positive' if positive else 'non-negative'}, got {micros}"
            )
        try:
            return timedelta(microseconds=micros)
        except OverflowError:
            raise self.error(key, f"{micros} microseconds is longer than any duration") from None

    def when(self, key: str, *, optional: bool = False) -> datetime | None:
        text = self.get(key, str, optional=optional)
        if text is None:
            return None
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise self.error(key, f"not an ISO 8601 time: {text!r}") from None
        if value.tzinfo is None:
            raise self.error(key, f"needs a UTC offset: {text!r}")
        return value.astimezone(UTC)

    def child(self, key: str, value: object) -> _Reader:
        return _Reader(self.source, self._at(key), value)


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _task(reader: _Reader) -> Task:
    lease_reader = reader.get("lease", dict, optional=True)
    lease = None
    if lease_reader is not None:
        lr = reader.child("lease", lease_reader)
        lease = Lease(lr.get("token", str), lr.get("fence", int), lr.when("until", optional=True))
    deps = reader.get("deps", list)
    for i, dep in enumerate(deps):
        if not isinstance(dep, str):
            raise reader.error(f"deps[{i}]", f"expected str, got {_kind(dep)}")
    return Task(
        id=reader.get("id", str),
        title=reader.get("title", str),
        deps=tuple(deps),
        state=reader.get("state", str),
        owner=reader.get("owner", str),
        lease=lease,
        seq=reader.get("seq", int),
    )


def _step(reader: _Reader, expected_index: int) -> Step:
    index = reader.get("index", int)
    if index != expected_index:
        raise reader.error("index", f"expected {expected_index}, got {index}")
    at = reader.when("at")
    assert at is not None
    kind = reader.get("kind", str)
    if kind == "nemesis":
        hook = reader.get("hook", str)
        if hook not in NEMESIS_HOOKS:
            raise reader.error("hook", f"expected 'restart' or 'drop', got {hook!r}")
        return Step(index, at, nemesis=hook, note=reader.get("note", str, optional=True) or "")
    if kind == "clock":
        advance = reader.duration("advance_us")
        note = reader.get("note", str, optional=True) or ""
        return Step(index, at, advance=advance, note=note)
    if kind != "call":
        raise reader.error("kind", f"expected 'call', 'clock' or 'nemesis', got {kind!r}")
    op_name = reader.get("op", str)
    if op_name not in Op.__members__.values():
        ops = ", ".join(o.value for o in Op)
        raise reader.error("op", f"{op_name!r} is not one of {ops}")
    ttl = reader.duration("ttl_us")
    ref = reader.get("token_ref", str)
    forgery = ref.partition(":")[2] if not ref.startswith("=") else ""
    if forgery and forgery not in FORGERIES:
        raise reader.error("token_ref", f"unknown forgery {forgery!r} in {ref!r}")
    call = Call(
        Op(op_name),
        reader.get("task_id", str),
        agent=reader.get("agent", str),
        token=ref[1:] if ref.startswith("=") else "",
        ttl=ttl,
    )
    out = reader.child("outcome", reader.get("outcome", dict))
    task_json = out.get("task", dict, optional=True)
    outcome = Outcome(
        error=out.get("error", str, optional=True),
        task=None if task_json is None else _task(out.child("task", task_json)),
        message=out.get("message", str, optional=True) or "",
    )
    allowed = []
    for i, item in enumerate(reader.get("allowed", list)):
        ar = reader.child(f"allowed[{i}]", item)
        allowed.append(
            Allowed(
                ar.get("error", str, optional=True), ar.get("clause", str), ar.get("reason", str)
            )
        )
    note = reader.get("note", str, optional=True) or ""
    window = None
    bounds = reader.get("window", list, optional=True)
    if bounds is not None:
        window = _window(reader, bounds)
    return Step(index, at, call, outcome, tuple(allowed), note=note, token_ref=ref, window=window)


def _window(reader: _Reader, bounds: list[Any]) -> Window:
    if len(bounds) != 2 or not all(isinstance(b, str) for b in bounds):
        raise reader.error("window", "expected [earliest, latest] as two ISO 8601 times")
    edges = reader.child("window", {"earliest": bounds[0], "latest": bounds[1]})
    earliest, latest = edges.when("earliest"), edges.when("latest")
    assert earliest is not None
    assert latest is not None
    if earliest > latest:
        raise reader.error("window", f"earliest {bounds[0]!r} is after latest {bounds[1]!r}")
    return Window(earliest, latest)


#: A duration longer than any clock could run a trace for (about 30 years), in microseconds.
_LONGEST_US = 10**15
_PROGRAM_OPS = (
    "claim",
    "renew",
    "release",
    "complete",
    "fail",
    "advance",
    "expiry",
    *NEMESIS_HOOKS,
)
_PROGRAM_TOKENS = ("mine", "latest", "previous")


def _program_op(reader: _Reader) -> ParallelOp:
    op = reader.get("op", str)
    if op not in _PROGRAM_OPS:
        raise reader.error("op", f"{op!r} is not one of {', '.join(_PROGRAM_OPS)}")
    token = reader.get("token", str)
    if token not in _PROGRAM_TOKENS:
        raise reader.error("token", f"{token!r} is not one of {', '.join(_PROGRAM_TOKENS)}")
    ticks = reader.get("ttl_ticks", int)
    if ticks < 0:
        raise reader.error("ttl_ticks", f"must be non-negative, got {ticks}")
    return ParallelOp(op, reader.get("task", str), reader.get("agent", str), token, ticks)


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
        _program_op(reader.child(f"prefix[{i}]", item))
        for i, item in enumerate(reader.get("prefix", list))
    )
    threads = []
    for t, ops in enumerate(reader.get("threads", list)):
        if not isinstance(ops, list):
            raise reader.error(f"threads[{t}]", f"expected a list, got {_kind(ops)}")
        threads.append(
            tuple(_program_op(reader.child(f"threads[{t}][{i}]", op)) for i, op in enumerate(ops))
        )
    return ParallelProgram(deps, prefix, tuple(threads))


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
        _step(top.child(f"steps[{i}]", item), i + 1)
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
    program_json = top.get("program", dict, optional=True)
    program = None if program_json is None else _program(top.child("program", program_json), ids)
    return Trace(
        start=start,
        tasks=tasks,
        steps=steps,
        verdict=verdict,
        created=top.get("created", str, optional=True) or "",
        program=program,
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
        raw = top.value.get(field.key)
        if field.optional and raw in (None, ""):
            continue
        if field.key not in top.value:
            raise top.error(field.key, "missing")
        try:
            header[field.field] = field.decode(raw)
        except ValueError as exc:
            raise top.error(field.key, str(exc)) from None
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
    """A standalone pytest module that replays ``trace`` against ``board`` (``module:Name``).

    The test fails while the board still breaks the contract on these steps, and passes
    once it is fixed: a shrunk failure becomes a regression test.
    """
    module, _, attr = board.partition(":")
    top = attr.partition(".")[0]
    clause = trace.verdict.clause if trace.verdict else "the contract"
    test_name = name or "test_" + re.sub(r"[^a-z0-9]+", "_", f"replays {clause}".lower()).strip("_")
    steps = len(trace.steps)
    wall = (
        "# Recorded on the wall clock (SPEC 7): a replay sleeps to keep each step's offset, but\n"
        "# cannot repeat the timing exactly, so this test may pass while the bug remains.\n"
        if trace.clock_mode == "wall"
        else ""
    )
    return (
        f'"""Regression test generated by taskboard from a shrunk failing trace ({clause})."""\n'
        "\n"
        f"from {module} import {top}\n"
        "from taskboard.stateful import parse_trace, replay_trace\n"
        "\n"
        f"TRACE = {_python_string(trace_to_json(trace))}\n"
        "\n"
        "\n"
        f"{wall}"
        f"def {test_name}() -> None:\n"
        f'    """The {steps} recorded steps that once broke {clause} now keep the contract."""\n'
        f"    result = replay_trace(parse_trace(TRACE), {attr})\n"
        "    assert result.passed, result.report\n"
    )


def _python_string(text: str) -> str:
    # A raw triple-quoted literal when the JSON allows it; repr otherwise.
    if "'''" not in text and not text.endswith("\\"):
        return "r'''" + text + "'''"
    return repr(text)
