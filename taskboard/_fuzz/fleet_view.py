"""``taskboard campaign NAME``: a campaign's merged state, as text."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from pathlib import Path

from taskboard._fuzz.fleet import CampaignView, read_campaign
from taskboard._fuzz.options import check_writable_directory

__all__ = ["render_campaign", "show_campaign", "write_traces"]

#: How many points of the timeline the text view shows.
TIMELINE_POINTS = 8


def show_campaign(name: str, url: str, traces: str | None) -> int:
    """Print campaign ``name`` (and write its finds' traces into ``traces``); the exit code:
    0 when nothing was found, 1 when something was.

    Raises:
        UsageError: as :func:`read_campaign`, or ``traces`` cannot be written.
    """
    if traces is not None:
        check_writable_directory(traces, "--traces")
    view = read_campaign(url, name)
    written = write_traces(view, Path(traces)) if traces is not None else []
    print(render_campaign(view, url, written))
    return 1 if view.finds else 0


def write_traces(view: CampaignView, directory: Path) -> list[Path]:
    """Each find's trace file in ``directory`` (named after its content), as written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for find in view.finds:
        if not find.trace:
            continue
        digest = hashlib.sha256(find.trace.encode()).hexdigest()[:10]
        path = directory / f"trace-{view.name}-{digest}.json"
        path.write_text(find.trace, encoding="utf-8")
        written.append(path)
    return written


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_campaign(view: CampaignView, url: str, traces: list[Path]) -> str:
    """The text of ``taskboard campaign``."""
    totals = view.totals
    seen = len(view.workers)
    lines = [
        f"campaign {view.name} at {url}: {len(view.alive)} worker(s) alive, {seen} seen",
        f"  totals: {totals.get('examples', 0):,} examples, "
        f"{totals.get('programs', 0):,} parallel program runs, {totals.get('steps', 0):,} "
        f"steps, {totals.get('finds', 0)} violation(s), {totals.get('faults', 0)} fault(s)",
        f"  rate: {view.rate():,.1f} examples/s over the last minute of the timeline",
        "",
        "workers:",
    ]
    now = time.time()
    for worker, about in sorted(view.workers.items()):
        state = "alive" if worker in view.alive else "gone"
        started = float(about.get("started", now))
        lines.append(
            f"  {worker:<30} {state:<6} {about.get('target', '?')}, since {_when(started)}"
        )
    lines += ["", f"coverage: {len(view.coverage)} transition(s) (task state | op -> outcome)"]
    for transition, count in sorted(view.coverage.items()):
        lines.append(f"  {transition:<60} {count:>10,}")
    lines += ["", "coverage over time (examples, transitions covered, finds):"]
    step = max(1, len(view.timeline) // TIMELINE_POINTS)
    for at, examples, _steps, covered, finds in view.timeline[::step][-TIMELINE_POINTS:]:
        lines.append(f"  {_when(at)}  {examples:>10,}  {covered:>4}  {finds:>3}")
    lines += ["", f"finds: {len(view.finds)}"]
    for index, find in enumerate(view.finds, 1):
        clause = f" ({find.clause})" if find.clause else ""
        first = find.report.strip().splitlines()[0] if find.report.strip() else find.kind
        lines.append(f"  {index}. {_when(find.at)} {find.kind}{clause} on {find.worker}: {first}")
    for path in traces:
        lines.append(f"  trace written to {path}; replay it with: taskboard replay {path}")
    return "\n".join(lines)
