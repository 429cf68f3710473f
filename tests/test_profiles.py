"""The taskboard Hypothesis profiles load by name: through the pytest plugin, and on import."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROFILES = {"taskboard-dev": 100, "taskboard-ci": 200, "taskboard-nightly": 10_000}


@pytest.mark.parametrize(("profile", "examples"), PROFILES.items())
def test_a_project_that_never_imports_taskboard_loads_a_profile_by_name(
    pytester: pytest.Pytester, profile: str, examples: int
) -> None:
    """pytest --hypothesis-profile=taskboard-* works in a project with no taskboard import."""
    pytester.makepyfile(
        test_plain=f"""
        from hypothesis import settings

        def test_profile_is_loaded():
            assert settings().max_examples == {examples}
        """
    )
    result = pytester.runpytest_subprocess(
        f"--hypothesis-profile={profile}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_importing_taskboard_registers_the_profiles() -> None:
    """After a bare `import taskboard`, settings.load_profile finds each profile by name."""
    code = (
        "import taskboard\n"
        "from hypothesis import settings\n"
        f"for name in {list(PROFILES)!r}:\n"
        "    settings.load_profile(name)\n"
        "print(settings().max_examples)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "10000"


def test_without_the_plugin_the_profile_is_not_registered(pytester: pytest.Pytester) -> None:
    """The control: with the taskboard plugin disabled, the same run fails to find the profile,
    so the plugin is what registers it."""
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    result = pytester.runpytest_subprocess(
        "--hypothesis-profile=taskboard-nightly", "-p", "no:taskboard", "-p", "no:cacheprovider"
    )
    assert result.ret != 0
    assert "taskboard-nightly" in result.stdout.str() + result.stderr.str()
