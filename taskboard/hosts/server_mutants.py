"""Server-clock mutants: broken Redis boards that keep their own time, for measuring the checker.

Each class here is :class:`~taskboard.hosts.redis.RedisBoard` with
``clock="server"`` (now is Redis ``TIME``, read inside each script) and ONE
realistic planted bug, the kind a store that keeps its own time gets wrong.
Each docstring names the bug, the SPEC clause it breaks and the real-world
failure it mirrors. No injected clock can move such a board, so only the
machine's wall-clock mode (SPEC section 7) can test them. Do not use any of
them to store anything.

Every mutant takes RedisBoard's constructor ``(tasks, clock, url_or_client,
*, board_id=None, delete_on_close=None)`` and ignores ``clock``: it always
uses the server's time, so a test machine's ``make_board(tasks, clock)`` can
pass its clock through. The bug is planted as the smallest textual patch of
the reference server-clock scripts (:data:`~taskboard.hosts.redis.SERVER_SCRIPTS`),
each marked ``-- BUG`` in the Lua source, plus at most a few lines of Python.

:data:`SERVER_CLOCK_MUTANTS` lists every mutant in gallery order.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import timedelta
from typing import ClassVar, Literal

from taskboard._clock import Clock
from taskboard._contract import ClaimRequest, State, Task
from taskboard.hosts._redis_codec import _returned_none
from taskboard.hosts.redis import SERVER_SCRIPTS, RedisBoard

try:
    import redis
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "taskboard.hosts.server_mutants needs redis-py: pip install 'taskboard-contract[redis]'"
    ) from exc

__all__ = [
    "SERVER_CLOCK_MUTANTS",
    "ServerReleaseIgnoresToken",
    "ServerTakeoverOnClientClock",
    "ServerTimeSecondsOnly",
    "ServerWrongTtl",
]


_MICROSECOND = timedelta(microseconds=1)


def _patch(source: str, old: str, new: str) -> str:
    """``source`` with its one occurrence of ``old`` replaced by ``new``."""
    if source.count(old) != 1:
        raise AssertionError(f"a server mutant's patch no longer applies: {old!r}")
    return source.replace(old, new)


class _ServerMutant(RedisBoard):
    """RedisBoard on the server's clock whatever ``clock`` is given; not itself a mutant."""

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock | Literal["server"],
        url_or_client: str | redis.Redis,
        *,
        board_id: str | None = None,
        delete_on_close: bool | None = None,
    ) -> None:
        del clock  # a store that keeps its own time: the injected clock is never read
        super().__init__(
            tasks, "server", url_or_client, board_id=board_id, delete_on_close=delete_on_close
        )


class ServerReleaseIgnoresToken(_ServerMutant):
    """Bug: release never compares the caller's token: any token releases a claimed task.

    Breaks SPEC 3.2 (a token that is not the current lease's is
    ``LeaseLostError``, and changes nothing). The release script checks that
    the task is claimed and its lease live, then frees it, whoever asks;
    complete and fail still check the token. Mirrors the classic Redis lock
    release done as a bare ``DEL`` (or a script that dropped the ``GET ==
    token`` check): a worker whose lease was taken over, still holding its old
    token, releases the new holder's claim, and a third worker takes the task
    while the second still works on it.
    """

    @property
    def _sources(self) -> dict[str, str]:
        release = _patch(
            SERVER_SCRIPTS["finish"],
            "local rejected = holder(id, token, now)",
            "local rejected = holder(id, redis.call('HGET', TOKEN, id) or token, now)"
            "  -- BUG: the caller's token is never compared",
        )
        return {**SERVER_SCRIPTS, "release": release}

    def release(self, task_id: str, token: str) -> None:
        _returned_none(task_id, self._run("release", self._finish_args(task_id, token, State.OPEN)))


#: Each lease's expiry key: ``taskboard:{board_id}:lease:<task id>`` (Lua, in the prelude).
_LEASE_PREFIX = "local LEASE = string.sub(STATE, 1, -6) .. 'lease:'\n"


class ServerWrongTtl(_ServerMutant):
    """Bug: the store enforces expiry with a key set by ``PX`` from the TTL in microseconds.

    Breaks SPEC 2 (a lease is live iff ``now < until``, with the ``until`` the
    board reported). The lease's ``until`` is computed, stored and returned
    correctly (``TIME + ttl``), but liveness is judged, as many Redis lease
    implementations do, by a per-lease key ``SET lease:<id> <token> PX <ttl>``
    that Redis expires on its own, and ``ttl`` there is the microsecond count
    the scripts carry while ``PX`` takes milliseconds. So a 20 ms lease is
    enforced for 20 s: a claim just after the reported ``until`` is a
    ``TakenError`` where a takeover is due, and the holder may still renew,
    release or complete after its ``until``. Mirrors the unit confusion of a
    TTL passed in one unit to a command that reads another (``PX`` given
    microseconds, ``EX`` given milliseconds): a crashed worker's tasks stay
    stuck for 1000 times their lease.

    The expiry keys are not among the script's declared keys (one per task),
    as in such implementations; they share the board's hash tag, and
    :meth:`close` deletes them with the board.
    """

    @property
    def _sources(self) -> dict[str, str]:
        # Liveness: the expiry key exists (Redis expired it, or it is there), not now < until.
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
                sources[name],
                "set_until(id, until_)\nreturn {'ok', row(id)}",
                "set_until(id, until_)\n"
                "if ttl ~= '' then\n"
                "  redis.call('SET', LEASE .. id, token, 'PX', ttl)"
                "  -- BUG: ttl is in microseconds, PX takes milliseconds\n"
                "end\n"
                "return {'ok', row(id)}",
            )
        sources["finish"] = _patch(
            sources["finish"],
            "redis.call('HDEL', UNTIL, id)\nreturn {'ok'}",
            "redis.call('HDEL', UNTIL, id)\nredis.call('DEL', LEASE .. id)\nreturn {'ok'}",
        )
        return sources

    def close(self) -> None:
        """Delete the lease keys too (if the board's keys are deleted), then close."""
        if not self._closed and self.delete_on_close:
            pattern = f"taskboard:{{{self.board_id}}}:lease:*"
            stale = list(self._client.scan_iter(match=pattern))
            if stale:
                self._client.delete(*stale)
        super().close()


class ServerTakeoverOnClientClock(_ServerMutant):
    """Bug: claim's takeover check reads the client's clock, which runs 50 ms fast.

    Breaks SPEC 2 (the board computes expiry from its own clock, never the
    caller's) and so SPEC 3.1 (a claim of a task whose lease is live is a
    ``TakenError``). ``until`` is still the server's ``TIME + ttl``, but claim
    judges the current lease with a ``now`` the client sends, and the client's
    clock is :attr:`client_clock_ahead` (50 ms) ahead of the server's. A claim
    up to 50 ms before the real ``until`` takes the task over: two live holders.
    A client on the server's own machine would share its clock and hide the
    bug, so this mutant simulates a second machine whose clock is off
    (``time.time()`` plus 50 ms), as when NTP has not yet corrected a host or a
    VM resumed with a stale clock. Mirrors lock libraries that compare a
    stored deadline with the caller's ``time.time()`` (the clock-drift caveat of
    Redlock-style leases).
    """

    #: How far the simulated client machine's clock runs ahead of the server's.
    client_clock_ahead: ClassVar[timedelta] = timedelta(milliseconds=50)

    @property
    def _sources(self) -> dict[str, str]:
        claim = _patch(
            SERVER_SCRIPTS["claim"],
            "if state == 'claimed' and live(id, now) then",
            "if state == 'claimed' and live(id, ARGV[5]) then  -- BUG: the client's clock",
        )
        return {**SERVER_SCRIPTS, "claim": claim}

    def _claim_args(self, task_id: str, agent: str, request: ClaimRequest) -> list[str]:
        client_now = time.time_ns() // 1000 + self.client_clock_ahead // _MICROSECOND
        return [*super()._claim_args(task_id, agent, request), str(client_now)]


class ServerTimeSecondsOnly(_ServerMutant):
    """Bug: now is Redis ``TIME``'s seconds only; its microseconds part is dropped.

    Breaks SPEC 2 (``until = now + ttl`` from the board's clock; a lease
    expires at its ``until``). The scripts take ``now`` from the first element
    of ``TIME`` (whole seconds) and pad it with zeros, so every ``until`` is
    dated up to a second before the call, and a lease stays live until the
    next whole second of real time after its ``until``: a claim just after the
    reported ``until`` is a ``TakenError``. Mirrors scripts that read
    ``redis.call('TIME')[1]`` (the seconds) and never look at ``[2]``, as
    seconds-resolution timestamps creep into millisecond leases.
    """

    @property
    def _sources(self) -> dict[str, str]:
        return {
            name: _patch(
                source,
                "return t[1] .. string.format('%06d', tonumber(t[2]))",
                "return t[1] .. '000000'  -- BUG: TIME's microseconds are dropped",
            )
            for name, source in SERVER_SCRIPTS.items()
        }


#: Every server-clock mutant, in gallery order.
SERVER_CLOCK_MUTANTS: tuple[type[RedisBoard], ...] = (
    ServerReleaseIgnoresToken,
    ServerWrongTtl,
    ServerTakeoverOnClientClock,
    ServerTimeSecondsOnly,
)
