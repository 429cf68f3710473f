"""``taskboard campaign NAME``: a campaign's merged state, as text."""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

from taskboard._fuzz.fleet import CampaignView, read_campaign, when
from taskboard._fuzz.fleet_html import campaign_html
from taskboard._fuzz.options import (
    check_writable_directory,
    check_writable_file,
    write_atomically,
)
from taskboard._fuzz.targets import UsageError

__all__ = ["render_campaign", "show_campaign", "write_traces"]

#: How many points of the timeline the text view shows.
TIMELINE_POINTS = 8


def show_campaign(
    name: str,
    url: str,
    *,
    traces: str | None = None,
    html: str | None = None,
    watch: float | None = None,
) -> int:
    """Print campaign ``name``, write its finds' traces into ``traces`` and the page into
    ``html``; with ``watch``, again every ``watch`` seconds until Ctrl-C. The exit code: 0
    when nothing was found, 1 when something was.

    Raises:
        UsageError: as :func:`read_campaign`, ``traces`` or ``html`` cannot be written, or
            ``watch`` is not a positive number of seconds.
    """
    if traces is not None:
        check_writable_directory(traces, "--traces")
    if html is not None:
        check_writable_file(html, "--html")
    if watch is not None and not 0 < watch < 86_400:
        raise UsageError(f"--watch must be a positive number of seconds, got {watch:g}")
    shown: CampaignView | None = None
    try:
        while True:
            view = read_campaign(url, name)
            written = write_traces(view, Path(traces)) if traces is not None else []
            if html is not None:
                write_atomically(Path(html), campaign_html(view, url).encode())
            text = render_campaign(view, url, written)
            if watch is None:
                print(text)
                return 1 if view.finds else 0
            print(("\033[H\033[2J" if sys.stdout.isatty() else "") + text, flush=True)
            shown = view
            time.sleep(watch)
    except KeyboardInterrupt:
        # Ctrl-C is the way a watch ends, whether it lands in the sleep or while the next
        # view is read; only before the first view is shown is it an interruption.
        if shown is None:
            raise
        return 1 if shown.finds else 0


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
        lines.append(f"  {worker:<30} {state:<6} {about.get('target', '?')}, since {when(started)}")
    lines += ["", f"coverage: {len(view.coverage)} transition(s) (task state | op -> outcome)"]
    for transition, count in sorted(view.coverage.items()):
        lines.append(f"  {transition:<60} {count:>10,}")
    lines += ["", "coverage over time (examples, transitions covered, finds):"]
    step = max(1, len(view.timeline) // TIMELINE_POINTS)
    for at, examples, _steps, covered, finds in view.timeline[::step][-TIMELINE_POINTS:]:
        lines.append(f"  {when(at)}  {examples:>10,}  {covered:>4}  {finds:>3}")
    lines += ["", f"finds: {len(view.finds)}"]
    for index, find in enumerate(view.finds, 1):
        clause = f" ({find.clause})" if find.clause else ""
        first = find.report.strip().splitlines()[0] if find.report.strip() else find.kind
        lines.append(f"  {index}. {when(find.at)} {find.kind}{clause} on {find.worker}: {first}")
    for path in traces:
        lines.append(f"  trace written to {path}; replay it with: taskboard replay {path}")
    return "\n".join(lines)
