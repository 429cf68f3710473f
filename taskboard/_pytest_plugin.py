"""The pytest plugin (entry point ``pytest11``): registers taskboard's Hypothesis profiles as
pytest starts, so that ``pytest --hypothesis-profile=taskboard-nightly`` finds them in a
project that never imports taskboard before its tests are collected; and adds
``--taskboard-seed N`` and ``--taskboard-budget DURATION`` for the machine runs of the
session (see :mod:`taskboard.stateful._session_options`).

It loads no profile: without ``--hypothesis-profile``, Hypothesis's ``default`` profile
applies, unless the project's own conftest loads another.
"""

from __future__ import annotations

import pytest

from taskboard._profiles import register_profiles

# BoardContract's example tests assert on what the board returned: rewritten, as a test
# module's asserts are, their failures show the values, not a bare AssertionError.
pytest.register_assert_rewrite("taskboard.boardtest")

# At import: pytest imports entry-point plugins before Hypothesis's own plugin reads
# --hypothesis-profile in pytest_configure.
register_profiles()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("taskboard", "taskboard machine runs")
    group.addoption(
        "--taskboard-seed",
        type=int,
        metavar="N",
        help="the @seed of every BoardMachine run (TestCase, ParallelTestCase, BoardContract's "
        "state machine and parallel tests) whose class has none: the same examples every "
        "run, also under a derandomized profile",
    )
    group.addoption(
        "--taskboard-budget",
        metavar="DURATION",
        help="run each of those tests for this long (90s, 15m, 1h30m) instead of for the "
        "profile's example count; a failure found is still shrunk and reported",
    )


def pytest_configure(config: pytest.Config) -> None:
    seed = config.getoption("taskboard_seed", None)
    budget = config.getoption("taskboard_budget", None)
    if seed is None and budget is None:
        return  # nothing asked: the checker is not even imported
    from taskboard._fuzz.options import parse_budget
    from taskboard._fuzz.targets import UsageError
    from taskboard.stateful._session_options import SessionOptions, choose

    try:
        seconds = None if budget is None else parse_budget(budget)
    except UsageError as exc:
        raise pytest.UsageError(f"--taskboard-budget: {exc}") from None
    choose(SessionOptions(seed=seed, budget=seconds))


def pytest_unconfigure(config: pytest.Config) -> None:
    chosen = config.getoption("taskboard_seed", None), config.getoption("taskboard_budget", None)
    if chosen != (None, None):  # an in-process run (pytester) leaves the next one as it was
        from taskboard.stateful._session_options import SessionOptions, choose

        choose(SessionOptions())
