"""``taskboard campaign NAME --html FILE``: the campaign's view as one static HTML page, with
an inline SVG plot of coverage and finds over time (no script, no network)."""

from __future__ import annotations

from html import escape

from taskboard._fuzz.fleet import CampaignView, when

__all__ = ["campaign_html"]

#: The plot's size and margins, in pixels.
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 900, 260, 60, 60, 20, 40


def _plot(view: CampaignView) -> str:
    """Transitions covered (a line, left axis) and finds (a step line, right axis) over time."""
    points = view.timeline
    if not points:
        return '<p class="empty">no timeline yet</p>'
    start, end = points[0][0], points[-1][0]
    span = max(end - start, 1e-9)
    most_covered = max(max(p[3] for p in points), 1)
    most_finds = max(max(p[4] for p in points), 1)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(at: float) -> float:
        return LEFT + (at - start) / span * inner_w

    def y(value: int, most: int) -> float:
        return TOP + inner_h - value / most * inner_h

    covered = " ".join(f"{x(p[0]):.1f},{y(p[3], most_covered):.1f}" for p in points)
    finds = " ".join(f"{x(p[0]):.1f},{y(p[4], most_finds):.1f}" for p in points)
    bottom, right = TOP + inner_h, LEFT + inner_w
    return f"""<svg class="plot" width="{WIDTH}" height="{HEIGHT}" role="img"
 aria-label="transitions covered and finds over time">
<line class="axis" x1="{LEFT}" y1="{bottom}" x2="{right}" y2="{bottom}"/>
<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}"/>
<line class="axis" x1="{right}" y1="{TOP}" x2="{right}" y2="{bottom}"/>
<polyline class="covered" points="{covered}"/>
<polyline class="finds" points="{finds}"/>
<text class="tick" x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end">{most_covered}</text>
<text class="tick" x="{LEFT - 6}" y="{bottom}" text-anchor="end">0</text>
<text class="tick" x="{right + 6}" y="{TOP + 4}">{most_finds}</text>
<text class="tick" x="{right + 6}" y="{bottom}">0</text>
<text class="tick" x="{LEFT}" y="{bottom + 18}">{escape(when(start))}</text>
<text class="tick" x="{right}" y="{bottom + 18}" text-anchor="end">{escape(when(end))}</text>
<text class="legend covered-text" x="{LEFT + 8}" y="{TOP + 14}">transitions covered (left)</text>
<text class="legend finds-text" x="{right - 8}" y="{TOP + 14}"
 text-anchor="end">finds (right)</text>
</svg>"""


_STYLE = """body{font-family:"DejaVu Sans",Arial,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 20px}td,th{padding:2px 10px;text-align:left}
th{border-bottom:1px solid #999}td.n{text-align:right;font-family:monospace}
.alive{color:#070}.gone{color:#888}pre{background:#f4f4f4;padding:8px;overflow:auto}
svg .axis{stroke:#555;stroke-width:1}svg .covered{fill:none;stroke:#1f5fbf;stroke-width:2}
svg .finds{fill:none;stroke:#c0392b;stroke-width:2}svg text{font-size:11px;fill:#555}
svg .covered-text{fill:#1f5fbf}svg .finds-text{fill:#c0392b}"""


def campaign_html(view: CampaignView, url: str) -> str:
    """The page: totals, workers, the plot, coverage per transition and the finds."""
    totals = view.totals
    workers = "".join(
        f'<tr><td>{escape(worker)}</td><td class="{state}">{state}</td>'
        f"<td>{escape(str(about.get('target', '?')))}</td>"
        f"<td>{escape(when(float(about.get('started', 0))))}</td></tr>"
        for worker, about in sorted(view.workers.items())
        for state in ["alive" if worker in view.alive else "gone"]
    )
    coverage = "".join(
        f'<tr><td>{escape(transition)}</td><td class="n">{count:,}</td></tr>'
        for transition, count in sorted(view.coverage.items())
    )
    finds = "".join(
        f"<li><b>{escape(find.kind)}</b> {escape(find.clause)} on {escape(find.worker)}, "
        f"{escape(when(find.at))}<pre>{escape(find.report)}</pre>"
        f"<details><summary>trace file</summary><pre>{escape(find.trace)}</pre></details></li>"
        for find in view.finds
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>taskboard campaign {escape(view.name)}</title><style>{_STYLE}</style></head>
<body><h1>Campaign {escape(view.name)}</h1>
<p>{escape(url)}: {len(view.alive)} worker(s) alive, {len(view.workers)} seen.
{totals.get("examples", 0):,} examples, {totals.get("programs", 0):,} parallel program runs,
{totals.get("steps", 0):,} steps, {totals.get("finds", 0)} violation(s),
{totals.get("faults", 0)} fault(s); {view.rate():,.1f} examples/s over the last minute.</p>
<h2>Coverage and finds over time</h2>{_plot(view)}
<h2>Finds ({len(view.finds)})</h2><ol class="finds">{finds}</ol>
<h2>Workers</h2><table class="workers"><tr><th>worker</th><th>state</th><th>target</th>
<th>since</th></tr>{workers}</table>
<h2>Coverage: {len(view.coverage)} transition(s)</h2><table class="coverage"><tr>
<th>task state | operation | outcome</th><th>count</th></tr>{coverage}</table>
</body></html>
"""
