"""Test-suite configuration: deterministic Hypothesis runs unless a profile is asked for,
and the real servers (PostgreSQL, Redis) that server-backed tests need."""

import os

import pytest
from hypothesis import settings

from taskboard._profiles import CI, register_profiles

pytest_plugins = ["pytester"]

register_profiles()
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", CI))

#: Set by ``.ci/run``: a server test that would skip fails instead, so CI never tests less.
REQUIRE_SERVERS = os.environ.get("TASKBOARD_REQUIRE_SERVERS") == "1"


def server_url(variable: str, server: str) -> str:
    """The URL in ``variable``, or a skip saying why (a failure when CI requires servers)."""
    url = os.environ.get(variable)
    if not url:
        reason = f"{variable} is not set: no {server} to test against"
        if REQUIRE_SERVERS:
            pytest.fail(f"{reason}, but TASKBOARD_REQUIRE_SERVERS=1")
        pytest.skip(reason)
    return url


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    """``TASKBOARD_REDIS_URL``: a redis-server on loopback, or a skip with the reason."""
    return server_url("TASKBOARD_REDIS_URL", "redis-server")


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """``TASKBOARD_POSTGRES_URL``: a PostgreSQL server on loopback, or a skip with the reason."""
    return server_url("TASKBOARD_POSTGRES_URL", "PostgreSQL server")
