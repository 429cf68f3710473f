"""The record of what the machine did, step by step, and how it reads in a report."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from taskboard.model import Op, Outcome, Step, format_duration

__all__ = ["render_step"]


def render_step(
    step: Step, start: datetime, token_label: Callable[[str], str], *, marker: str = ""
) -> str:
    """One line of a trace: index, clock offset, what was done, what the board did."""
    when = f"+{format_duration(step.at - start)}"
    if step.call is None:
        moved = format_duration(step.advance or timedelta(0))
        what = f"clock advances {moved}" if step.advance else "clock stays"
        text = what + (f"  ({step.note})" if step.note else "")
    else:
        call = step.call
        if call.op is Op.CLAIM:
            args = f"{call.task_id!r}, agent={call.agent!r}, ttl={format_duration(call.ttl)}"
        else:
            args = f"{call.task_id!r}, token={token_label(call.token)}"
            if call.op is Op.RENEW:
                args += f", ttl={format_duration(call.ttl)}"
        text = f"{call.op}({args}) -> {_render_outcome(step.outcome, start, token_label)}"
    return f"{marker:>3}{step.index:>4}  {when:>9}  {text}"


def _render_outcome(
    outcome: Outcome | None, start: datetime, token_label: Callable[[str], str]
) -> str:
    if outcome is None:
        return "?"
    if outcome.error is not None:
        return outcome.error
    task = outcome.task
    if task is None or task.lease is None:
        return "ok"
    lease = task.lease
    until = "no expiry" if lease.until is None else f"until +{format_duration(lease.until - start)}"
    return f"ok {token_label(lease.token)} fence={lease.fence!r} {until}"
