"""The pytest plugin (entry point ``pytest11``): registers taskboard's Hypothesis profiles as
pytest starts, so that ``pytest --hypothesis-profile=taskboard-nightly`` finds them in a
project that never imports taskboard before its tests are collected.

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
