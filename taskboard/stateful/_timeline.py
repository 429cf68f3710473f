"""The parallel mode's HTML timeline of a concurrent history (see :func:`timeline_html`)."""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from taskboard.model import LinearizabilityResult, Operation
from taskboard.stateful._trace import render_call

__all__ = ["lane_name", "micros_text", "timeline_html"]


def lane_name(thread: int, clients: bool) -> str:
    """A thread's lane in a report or timeline, naming its client when each has one."""
    return f"thread {thread} (client {thread})" if clients else f"thread {thread}"


def micros_text(seconds: float) -> str:
    """Seconds on the monotonic clock as whole microseconds (``inf`` for no response)."""
    return "inf" if math.isinf(seconds) else str(round(seconds * 1e6))


#: The timeline's geometry in CSS pixels: the lane labels' column, the time axis, the room
#: right of it, the axis's band, a call's bar, one line of a call's label (11 px monospace,
#: about 6.7 px a character), and how many characters a line of a failing call's reason takes.
_TIMELINE_LABELS = 190
_TIMELINE_PLOT = 960
_TIMELINE_MARGIN = 30
_TIMELINE_AXIS = 44
_TIMELINE_BAR = 20
_TIMELINE_LINE = 14
_TIMELINE_CHAR = 6.7
_TIMELINE_WRAP = 78
#: Where the time axis ends (CSS pixels from the left), and the whole chart's width.
_TIMELINE_RIGHT = _TIMELINE_LABELS + _TIMELINE_PLOT
_TIMELINE_WIDTH = _TIMELINE_RIGHT + _TIMELINE_MARGIN
#: A call's colour by what the checker made of it; red (#d33) is a call it could not place.
_TIMELINE_COLOURS = {
    "placed": "#48c",
    "stuck": "#d33",
    "unplaced": "#9db4cc",
    "ambiguous": "#888",
}
_TIMELINE_STATUS = {
    "placed": "placed in the longest order found",
    "stuck": "cannot come next: the failing call",
    "unplaced": "not reached by the longest order",
    "ambiguous": "no response (infrastructure fault): may or may not have applied",
}
_TIMELINE_CSS = """
body{font:14px/1.45 "DejaVu Sans",Arial,sans-serif;color:#222;margin:20px 28px;max-width:1240px}
h1{font-size:20px;margin:0 0 6px}h1 .verdict{color:#b11}h1 .verdict.ok{color:#282}
h2{font-size:16px;margin:22px 0 8px}
.why{border:2px solid #d33;background:#fff3f3;border-radius:6px;padding:2px 16px 8px}
.why h2{margin:10px 0 4px}
.why p{margin:6px 0}.why ul{margin:6px 0;padding-left:22px}
.why li{margin:4px 0}.why .reason{font-family:"DejaVu Sans Mono",monospace;font-size:12.5px}
code,.mono{font-family:"DejaVu Sans Mono",monospace;font-size:12.5px}
.legend span{display:inline-block;margin-right:18px;white-space:nowrap}
.legend i{display:inline-block;width:22px;height:11px;border-radius:2px;margin-right:6px;
vertical-align:middle}
.chart{overflow-x:auto;width:max-content;max-width:100%;border:1px solid #ccc;border-radius:4px;
background:#fff}
svg{display:block}svg text{font-family:"DejaVu Sans Mono",monospace;font-size:11px}
svg .lane-name{font-family:"DejaVu Sans",Arial,sans-serif;font-size:13px;font-weight:bold}
svg .tick{font-family:"DejaVu Sans",Arial,sans-serif;font-size:11px;fill:#555}
svg .label text{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
svg .stuck .label text{fill:#a00}svg .stuck .label .head{font-weight:bold}
table{border-collapse:collapse;margin-top:6px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top;font-size:13px}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.stuck td{background:#fff0f0}td.nowrap{white-space:nowrap}td small{white-space:normal}
"""


def _timeline_status(op: Operation, result: LinearizabilityResult) -> str:
    """What the checker made of ``op``: a key of :data:`_TIMELINE_COLOURS`."""
    if op.id in result.stuck:
        return "stuck"
    if op.id in result.order:
        return "placed"
    return "ambiguous" if op.outcome is None else "unplaced"


def _timeline_token(token: str) -> str:
    return repr(token) if len(token) <= 12 else repr(token[:10] + "…")


def _timeline_outcome(op: Operation) -> str:
    """A call's outcome in words: the error's name, or ok with the task's state and fence."""
    if op.outcome is None:
        return "? no response (infrastructure fault)"
    if op.outcome.error is not None:
        return op.outcome.error
    task = op.outcome.task
    if task is None:
        return "ok"
    fence = f", fence {task.lease.fence!r}" if task.lease is not None else ""
    return f"ok: {task.state}{fence}"


def _timeline_scale(span: float) -> tuple[str, float, float]:
    """The axis's unit (name, seconds), and a round tick step (seconds) giving 5 to 10 ticks."""
    unit, size = ("µs", 1e-6) if span <= 5e-3 else ("ms", 1e-3) if span <= 5.0 else ("s", 1.0)
    rough = span / 8
    power = 10.0 ** math.floor(math.log10(rough))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= rough)
    return unit, size, step


def _timeline_tick(value: float, size: float, unit: str) -> str:
    return f"{round(value / size, 6):g} {unit}"


def _timeline_clip(line: str) -> str:
    """A label line cut to fit the chart; the table below the chart has it whole."""
    most = int(_TIMELINE_PLOT / _TIMELINE_CHAR) - 2
    return line if len(line) <= most else line[: most - 1] + "…"


def _timeline_reason_lines(reason: str) -> list[str]:
    return textwrap.wrap(f"✗ cannot come next: {reason}", _TIMELINE_WRAP) or [reason]


def timeline_html(
    history: Sequence[Operation],
    result: LinearizabilityResult,
    *,
    clients: bool = False,
    interleaving: Sequence[str] = (),
) -> str:
    """A self-contained HTML page (inline CSS and SVG, no script) of a concurrent history.

    One lane per thread, labelled with its thread and, when every thread ran on a client of
    its own (``clients``, SPEC 8), its client; a time axis in µs (or ms, s) from the first
    invocation; one bar per call, from its invocation to its response, labelled with the
    call, its outcome (the error's name, or the task's state) and the fence of any lease it
    returned. The calls the checker could not place are red and carry its reason; above the
    chart the verdict is said in words, below it a table lists every call, and, for a
    controlled race, the ``interleaving``: one line per turn, in order. Every string that
    came from the board is HTML-escaped."""
    page = _Page.of(history, result, clients).html()
    if not interleaving:
        return page
    turns = "".join(f"<li>{html.escape(turn)}</li>" for turn in interleaving)
    section = (
        "<h2>Interleaving</h2><p>The threads ran one at a time (controlled scheduling): each "
        "turn goes on from the round trip named to the thread's next one.</p>"
        f'<ol class="mono">{turns}</ol>'
    )
    return page.replace("</body></html>\n", f"{section}</body></html>\n")


#: A call's label under its bar: the call, its label's lines, where the label starts (x) and
#: its tier (the labels of a lane go in tiers, so that none overlaps another).
_Label = tuple[Operation, list[str], float, int]


@dataclass(frozen=True)
class _Axis:
    """The time axis: where it starts (the first invocation), its unit, its round tick step
    and how many steps it spans."""

    start: float
    unit: str
    size: float
    step: float
    ticks: int

    @classmethod
    def of(cls, history: Sequence[Operation]) -> _Axis:
        """The axis of ``history``: past its last response, with room for an open-ended bar."""
        start = min((op.invoked for op in history), default=0.0)
        finite = [op.returned for op in history if not math.isinf(op.returned)]
        end = max([*finite, *(op.invoked for op in history)], default=start)
        unit, size, step = _timeline_scale(max(end - start, 1e-6))
        ticks = max(1, math.ceil((end - start) / step - 1e-9))
        open_ended = any(math.isinf(op.returned) for op in history)
        if open_ended or (end - start) > ticks * step - step / 4:
            ticks += 1  # room for an open-ended bar, or for the last label to breathe
        return cls(start, unit, size, step, ticks)

    def x(self, t: float) -> float:
        """Where the monotonic time ``t`` is on the chart."""
        return _TIMELINE_LABELS + _TIMELINE_PLOT * (t - self.start) / (self.ticks * self.step)

    def svg(self) -> str:
        """The axis's band: its caption, its line and its labelled ticks."""
        axis = [
            f'<rect x="0" y="0" width="{_TIMELINE_WIDTH}" height="{_TIMELINE_AXIS}" fill="#fff"/>',
            '<text class="tick" x="10" y="18">time since the</text>'
            '<text class="tick" x="10" y="32">first invocation</text>',
            f'<line x1="{_TIMELINE_LABELS}" x2="{_TIMELINE_RIGHT}" y1="{_TIMELINE_AXIS - 8}" '
            f'y2="{_TIMELINE_AXIS - 8}" stroke="#444"/>',
        ]
        for n in range(self.ticks + 1):
            tx = self.x(self.start + n * self.step)
            axis.append(
                f'<g class="axis-tick"><line x1="{tx:.1f}" x2="{tx:.1f}" '
                f'y1="{_TIMELINE_AXIS - 12}" y2="{_TIMELINE_AXIS - 4}" stroke="#444"/>'
                f'<text class="tick" x="{tx:.1f}" y="{_TIMELINE_AXIS - 16}" '
                'text-anchor="middle">'
                f"{html.escape(_timeline_tick(n * self.step, self.size, self.unit))}</text></g>"
            )
        return "".join(axis)

    def gridlines(self, bottom: int) -> str:
        """The ticks' gridlines down to ``bottom``, faint, over the lanes' shading."""
        return "".join(
            f'<line x1="{self.x(self.start + n * self.step):.1f}" '
            f'x2="{self.x(self.start + n * self.step):.1f}" '
            f'y1="{_TIMELINE_AXIS}" y2="{bottom}" stroke="#000" stroke-opacity="0.08"/>'
            for n in range(self.ticks + 1)
        )


@dataclass(frozen=True)
class _Page:
    """A history and the checker's verdict on it, drawn: the pieces of :func:`timeline_html`."""

    history: Sequence[Operation]
    result: LinearizabilityResult
    clients: bool
    axis: _Axis
    #: The reason each stuck call cannot come next, by id.
    reasons: dict[int, str]
    #: The reasons of no stuck call (a final snapshot no order reaches).
    general: list[str]
    #: Each placed call's place (from 1) in the longest order found, by id.
    position: dict[int, int]
    #: The threads, one lane each.
    lanes: list[int]

    @classmethod
    def of(
        cls, history: Sequence[Operation], result: LinearizabilityResult, clients: bool
    ) -> _Page:
        """The page of ``history`` judged ``result``."""
        return cls(
            history,
            result,
            clients,
            _Axis.of(history),
            dict(zip(result.stuck, result.reasons, strict=False)),
            list(result.reasons[len(result.stuck) :]),
            {op_id: n for n, op_id in enumerate(result.order, 1)},
            sorted({op.thread for op in history}),
        )

    def html(self) -> str:
        """The whole page."""
        esc = html.escape
        history, verdict = self.history, self.result.verdict
        why = self.why()
        heading = "Why it fails" if verdict == "not linearizable" else "Inconclusive"
        where = ", each on a client of its own (SPEC 8)" if self.clients else ""
        lanes = self.lanes
        return (
            "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
            f"<title>taskboard: concurrent history, {esc(verdict)}</title>"
            f"<style>{_TIMELINE_CSS}</style></head><body>"
            f'<h1>taskboard: a concurrent history, <span class="verdict'
            f'{" ok" if verdict == "linearizable" else ""}">{esc(verdict)}</span></h1>'
            f"<p>{len(history)} call{'' if len(history) == 1 else 's'} on {len(lanes)} "
            f"thread{'' if len(lanes) == 1 else 's'}{where}. Each bar runs from a call's "
            "invocation to its response; under it, the call and its outcome (the error it "
            "raised, or the task's state and the fence of the lease it returned).</p>"
            + (f'<div class="why"><h2>{heading}</h2>{"".join(why)}</div>' if why else "")
            + f'<h2>Timeline</h2><p class="legend">{_legend()}</p>'
            + f'<div class="chart">{self.svg()}</div>'
            + f"<h2>Calls</h2>{''.join(self.table())}</body></html>\n"
        )

    # -- the chart ---------------------------------------------------------------------------

    def svg(self) -> str:
        """The chart: the time axis, then one lane per thread."""
        parts: list[str] = []
        y = _TIMELINE_AXIS
        for row, thread in enumerate(self.lanes):
            lane, height = self.lane(row, thread, y)
            parts += lane
            y += height
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{_TIMELINE_WIDTH}" '
            f'height="{y + 1}" viewBox="0 0 {_TIMELINE_WIDTH} {y + 1}" role="img" '
            'aria-label="timeline of the history">'
            + self.axis.svg()
            + "".join(parts)
            + self.axis.gridlines(y)
            + "</svg>"
        )

    def lane(self, row: int, thread: int, y: int) -> tuple[list[str], int]:
        """``thread``'s lane, its top at ``y``: its calls' bars, and their labels under them;
        with its height."""
        ops = sorted((o for o in self.history if o.thread == thread), key=lambda o: o.invoked)
        placed, heights = self.labels(ops)
        bar_top = y + 10
        label_top = bar_top + _TIMELINE_BAR + 8
        height = label_top - y + sum(heights) + 6
        lane = html.escape(lane_name(thread, self.clients))
        shade = "#f7f9fc" if row % 2 == 0 else "#fff"
        parts = [
            f'<g class="lane" data-thread="{thread}">'
            f'<rect x="0" y="{y}" width="{_TIMELINE_WIDTH}" height="{height}" fill="{shade}"/>'
            f'<line x1="0" x2="{_TIMELINE_WIDTH}" y1="{y}" y2="{y}" stroke="#ccc"/>'
            f'<text class="lane-name" x="10" y="{bar_top + 15}">{lane}</text>'
        ]
        # Each label's leader line from its bar, under every bar and label of the lane.
        parts.append('<g class="leaders" stroke="#aaa">')
        for op, _, _, tier in placed:
            lead = self.axis.x(op.invoked) + 1
            parts.append(
                f'<line x1="{lead:.1f}" x2="{lead:.1f}" y1="{bar_top + _TIMELINE_BAR}" '
                f'y2="{label_top + sum(heights[:tier])}"/>'
            )
        parts.append("</g>")
        for op, lines, at, tier in placed:
            parts += self.call(op, lines, at, bar_top, label_top + sum(heights[:tier]))
        parts.append("</g>")
        return parts, height

    def labels(self, ops: Sequence[Operation]) -> tuple[list[_Label], list[int]]:
        """Each call's label, in the first tier where it overlaps no other; and each tier's
        height."""
        placed: list[_Label] = []
        tier_ends: list[float] = []
        for op in ops:
            what = f"#{op.id} {render_call(op.call, _timeline_token)}"
            lines = [what, f"→ {_timeline_outcome(op)}"]
            if op.id in self.reasons:
                lines += _timeline_reason_lines(self.reasons[op.id])
            lines = [_timeline_clip(line) for line in lines]
            block = max(len(line) for line in lines) * _TIMELINE_CHAR + 6
            at = max(
                _TIMELINE_LABELS + 2, min(self.axis.x(op.invoked), _TIMELINE_WIDTH - block - 4)
            )
            tier = next((i for i, e in enumerate(tier_ends) if e + 10 <= at), len(tier_ends))
            if tier == len(tier_ends):
                tier_ends.append(0.0)
            tier_ends[tier] = at + block
            placed.append((op, lines, at, tier))
        heights = [0] * len(tier_ends)
        for _, lines, _, tier in placed:
            heights[tier] = max(heights[tier], len(lines) * _TIMELINE_LINE + 8)
        return placed, heights

    def call(self, op: Operation, lines: list[str], at: float, bar_top: int, top: int) -> list[str]:
        """``op``'s bar at ``bar_top``, with its tooltip, and its label's ``lines`` at (``at``,
        ``top``)."""
        esc = html.escape
        status = _timeline_status(op, self.result)
        x0 = self.axis.x(op.invoked)
        x1 = _TIMELINE_RIGHT + 8 if math.isinf(op.returned) else self.axis.x(op.returned)
        bar = max(x1 - x0, 3.0)
        outline = ' stroke="#600" stroke-width="2.5"' if status == "stuck" else ""
        dash = ' stroke="#444" stroke-dasharray="4 3"' if op.outcome is None else ""
        parts = [
            f'<g class="call {status}" data-op="{op.id}">'
            f"<title>{esc(chr(10).join(self.tip(op, status)))}</title>"
            f'<rect x="{x0:.1f}" y="{bar_top}" width="{bar:.1f}" height="{_TIMELINE_BAR}" '
            f'rx="3" fill="{_TIMELINE_COLOURS[status]}"{outline}{dash}/>'
        ]
        tag = f"#{op.id}"
        if bar >= len(tag) * _TIMELINE_CHAR + 6:
            parts.append(f'<text x="{x0 + 4:.1f}" y="{bar_top + 14}" fill="#fff">{esc(tag)}</text>')
        parts.append('<g class="label">')
        for n, line in enumerate(lines):
            head = ' class="head"' if n < 2 else ""
            parts.append(
                f'<text{head} x="{at:.1f}" y="{top + 11 + n * _TIMELINE_LINE}">{esc(line)}</text>'
            )
        parts.append("</g></g>")
        return parts

    def tip(self, op: Operation, status: str) -> list[str]:
        """The lines of ``op``'s tooltip: the call, its outcome, its times, the verdict."""
        start = self.axis.start
        tip = [
            f"#{op.id} on {lane_name(op.thread, self.clients)}: {op.call}",
            "outcome: " + ("no response" if op.outcome is None else str(op.outcome)),
            f"from {micros_text(op.invoked - start)} to {micros_text(op.returned - start)} µs",
            _TIMELINE_STATUS[status]
            + (f" (no. {self.position[op.id]})" if op.id in self.position else ""),
        ]
        if op.id in self.reasons:
            tip.append(f"reason: {self.reasons[op.id]}")
        return tip

    # -- the words around it -----------------------------------------------------------------

    def why(self) -> list[str]:
        """Why the history fails (or that the checker could not tell), as HTML pieces; none
        for a linearizable history."""
        if self.result.verdict == "unknown":
            return ["<p>The checker ran out of time: the history is neither passed nor failed.</p>"]
        if self.result.verdict != "not linearizable":
            return []
        esc = html.escape
        result = self.result
        order = " → ".join(f"#{i}" for i in result.order)
        found = (
            f"The longest order the checker could build is <b>{esc(order)}</b>." if order else ""
        )
        if result.stuck:
            found += (
                " After it, each call that could come next is refused:"
                if order
                else "No call can go first: each call that could is refused:"
            )
        why = [
            "<p>No order of these calls that respects real time (a call that returned before "
            f"another was invoked comes first) is one the contract allows.</p><p>{found}</p><ul>"
        ]
        by_id = {op.id: op for op in self.history}
        why += [self.stuck_item(op_id, by_id.get(op_id)) for op_id in result.stuck]
        for reason in self.general:
            intro = (
                "Also: " if result.stuck else "Every call could be placed, but " if order else ""
            )
            why.append(f'<li>{intro}<span class="reason">{esc(reason)}</span></li>')
        why.append("</ul>")
        return why

    def stuck_item(self, op_id: int, stuck: Operation | None) -> str:
        """The list item saying why the stuck call ``op_id`` (``stuck``, if the history has
        it) cannot come next."""
        esc = html.escape
        what = "" if stuck is None else f" {render_call(stuck.call, _timeline_token)}"
        outcome = "" if stuck is None else f" (outcome: {_timeline_outcome(stuck)})"
        where = "" if stuck is None else f" on {lane_name(stuck.thread, self.clients)}"
        return (
            f'<li><b class="mono">#{op_id}{esc(what)}</b>{esc(where)}{esc(outcome)} '
            f'cannot come next: <span class="reason">{esc(self.reasons.get(op_id, "?"))}</span>'
            "</li>"
        )

    def table(self) -> list[str]:
        """The table of every call, in the order they were invoked."""
        table = [
            "<table><tr><th>call</th><th>lane</th><th>invoked (µs)</th><th>returned (µs)</th>"
            "<th>outcome</th><th>fence</th><th>checker</th></tr>"
        ]
        table += [self.row(op) for op in sorted(self.history, key=lambda o: (o.invoked, o.id))]
        table.append("</table>")
        return table

    def row(self, op: Operation) -> str:
        """``op``'s row of the table of calls."""
        esc = html.escape
        start = self.axis.start
        status = _timeline_status(op, self.result)
        task = op.outcome.task if op.outcome is not None else None
        fence = "" if task is None or task.lease is None else repr(task.lease.fence)
        note = _TIMELINE_STATUS[status]
        if op.id in self.position:
            note = f"no. {self.position[op.id]} in the longest order"
        if op.id in self.reasons:
            note += f": {self.reasons[op.id]}"
        message = op.outcome.message if op.outcome is not None and op.outcome.error else ""
        returned = "—" if math.isinf(op.returned) else micros_text(op.returned - start)
        return (
            f'<tr class="{status}"><td class="mono nowrap">#{op.id} '
            f"{esc(render_call(op.call, _timeline_token))}</td>"
            f'<td class="nowrap">{esc(lane_name(op.thread, self.clients))}</td>'
            f'<td class="num">{micros_text(op.invoked - start)}</td><td class="num">{returned}</td>'
            f'<td class="nowrap">{esc(_timeline_outcome(op))}'
            + (f"<br><small>{esc(message)}</small>" if message else "")
            + f'</td><td class="num">{esc(fence)}</td><td>{esc(note)}</td></tr>'
        )


def _legend() -> str:
    """What each colour of bar means."""
    return "".join(
        f'<span><i style="background:{colour}"></i>{html.escape(_TIMELINE_STATUS[status])}</span>'
        for status, colour in _TIMELINE_COLOURS.items()
    )
