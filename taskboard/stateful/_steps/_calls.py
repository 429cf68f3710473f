"""A recorded board call, as every kind of step that calls the board writes, reads, replays
and renders it: the call with its token named by lease (``L3``), what the board did, what
the model allowed, and on the wall clock the call's window."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import datetime
from typing import Any

from taskboard.model import Allowed, Call, Op, Outcome, Step
from taskboard.stateful._fields import Reader, micros, read_task, read_window, task_json
from taskboard.stateful._steps._base import Replay, StepKind
from taskboard.stateful._trace import FORGERIES, render_call, render_outcome, resolve_token

__all__ = ["CallKind", "describe_call", "read_call_step", "replay_call", "write_call_step"]


def write_call_step(step: Step) -> dict[str, Any]:
    """The fields of a recorded call."""
    assert step.call is not None
    call, outcome = step.call, step.outcome or Outcome()
    record: dict[str, Any] = {
        "kind": "call",
        "op": str(call.op),
        "task_id": call.task_id,
        "agent": call.agent,
        "token_ref": step.token_ref,
        "ttl_us": micros(call.ttl),
        "outcome": {
            "error": outcome.error,
            "message": outcome.message,
            "task": None if outcome.task is None else task_json(outcome.task),
        },
        "allowed": [
            {"error": a.error, "clause": a.clause, "reason": a.reason} for a in step.allowed
        ],
    }
    if step.window is not None:
        record["window"] = [step.window.earliest.isoformat(), step.window.latest.isoformat()]
    return record


def read_call_step(op: Op, reader: Reader, index: int, at: datetime) -> Step:
    """A recorded call of ``op``, as :func:`write_call_step` wrote it.

    Raises:
        TraceFileError: a field is missing or wrong (an unknown forgery, say).
    """
    ttl = reader.duration("ttl_us")
    ref = reader.get("token_ref", str)
    forgery = ref.partition(":")[2] if not ref.startswith("=") else ""
    if forgery and forgery not in FORGERIES:
        raise reader.error("token_ref", f"unknown forgery {forgery!r} in {ref!r}")
    call = Call(
        op,
        reader.get("task_id", str),
        agent=reader.get("agent", str),
        token=ref[1:] if ref.startswith("=") else "",
        ttl=ttl,
    )
    out = reader.child("outcome", reader.get("outcome", dict))
    task = out.get("task", dict, optional=True)
    outcome = Outcome(
        error=out.get("error", str, optional=True),
        task=None if task is None else read_task(out.child("task", task)),
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
    bounds = reader.get("window", list, optional=True)
    window = None if bounds is None else read_window(reader, bounds)
    note = reader.get("note", str, optional=True) or ""
    return Step(index, at, call, outcome, tuple(allowed), note=note, token_ref=ref, window=window)


def replay_call(replay: Replay, step: Step) -> None:
    """Make the recorded call again at its recorded time, its token the one this board's
    lease of the same label holds, and note an outcome that differs but is allowed."""
    session = replay.session
    assert step.call is not None
    replay.untils.follow(step)
    at = step.at + replay.shift
    if at > session.clock.now():
        session.clock_to(at)
    call = step.call
    if call.op is not Op.CLAIM:
        if not session.supports(call.op):
            replay.differences.append(f"step {step.index}: skipped, the board has no {call.op}()")
            return
        tokens = {label: token for token, label in session.labels.items()}
        call = dataclasses.replace(call, token=resolve_token(step.token_ref, tokens))
    outcome = session.perform(call, step.token_ref)
    recorded = step.outcome
    if recorded is not None and recorded.error != outcome.error:
        was, now = recorded.error or "success", outcome.error or "success"
        replay.differences.append(f"step {step.index}: recorded {was}, now {now} (allowed)")


def describe_call(step: Step, start: datetime, label: Callable[[str], str]) -> str:
    """A recorded call as a report shows it: the call, then what the board did."""
    assert step.call is not None
    text = f"{render_call(step.call, label)} -> {render_outcome(step.outcome, start, label)}"
    return text + (f"  ({step.note})" if step.note else "")


class CallKind(StepKind):
    """A kind whose recorded steps are board calls of the operations it names: they are
    written, read, replayed and rendered as above."""

    def write_step(self, step: Step) -> dict[str, Any]:
        return write_call_step(step)

    def read_step(self, name: str, reader: Reader, index: int, at: datetime) -> Step:
        return read_call_step(Op(name), reader, index, at)

    def replay(self, replay: Replay, step: Step) -> None:
        replay_call(replay, step)

    def describe(self, step: Step, start: datetime, label: Callable[[str], str]) -> str:
        return describe_call(step, start, label)
