"""Test-suite configuration: deterministic Hypothesis runs unless a profile is asked for,
and the real servers (PostgreSQL, Redis) that server-backed tests need."""

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest
from hypothesis import settings

from taskboard._profiles import CI, register_profiles

if TYPE_CHECKING:  # imported where used: the server module needs redis-py and psycopg
    from tests.servers import PostgresServer, RedisServer

pytest_plugins = ["pytester"]

register_profiles()
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", CI))

#: Set by ``.ci/run``: a test that would skip for want of a server or a browser fails
#: instead, so CI never tests less.
REQUIRE_SERVERS = os.environ.get("TASKBOARD_REQUIRE_SERVERS") == "1"


def unavailable(reason: str) -> NoReturn:
    """Skip for ``reason`` (a server or program this machine lacks); fail when CI requires
    everything it installs."""
    if REQUIRE_SERVERS:
        pytest.fail(f"{reason}, but TASKBOARD_REQUIRE_SERVERS=1")
    pytest.skip(reason)


def server_url(variable: str, server: str) -> str:
    """The URL in ``variable``, or a skip saying why (a failure when CI requires servers)."""
    url = os.environ.get(variable)
    if not url:
        unavailable(f"{variable} is not set: no {server} to test against")
    return url


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    """``TASKBOARD_REDIS_URL``: a redis-server on loopback, or a skip with the reason."""
    return server_url("TASKBOARD_REDIS_URL", "redis-server")


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """``TASKBOARD_POSTGRES_URL``: a PostgreSQL server on loopback, or a skip with the reason."""
    return server_url("TASKBOARD_POSTGRES_URL", "PostgreSQL server")


def _private_redis(factory: pytest.TempPathFactory, *, durable: bool) -> Iterator["RedisServer"]:
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not on PATH: no private Redis server to restart")
    from tests.servers import RedisServer

    server = RedisServer(
        factory.mktemp("redis-durable" if durable else "redis-volatile"), durable=durable
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def durable_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator["RedisServer"]:
    """A private redis-server these tests own and restart (SPEC 9), durable: ``appendonly
    yes`` and ``appendfsync always``; a skip (a failure in CI) without ``redis-server``."""
    yield from _private_redis(tmp_path_factory, durable=True)


@pytest.fixture(scope="session")
def volatile_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator["RedisServer"]:
    """A private redis-server these tests own and restart (SPEC 9), with no persistence
    (``--save '' --appendonly no``): a restart loses every key."""
    yield from _private_redis(tmp_path_factory, durable=False)


@pytest.fixture(scope="session")
def postgres_server(postgres_server_url: str) -> "PostgresServer":
    """The PostgreSQL server of ``TASKBOARD_POSTGRES_URL``, which the tests may cut off
    (``pg_terminate_backend``) and, when ``TASKBOARD_POSTGRES_RESTART`` names a command
    that restarts it, restart."""
    from tests.servers import PostgresServer

    return PostgresServer(postgres_server_url, os.environ.get("TASKBOARD_POSTGRES_RESTART"))


@pytest.fixture(scope="session")
def restartable_postgres(postgres_server: "PostgresServer") -> "PostgresServer":
    """:func:`postgres_server`, or a skip (a failure in CI) when no restart command is set."""
    if not postgres_server.restart_command:
        unavailable(
            "TASKBOARD_POSTGRES_RESTART is not set: no command to restart the PostgreSQL "
            "server (.ci/run sets it)"
        )
    return postgres_server


def _uses_postgres_server(item: pytest.Item) -> bool:
    fixtures = getattr(item, "fixturenames", ())
    return "postgres" in item.nodeid.lower() or "postgres_server_url" in fixtures


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Run the tests of the one PostgreSQL server of ``TASKBOARD_POSTGRES_URL`` one at a
    time across the xdist workers (and across test runs sharing that server): the nemesis
    tests restart the server under everyone using it.

    A lock file, not an ``xdist_group``: pytest 9 ignores the node-id suffix through which
    pytest-xdist 3.8 implements the groups, so the groups spread over the workers."""
    url = os.environ.get("TASKBOARD_POSTGRES_URL")
    if not url or not _uses_postgres_server(item):
        return (yield)
    digest = hashlib.sha256(url.encode()).hexdigest()[:16]
    lock_path = os.path.join(tempfile.gettempdir(), f"taskboard-tests-postgres-{digest}.lock")
    with open(lock_path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return (yield)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line for the tests that skipped for want of a server, per server, instead of one
    line per test; every other skip is listed with its reason."""
    by_reason: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        by_reason[reason] = by_reason.get(reason, 0) + 1
    if not by_reason:
        return
    servers = {r: n for r, n in by_reason.items() if "_URL is not set" in r}
    lines = [
        f"{n} skipped: {reason}" for reason, n in sorted(by_reason.items()) if reason not in servers
    ]
    if servers:
        names = ", ".join(sorted(reason.split(" ", 1)[0] for reason in servers))
        lines.append(
            f"{sum(servers.values())} server tests skipped: {names} not set "
            "(.ci/run starts the servers; see docs/hosts.md)"
        )
    terminalreporter.write_sep("-", "skipped")
    for line in lines:
        terminalreporter.write_line(line)
