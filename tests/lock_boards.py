"""A Board built on a third-party lock library: redis-py's own :class:`redis.lock.Lock`.

:class:`LockBoard` takes exclusivity, lease expiry and the token check from the library
and from Redis's own clock; nothing in it fakes or reads a test clock. It is meant for
the wall-clock mode of ``BoardMachine`` (SPEC section 7): ``make_board(tasks, clock)``
gets a ``SystemClock`` which this board ignores (see :func:`lock_board_factory` in
``tests/test_lock_board.py``).

The ``*Lock`` subclasses below are broken versions of the library, each with one
realistic bug named in its docstring, so a test can show that the checker catches a
board whose lock library is wrong while the wrapper around it is right.
"""

from __future__ import annotations

import json
import math
import secrets
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, ClassVar, Literal, Self

import redis
import redis.lock
from redis.exceptions import LockError, LockNotOwnedError

from taskboard import (
    BlockedError,
    ClaimRequest,
    Lease,
    LeaseLostError,
    NotFoundError,
    State,
    TakenError,
    Task,
    TerminalError,
)

__all__ = [
    "DeleteOthersLock",
    "LockBoard",
    "StaleTokenReleaseLock",
    "UncheckedExtendLock",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)
_STATES = {s.value: s for s in State}

# -- the wrapper's own scripts: record keeping and expiry reads, never a token decision ---------

#: KEYS[1] lock key, ARGV[1] token. ``{1, PEXPIRETIME}`` while ``token`` holds the lock;
#: otherwise (the lock expired between the library's command and this read, or someone
#: took it over since) ``{0, the server's TIME in whole ms}``: a moment at which the lock
#: key had already expired, so the lease's ``until`` cannot be later than it.
_EXPIRY = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return {1, redis.call('PEXPIRETIME', KEYS[1])}
end
local now = redis.call('TIME')
return {0, tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)}
"""

#: KEYS[1] task hash, KEYS[2] fence counter; ARGV owner, token, until ms ("" for none).
#: The library has already granted the lock: record the lease, bump the fence (INCR,
#: never reset) and ``seq``, and return the record.
_RECORD_CLAIM = """
local fence = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'state', 'claimed', 'owner', ARGV[1], 'token', ARGV[2],
           'fence', fence)
if ARGV[3] == '' then redis.call('HDEL', KEYS[1], 'until')
else redis.call('HSET', KEYS[1], 'until', ARGV[3]) end
redis.call('HINCRBY', KEYS[1], 'seq', 1)
return redis.call('HGETALL', KEYS[1])
"""

#: KEYS[1] task hash; ARGV until ms ("" for none). The lock's expiry has been changed.
_RECORD_RENEW = """
if ARGV[1] == '' then redis.call('HDEL', KEYS[1], 'until')
else redis.call('HSET', KEYS[1], 'until', ARGV[1]) end
redis.call('HINCRBY', KEYS[1], 'seq', 1)
return redis.call('HGETALL', KEYS[1])
"""

#: KEYS[1] task hash; ARGV new state. The library has released the lock.
_RECORD_FINISH = """
redis.call('HSET', KEYS[1], 'state', ARGV[1], 'owner', '')
redis.call('HDEL', KEYS[1], 'token', 'fence', 'until')
redis.call('HINCRBY', KEYS[1], 'seq', 1)
return 1
"""

#: KEYS[1] lock key; ARGV token, ms ("0": no expiry). The two renewals redis-py's
#: ``Lock.extend`` cannot do: drop the expiry (``PERSIST``), and give an expiry to a lock
#: that has none (its script refuses a key whose PTTL is -1). Token-checked like the
#: library's own scripts; 1 if ``token`` holds the lock, else 0.
_RESET_EXPIRY = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '0' then redis.call('PERSIST', KEYS[1])
else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 1
"""


class LockBoard:
    """A Board whose leases are :class:`redis.lock.Lock` locks, one per task.

    What comes from the library (``lock_class``), on Redis's clock:

    * ``claim``: ``lock_class(client, name, timeout=ttl or None).acquire(blocking=False,
      token=<fresh 128-bit token>)``; ``False`` is :class:`TakenError`. A lease whose lock
      key Redis has expired is taken over by the same acquire (new token, greater fence).
    * ``release`` / ``complete`` / ``fail``: a lock object holding the caller's token
      (``lock.local.token``) and ``lock.release()``; ``LockError`` (``LockNotOwnedError``)
      is :class:`LeaseLostError`. The wrapper never compares tokens itself, so a library
      that releases for a stale token, or deletes another holder's lock, shows.
    * ``renew`` with ``ttl > 0`` on a lock that has an expiry: ``lock.extend(ttl,
      replace_ttl=True)``. The library cannot do the other two renewals: ``ttl == 0``
      must drop the expiry (SPEC 3.5: ``until`` is recomputed as in claim, so ``None``),
      and its extend script refuses a lock without an expiry; these run a four-line
      token-checked script of this module (``_RESET_EXPIRY``), the same check the
      library's scripts make. An expired lease cannot be renewed (its key is gone).

    What the wrapper keeps, in one Redis hash per task: state, owner, token, fence,
    until, seq, title and deps; and a fence counter per task (``INCR``, never reset). It
    checks the non-time parts of SPEC 3.1 itself, in SPEC order: unknown id, ``DONE``,
    a dependency not ``DONE``, then (library) the lock, then an empty agent (for which it
    asks ``Lock.locked()`` whether the lock is held, so a held task is still
    :class:`TakenError`). The state is never derived from the lock key: after Redis
    expires a lock the record still shows ``CLAIMED`` with the old lease (SPEC 4).

    ``until`` is what Redis enforces. Redis expires a key at ``PEXPIRETIME`` ``W`` (ms)
    when its ms clock reads ``now > W``, that is from real time ``W + 1 ms`` on; the
    lease is live iff ``t < until`` (SPEC 2), so ``until = W + 1 ms``, exactly. It is read
    right after the library's command by a token-checked script; if the lock has
    already expired by then (a TTL of a millisecond or so), ``until`` is the server's
    ms time of that read, a moment at which the lease had already expired.

    SPEC 3.4: ``"reject"``. Once Redis has expired the lock key, the library's release
    finds no key and raises ``LockNotOwnedError``, even when nobody took over.

    Sequential use only: each operation is several round trips (record read, library
    command, record write). Two claims cannot both win the lock, but a claim racing a
    release or complete of the same task can interleave their record writes.

    Args:
        tasks: the initial tasks, without leases (their state, title, deps and seq are
            kept).
        url_or_client: a ``redis://`` URL (the board makes a client and closes it in
            :meth:`close`) or a ``redis.Redis`` client (left open).
        lock_class: the lock library: :class:`redis.lock.Lock` or a subclass.

    Raises:
        ValueError: two initial tasks share an id, or one is ``CLAIMED`` or has a lease.
    """

    #: Redis keeps expiry times in whole milliseconds.
    clock_resolution: ClassVar[timedelta] = _MS
    #: SPEC 3.4: an expired lock key is gone, so the library refuses to release it.
    expired_lease_policy: ClassVar[Literal["accept", "reject"]] = "reject"

    def __init__(
        self,
        tasks: Iterable[Task],
        url_or_client: str | redis.Redis,
        *,
        lock_class: type[redis.lock.Lock] = redis.lock.Lock,
    ) -> None:
        initial = list(tasks)
        ids = [task.id for task in initial]
        if len(set(ids)) != len(ids):
            raise ValueError("LockBoard: two initial tasks share an id")
        for task in initial:
            if task.lease is not None or task.state == State.CLAIMED:
                raise ValueError(f"LockBoard cannot import the lease of {task.id!r}")
        self.lock_class = lock_class
        self.prefix = f"lockboard:{{{secrets.token_hex(8)}}}:"
        self._ids = ids
        self._owns_client = isinstance(url_or_client, str)
        self._client: redis.Redis = (
            redis.Redis.from_url(url_or_client) if isinstance(url_or_client, str) else url_or_client
        )
        self._closed = False
        register = self._client.register_script
        self._expiry = register(_EXPIRY)
        self._record_claim = register(_RECORD_CLAIM)
        self._record_renew = register(_RECORD_RENEW)
        self._record_finish = register(_RECORD_FINISH)
        self._reset_expiry = register(_RESET_EXPIRY)
        try:
            with self._client.pipeline(transaction=True) as pipe:
                for task in initial:
                    pipe.hset(
                        self._task_key(task.id),
                        mapping={
                            "title": task.title,
                            "deps": json.dumps(list(task.deps)),
                            "state": str(task.state),
                            "owner": "",
                            "seq": task.seq,
                        },
                    )
                pipe.execute()
        except BaseException:
            if self._owns_client:
                self._client.close()
            raise

    def __repr__(self) -> str:
        return f"LockBoard({len(self._ids)} tasks, {self.lock_class.__name__}, {self.prefix!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def keys(self) -> list[str]:
        """Every key this board may have written: task hashes, fence counters, locks."""
        return [
            key(id_)
            for id_ in self._ids
            for key in (self._task_key, self._fence_key, self._lock_key)
        ]

    def close(self) -> None:
        """Delete the board's keys and close the client if the board made it; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._ids:
                self._client.delete(*self.keys)
        finally:
            if self._owns_client:
                self._client.close()

    # -- the Board protocol ------------------------------------------------------------------------

    def list_tasks(self) -> list[Task]:
        """Every task as its record shows it, read in one MULTI (SPEC 3.7)."""
        self._check_open()
        with self._client.pipeline(transaction=True) as pipe:
            for id_ in self._ids:
                pipe.hgetall(self._task_key(id_))
            rows = pipe.execute()
        return [_task(id_, row) for id_, row in zip(self._ids, rows, strict=True)]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        """Claim through the library's non-blocking acquire with a fresh token (SPEC 3.1).

        Raises:
            NotFoundError: no task has this id.
            TerminalError: the task is ``DONE``.
            BlockedError: a dependency is not ``DONE``.
            TakenError: the library did not grant the lock (or, for an empty agent, the
                lock is held).
            ValueError: ``agent`` is empty.
        """
        record = self._record(task_id)
        if _text(record["state"]) == State.DONE:
            raise TerminalError(f"task {task_id!r} is done; done is forever")
        deps: list[str] = json.loads(_text(record["deps"]))
        if deps:
            with self._client.pipeline(transaction=True) as pipe:
                for dep in deps:
                    pipe.hget(self._task_key(dep), "state")
                dep_states = pipe.execute()
            for dep, state in zip(deps, dep_states, strict=True):
                if state is None or _text(state) != State.DONE:
                    shown = "unknown" if state is None else _text(state)
                    raise BlockedError(f"task {task_id!r} waits for {dep!r} ({shown})")
        ttl_ms = _millis(request.ttl)
        lock = self.lock_class(
            self._client, name=self._lock_key(task_id), timeout=_seconds(ttl_ms) or None
        )
        if not agent:
            if lock.locked():
                raise TakenError(f"task {task_id!r} is locked")
            raise ValueError("claim needs a non-empty agent name")
        token = secrets.token_hex(16)
        if not lock.acquire(blocking=False, token=token):
            raise TakenError(f"task {task_id!r} is locked")
        until = self._until(task_id, token) if ttl_ms else ""
        row = self._record_claim(
            keys=[self._task_key(task_id), self._fence_key(task_id)], args=[agent, token, until]
        )
        return _task(task_id, _pairs(row))

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        """Give the lock a new expiry from Redis's clock (SPEC 3.5; see the class docstring).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, or the library (or, for the two
                renewals it cannot do, this module's token-checked script) says ``token``
                does not hold the lock: a stale token or an expired lease.
        """
        record = self._record(task_id)
        if _text(record["state"]) != State.CLAIMED:
            raise LeaseLostError(f"task {task_id!r} is {_text(record['state'])}, not claimed")
        ttl_ms = _millis(request.ttl)
        name = self._lock_key(task_id)
        if ttl_ms and "until" in record:
            lock = self.lock_class(self._client, name=name, timeout=_seconds(ttl_ms))
            lock.local.token = token.encode()
            try:
                lock.extend(_seconds(ttl_ms), replace_ttl=True)
            except LockError as exc:
                raise LeaseLostError(f"the lock of {task_id!r} is not held by this token") from exc
        elif not self._reset_expiry(keys=[name], args=[token, str(ttl_ms)]):
            raise LeaseLostError(f"the lock of {task_id!r} is not held by this token")
        until = self._until(task_id, token) if ttl_ms else ""
        row = self._record_renew(keys=[self._task_key(task_id)], args=[until])
        return _task(task_id, _pairs(row))

    def release(self, task_id: str, token: str) -> None:
        """Release the lock through the library; the task is ``OPEN`` (SPEC 3.2).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, or the library refused the
                release (a stale token, or an expired lock: SPEC 3.4 "reject").
        """
        self._finish(task_id, token, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        """As :meth:`release`, but the task is ``DONE`` (SPEC 3.3)."""
        self._finish(task_id, token, State.DONE)

    def fail(self, task_id: str, token: str) -> None:
        """As :meth:`release`, but the task is ``FAILED`` (SPEC 3.6)."""
        self._finish(task_id, token, State.FAILED)

    # -- helpers -----------------------------------------------------------------------------------

    def _finish(self, task_id: str, token: str, state: State) -> None:
        record = self._record(task_id)
        if _text(record["state"]) != State.CLAIMED:
            raise LeaseLostError(f"task {task_id!r} is {_text(record['state'])}, not claimed")
        lock = self.lock_class(self._client, name=self._lock_key(task_id))
        lock.local.token = token.encode()
        try:
            lock.release()
        except LockError as exc:
            raise LeaseLostError(f"the lock of {task_id!r} is not held by this token") from exc
        self._record_finish(keys=[self._task_key(task_id)], args=[str(state)])

    def _until(self, task_id: str, token: str) -> str:
        """The lease's ``until`` in ms since the epoch, as Redis enforces it."""
        held, when = self._expiry(keys=[self._lock_key(task_id)], args=[token])
        if not held:
            return str(when)  # already expired when read: until is at most this moment
        if when < 0:
            return ""  # no expiry (a library that dropped the timeout)
        return str(when + 1)  # Redis deletes the key once its ms clock reads > PEXPIRETIME

    def _record(self, task_id: str) -> dict[str, Any]:
        self._check_open()
        record = {_text(k): v for k, v in self._client.hgetall(self._task_key(task_id)).items()}
        if not record:
            raise NotFoundError(f"no task has id {task_id!r}")
        return record

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _task_key(self, task_id: str) -> str:
        return f"{self.prefix}task:{task_id}"

    def _fence_key(self, task_id: str) -> str:
        return f"{self.prefix}fence:{task_id}"

    def _lock_key(self, task_id: str) -> str:
        return f"{self.prefix}lock:{task_id}"


# -- broken versions of the library --------------------------------------------------------------


class StaleTokenReleaseLock(redis.lock.Lock):
    """Bug: release is a plain ``DEL`` that never compares the token.

    The naive lock of many blog posts: ``release`` deletes the key and complains only
    when there was nothing to delete. Any token, a stale holder's or one never issued,
    releases (or completes) a live lease, and a holder whose lease expired and was
    taken over deletes the new holder's lock.
    """

    def do_release(self, expected_token: Any) -> None:
        if not self.redis.delete(self.name):
            raise LockNotOwnedError(
                "Cannot release a lock that's no longer owned", lock_name=self.name
            )


class DeleteOthersLock(redis.lock.Lock):
    """Bug: the release script deletes the key whatever the token check says.

    An ``end`` in the wrong place: the script compares the token and returns 0 on a
    mismatch, so the caller correctly gets ``LockNotOwnedError``, but the ``DEL`` runs
    first. A stale holder is told it lost the lock, and in passing deletes the lock of
    whoever holds it now, so a third agent can claim a task under a live lease.
    """

    # The library registers its scripts once per class, on the class: a subclass that
    # changes a script must reset the inherited registration, or it runs the parent's.
    lua_release = None
    LUA_RELEASE_SCRIPT = """
        local token = redis.call('get', KEYS[1])
        redis.call('del', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        return 1
    """


class UncheckedExtendLock(redis.lock.Lock):
    """Bug: extend resets the expiry of whatever lock is there, without the token check.

    A stale holder's renew succeeds after a takeover (and sets the new holder's lock to
    the stale holder's TTL); a token never issued renews a live lease.
    """

    lua_extend = None
    LUA_EXTEND_SCRIPT = """
        if redis.call('exists', KEYS[1]) == 0 then
            return 0
        end
        redis.call('pexpire', KEYS[1], ARGV[2])
        return 1
    """


# -- encoding ------------------------------------------------------------------------------------


def _millis(ttl: timedelta) -> int:
    """``ttl`` in whole ms for ``PX``, rounded up so a positive ttl never becomes 0."""
    return math.ceil(ttl / _MS)


def _seconds(ms: int) -> float:
    """``ms`` as the float seconds the library wants, such that its ``int(s * 1000)`` is
    ``ms`` again: plain ``ms / 1000`` truncates 1001 ms to 1000 (741 of the first 100000)."""
    seconds = ms / 1000
    return seconds if int(seconds * 1000) == ms else math.nextafter(seconds, math.inf)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    """A Lua ``HGETALL`` reply (a flat list) as a dict."""
    return {_text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def _task(task_id: str, record: dict[Any, Any]) -> Task:
    fields = {_text(k): _text(v) for k, v in record.items()}
    lease = None
    if "token" in fields:
        until = fields.get("until")
        lease = Lease(
            token=fields["token"],
            fence=int(fields["fence"]),
            until=None if until is None else _EPOCH + int(until) * _MS,
        )
    # An unknown state string is kept as is: reporting it is check()'s job.
    state: Any = _STATES.get(fields["state"], fields["state"])
    return Task(
        id=task_id,
        title=fields["title"],
        deps=tuple(json.loads(fields["deps"])),
        state=state,
        owner=fields["owner"],
        lease=lease,
        seq=int(fields["seq"]),
    )
