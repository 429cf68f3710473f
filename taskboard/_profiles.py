"""Hypothesis settings profiles for running the checker, registered when taskboard is imported
and, through the ``pytest11`` entry point, when pytest starts.

Load one with ``settings.load_profile(name)``, ``pytest --hypothesis-profile=NAME`` or the
``HYPOTHESIS_PROFILE`` variable of your own conftest. None of them is loaded for you:
without one, Hypothesis's ``default`` profile applies (100 examples, 50 steps each, a 200 ms
deadline, the local example database).
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

__all__ = ["CI", "DEV", "NIGHTLY", "register_profiles"]

#: Quick local runs: the default example count, failures kept in the local database.
DEV = "taskboard-dev"
#: CI: derandomized (the same examples every run, so a red build is reproducible), no
#: example database (a run never depends on what an earlier one left behind), and twice the
#: default examples, since a derandomized run gets no second chance at a rare sequence.
CI = "taskboard-ci"
#: Nightly fuzzing: many more and longer examples; the database keeps what it finds.
NIGHTLY = "taskboard-nightly"

# The explain phase replays a failure many times; on a state machine it costs several times
# the search, so no profile here runs it.
# One failure, shrunk, per run: a checker's report should be one readable bug, and shrinking
# several distinct failures at once multiplies the time to the first report.
_BASE = settings(
    deadline=None,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    suppress_health_check=(HealthCheck.too_slow, HealthCheck.filter_too_much),
)


def register_profiles() -> None:
    """Register the three taskboard profiles with Hypothesis (idempotent)."""
    settings.register_profile(DEV, parent=_BASE, max_examples=100)
    settings.register_profile(
        CI, parent=_BASE, max_examples=200, derandomize=True, database=None, print_blob=True
    )
    settings.register_profile(NIGHTLY, parent=_BASE, max_examples=10_000, stateful_step_count=100)
