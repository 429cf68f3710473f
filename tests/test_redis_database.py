"""Fuzzing over a redis:// example database, against a real redis-server on loopback."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

import pytest

from taskboard._fuzz import fuzz, open_database

REDIS_URL = os.environ.get("TASKBOARD_REDIS_URL")
REQUIRED = os.environ.get("TASKBOARD_REQUIRE_SERVERS") == "1"
MUTANT = "taskboard.hosts.mutants:OffByOneExpiry"


#: The logical database of the server that these tests flush: not the one in
#: ``TASKBOARD_REDIS_URL``, which the Redis boards of other tests, in other xdist workers, use
#: at the same time (flushing it made their tasks vanish mid-run).
EXAMPLES_DB = 15


@pytest.fixture
def redis_url() -> str:
    """A flushed redis database of its own, or a skip (a failure when CI requires the
    servers)."""
    if REDIS_URL is None:
        reason = "TASKBOARD_REDIS_URL is not set: no redis-server to test against"
        if REQUIRED:
            pytest.fail(f"{reason}, but TASKBOARD_REQUIRE_SERVERS=1")
        pytest.skip(reason)
    import redis

    url = urlsplit(REDIS_URL)._replace(path=f"/{EXAMPLES_DB}").geturl()
    redis.Redis.from_url(url).flushdb()
    return url


def test_a_failure_found_over_redis_is_replayed_first_by_the_next_run(
    redis_url: str, tmp_path: os.PathLike[str]
) -> None:
    """A fleet sharing a redis database: the second runner hits the first one's failure at once."""
    first = fuzz(
        MUTANT, budget=60, seed=3, database=redis_url, trace_dir=str(tmp_path), progress=None
    )
    assert first.failure is not None
    second = fuzz(
        MUTANT, budget=60, seed=99, database=redis_url, trace_dir=str(tmp_path), progress=None
    )
    assert second.failure is not None
    assert second.examples <= 3, f"the saved failure was not replayed first ({second.examples})"


def test_open_database_reaches_the_server(redis_url: str) -> None:
    """A redis:// URL opens Hypothesis's RedisExampleDatabase on a live server."""
    from hypothesis.extra.redis import RedisExampleDatabase

    assert isinstance(open_database(redis_url), RedisExampleDatabase)
