"""Test-suite configuration: deterministic Hypothesis runs unless a profile is asked for."""

import os

from hypothesis import settings

from taskboard._profiles import CI, register_profiles

pytest_plugins = ["pytester"]

register_profiles()
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", CI))
