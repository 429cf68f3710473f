"""Server-clock boards for the virtual clock's tests: boundary mutants that wall mode cannot
see, and a correct board that keeps its leases as Redis keeps keys.

The Redis ones are :class:`~taskboard.hosts.redis.RedisBoard` with ``clock="server"`` whose
scripts are patched as :mod:`taskboard.hosts.server_mutants` patches them (``-- BUG`` marks a
bug); the PostgreSQL one is :class:`~taskboard.hosts.postgres.PostgresBoard` with
``clock="server"`` and one changed comparison.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from taskboard import Clock, Task
from taskboard.hosts.postgres import PostgresBoard
from taskboard.hosts.redis import SERVER_SCRIPTS, RedisBoard
from taskboard.hosts.server_mutants import _LEASE_PREFIX, _patch, _ServerMutant

__all__ = [
    "PostgresExpiryInclusive",
    "PxKeyBoard",
    "ServerExpiryInclusive",
    "ServerTakeoverOneTickEarly",
    "postgres_expiry_inclusive",
    "postgres_server_clock",
    "redis_expiry_inclusive",
    "redis_server_clock",
]


class ServerExpiryInclusive(_ServerMutant):
    """Bug: a lease is live while ``now <= until``, where ``now < until`` is right (SPEC 2):
    at exactly ``until`` the holder still holds it and a claim is a ``TakenError``."""

    @property
    def _sources(self) -> dict[str, str]:
        return {
            name: _patch(
                source,
                "return (not until_) or less(now, until_)",
                "return (not until_) or not less(until_, now)  -- BUG: <= where < is right",
            )
            for name, source in SERVER_SCRIPTS.items()
        }


class ServerTakeoverOneTickEarly(_ServerMutant):
    """Bug: claim judges the current lease one microsecond (the board's resolution) late,
    so a takeover succeeds one tick before ``until`` (SPEC 3.1): two live holders."""

    @property
    def _sources(self) -> dict[str, str]:
        claim = _patch(
            SERVER_SCRIPTS["claim"],
            "if state == 'claimed' and live(id, now) then",
            "if state == 'claimed' and live(id, add(now, '1')) then  -- BUG: one tick early",
        )
        return {**SERVER_SCRIPTS, "claim": claim}


class PxKeyBoard(_ServerMutant):
    """Correct, the way Redis lock libraries are: a lease is live while its key, set with
    ``PX`` (whole milliseconds), exists. Redis keeps a key at exactly its deadline and drops
    it one millisecond later, so the ``until`` this board reports is that instant:
    ``now + ttl + 1 ms``, the store's own boundary. Its TTLs are whole milliseconds
    (``clock_resolution`` and ``shortest_lease`` 1 ms on the machine)."""

    @property
    def _sources(self) -> dict[str, str]:
        sources = {
            name: _patch(
                _patch(source, "-- a < b for canonical", _LEASE_PREFIX + "-- a < b for canonical"),
                "return (not until_) or less(now, until_)",
                "return (not until_) or redis.call('EXISTS', LEASE .. id) == 1",
            )
            for name, source in SERVER_SCRIPTS.items()
        }
        for name in ("claim", "renew"):
            sources[name] = _patch(
                _patch(
                    sources[name],
                    "local until_ = until_at(now, ttl)",
                    "local until_ = until_at(now, ttl)\n"
                    "if ttl ~= '' then until_ = add(until_, '1000') end",
                ),
                "set_until(id, until_)\nreturn {'ok', row(id)}",
                "set_until(id, until_)\n"
                "if ttl ~= '' then\n"
                "  redis.call('SET', LEASE .. id, token, 'PX', math.floor(tonumber(ttl) / 1000))\n"
                "else\n"
                "  redis.call('DEL', LEASE .. id)\n"
                "end\n"
                "return {'ok', row(id)}",
            )
        sources["finish"] = _patch(
            sources["finish"],
            "redis.call('HDEL', UNTIL, id)\nreturn {'ok'}",
            "redis.call('HDEL', UNTIL, id)\nredis.call('DEL', LEASE .. id)\nreturn {'ok'}",
        )
        return sources


class _InclusiveNow(int):
    """The server's now, in microseconds, that compares ``now < until`` as ``now <= until``
    (and is a plain int in every sum, so the untils it computes stay right)."""

    def __lt__(self, other: Any) -> bool:
        return int(self) <= other  # BUG: <= where < is right


class PostgresExpiryInclusive(PostgresBoard):
    """Bug: a lease is live while ``clock_timestamp() <= until``, where ``<`` is right
    (SPEC 2): at exactly ``until`` the holder still holds it and a claim is a
    ``TakenError``. The issue's Go board on PostgreSQL had this bug, and wall mode did not
    find it in 60 s."""

    def _now(self, conn: Any) -> int:
        return _InclusiveNow(super()._now(conn))


# -- targets for ``taskboard fuzz --clock virtual --server ...`` ---------------------------------


def _server_url() -> str:
    # fuzz --server names the URL of the server it started here (taskboard._fuzz.serving).
    return os.environ["TASKBOARD_SERVER_URL"]


def redis_server_clock(tasks: Iterable[Task], clock: Clock) -> RedisBoard:
    """The reference RedisBoard on its server's clock, on the ``--server redis``."""
    return RedisBoard(tasks, "server", _server_url())


def redis_expiry_inclusive(tasks: Iterable[Task], clock: Clock) -> RedisBoard:
    """:class:`ServerExpiryInclusive` on the ``--server redis``."""
    return ServerExpiryInclusive(tasks, "server", _server_url())


def postgres_server_clock(tasks: Iterable[Task], clock: Clock) -> PostgresBoard:
    """The reference PostgresBoard on its server's clock, on the ``--server postgres``."""
    return PostgresBoard(tasks, "server", _server_url())


def postgres_expiry_inclusive(tasks: Iterable[Task], clock: Clock) -> PostgresBoard:
    """:class:`PostgresExpiryInclusive` on the ``--server postgres``."""
    return PostgresExpiryInclusive(tasks, "server", _server_url())


for _factory in (redis_server_clock, redis_expiry_inclusive):
    _factory.clock_resolution = RedisBoard.clock_resolution  # type: ignore[attr-defined]
for _factory in (postgres_server_clock, postgres_expiry_inclusive):
    _factory.clock_resolution = PostgresBoard.clock_resolution  # type: ignore[attr-defined]
