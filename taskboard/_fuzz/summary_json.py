"""``taskboard fuzz --json FILE``: the figures of a run's summary as JSON, for dashboards.

The document's fields are described in docs/cli.md (``--json``); :data:`SCHEMA_VERSION`
changes when a field changes meaning or goes away (fields may be added without it). The file
is written atomically, as ``--junit-xml``'s is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from taskboard._fuzz.junit import JUnitRun, verdict_of
from taskboard._fuzz.options import write_atomically
from taskboard._fuzz.report import FuzzReport

__all__ = ["SCHEMA_VERSION", "summary_json", "write_summary_json"]

#: The version of the document's layout.
SCHEMA_VERSION = 1


def summary_json(report: FuzzReport, run: JUnitRun, missing_keys: int) -> dict[str, Any]:
    """The summary of ``report`` as a JSON object; ``missing_keys`` is how many key
    transitions the run never reached (the summary's ``!!`` rows)."""
    return {
        "schema": SCHEMA_VERSION,
        "target": run.target,
        "verdict": verdict_of(report),
        "exit_code": run.exit_code,
        "clause": report.clause,
        "trace_file": report.trace_file,
        "examples": report.examples,
        "steps": report.steps,
        "seconds": round(report.seconds, 3),
        "steps_per_second": round(report.steps_per_second, 1),
        "parallel_programs": report.parallel_programs,
        "parallel_runs": report.parallel_runs,
        "programs_per_second": round(report.programs_per_second, 2),
        "shrink_runs": report.shrink_runs,
        "shrink_cut": report.shrink_cut,
        "interrupted": report.interrupted,
        "workers": report.workers,
        "seed": report.seed,
        "mode": report.mode,
        "clock": report.clock_mode,
        "budget": run.budget,
        "max_examples": run.max_examples,
        "settings": {
            row.name: {"value": row.json, "shown": row.value, "source": row.source}
            for row in report.in_force
        },
        "hypothesis": report.settings,
        "key_transitions_missing": missing_keys,
        "transitions": [
            {"state": state, "operation": op, "outcome": outcome, "count": count}
            for (state, op, outcome), count in sorted(report.transitions.items())
        ],
        "parallel_calls": [
            {"operation": op, "outcome": outcome, "count": count}
            for (op, outcome), count in sorted(report.concurrent_calls.items())
        ],
    }


def write_summary_json(path: str, document: dict[str, Any]) -> None:
    """Write ``document`` to ``path`` atomically (missing directories are created).

    Raises:
        OSError: the file could not be written (the path was checked before the run).
    """
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    write_atomically(Path(path), text.encode())
