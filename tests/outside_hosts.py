"""Boards written by an outside user from the contract alone (SPEC.md and the public docs).

Like ``tests/independent_hosts.py``, nothing here was written from taskboard's internals
(``taskboard.stateful``, ``taskboard.model``, ``taskboard.hosts``): each board is what a
user of the library would write for a store of their own, to see whether the checker
raises false alarms on correct boards it has never seen, and misses bugs a real store
gets wrong.

Three correct boards, in styles the reference hosts do not use:

- :class:`LuaRedisBoard`: Redis, one Lua script per operation, the server's ``TIME``,
  one hash per task (run it with ``--clock virtual --server redis`` or ``--clock wall``);
- :class:`ReturningPostgresBoard`: PostgreSQL, one ``UPDATE ... RETURNING`` per operation,
  the checker's clock passed as a parameter;
- :class:`LockPerTaskBoard`: in memory, a ``threading.Lock`` per task, tokens from
  ``secrets``.

Then the buggy variants (``BUGGY_BOARDS``): each one realistic production bug, named in
its docstring.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, ClassVar

from taskboard import (
    BlockedError,
    ClaimRequest,
    Clock,
    Lease,
    LeaseLostError,
    NotFoundError,
    State,
    TakenError,
    Task,
    TerminalError,
)

# ---------------------------------------------------------------------------------------
# (c) In memory: a lock per task.
# ---------------------------------------------------------------------------------------


class LockPerTaskBoard:
    """Tasks in a dict, each behind its own ``threading.Lock``; a snapshot takes every lock
    in id order. Fences live beside the tasks so they survive release."""

    expired_lease_policy: ClassVar[str] = "accept"

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._clock = clock
        self._tasks: dict[str, Task] = {t.id: t for t in tasks}
        self._locks = {t.id: threading.Lock() for t in tasks}
        self._fences = {t.id: (t.lease.fence if t.lease else 0) for t in tasks}
        self._order = sorted(self._tasks)

    # -- helpers a store decides ------------------------------------------------------

    def _now(self) -> datetime:
        return self._clock.now()

    def _live(self, lease: Lease | None, now: datetime) -> bool:
        return lease is not None and (lease.until is None or now < lease.until)

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        return now + ttl if ttl > timedelta(0) else None

    def _token(self, task_id: str, agent: str) -> str:
        return secrets.token_urlsafe(18)

    def _next_fence(self, task: Task) -> int:
        self._fences[task.id] += 1
        return self._fences[task.id]

    def _deps_done(self, task: Task) -> bool:
        return all(d in self._tasks and self._tasks[d].state == State.DONE for d in task.deps)

    def _owns(self, task: Task, token: str) -> bool:
        return task.state == State.CLAIMED and task.lease is not None and task.lease.token == token

    def _get(self, task_id: str) -> tuple[Task, threading.Lock]:
        lock = self._locks.get(task_id)
        if lock is None:
            raise NotFoundError(task_id)
        return self._tasks[task_id], lock

    # -- the Board --------------------------------------------------------------------

    def list_tasks(self) -> list[Task]:
        for tid in self._order:
            self._locks[tid].acquire()
        try:
            return [self._tasks[tid] for tid in self._order]
        finally:
            for tid in reversed(self._order):
                self._locks[tid].release()

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        _, lock = self._get(task_id)
        with lock:
            task = self._tasks[task_id]
            now = self._now()
            self._check_claim(task, agent, now)
            return self._grant(task, agent, now, request.ttl)

    def _check_claim(self, task: Task, agent: str, now: datetime) -> None:
        if task.state == State.DONE:
            raise TerminalError(task.id)
        if not self._deps_done(task):
            raise BlockedError(task.id)
        if task.state == State.CLAIMED and self._live(task.lease, now):
            raise TakenError(task.id)
        if not agent:
            raise ValueError("empty agent")

    def _grant(self, task: Task, agent: str, now: datetime, ttl: timedelta) -> Task:
        lease = Lease(self._token(task.id, agent), self._next_fence(task), self._until(now, ttl))
        new = replace(task, state=State.CLAIMED, owner=agent, lease=lease, seq=self._next_seq(task))
        self._tasks[task.id] = new
        return new

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        _, lock = self._get(task_id)
        with lock:
            task = self._tasks[task_id]
            now = self._now()
            if not self._may_renew(task, token, now):
                raise LeaseLostError(task_id)
            assert task.lease is not None
            lease = replace(task.lease, until=self._until(now, request.ttl))
            new = replace(task, lease=lease, seq=self._next_seq(task))
            self._tasks[task_id] = new
            return new

    def _may_renew(self, task: Task, token: str, now: datetime) -> bool:
        return self._owns(task, token) and self._live(task.lease, now)

    def _finish(self, task_id: str, token: str, state: State) -> None:
        _, lock = self._get(task_id)
        with lock:
            task = self._tasks[task_id]
            if not self._may_finish(task, token, self._now()):
                raise LeaseLostError(task_id)
            self._tasks[task_id] = replace(
                task, state=state, owner="", lease=None, seq=self._next_seq(task)
            )

    def _next_seq(self, task: Task) -> int:
        return task.seq + 1

    def _may_finish(self, task: Task, token: str, now: datetime) -> bool:
        return self._owns(task, token)

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.DONE)

    def fail(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.FAILED)


# ---------------------------------------------------------------------------------------
# (a) Redis: one Lua script per operation, the server's TIME, one hash per task.
# ---------------------------------------------------------------------------------------

_LUA_PRELUDE = """
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function live(h, now)
  if h['state'] ~= 'claimed' then return false end
  if h['until'] == '' then return true end
  return LIVE_TEST
end
local function load(key)
  local raw = redis.call('HGETALL', key)
  if #raw == 0 then return nil end
  local h = {}
  for i = 1, #raw, 2 do h[raw[i]] = raw[i + 1] end
  return h
end
"""

_LUA_LIVE_OK = "now < tonumber(h['until'])"

_LUA_CLAIM = """
-- KEYS[1] the task; KEYS[2..] its dependencies. ARGV: agent, ttl_us, token
local h = load(KEYS[1])
if not h then return {'not_found'} end
if h['state'] == 'done' then return {'terminal'} end
for i = 2, #KEYS do
  if redis.call('HGET', KEYS[i], 'state') ~= 'done' then return {'blocked'} end
end
local now = now_us()
if live(h, now) then return {'taken'} end
if ARGV[1] == '' then return {'invalid'} end
local ttl = tonumber(ARGV[2])
local untilv = ''
if ttl > 0 then untilv = string.format('%.0f', now + ttl) end
local fence = redis.call('HINCRBY', KEYS[1], 'fence', 1)
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[1], 'state', 'claimed', 'owner', ARGV[1], 'token', ARGV[3],
           'until', untilv)
return {'ok', redis.call('HGETALL', KEYS[1])}
"""

_LUA_RENEW = """
-- KEYS[1] the task. ARGV: token, ttl_us
local h = load(KEYS[1])
if not h then return {'not_found'} end
local now = now_us()
if h['state'] ~= 'claimed' or h['token'] ~= ARGV[1] or not live(h, now) then
  return {'lease_lost'}
end
local ttl = tonumber(ARGV[2])
local untilv = ''
if ttl > 0 then untilv = string.format('%.0f', now + ttl) end
redis.call('HSET', KEYS[1], 'until', untilv)
redis.call('HINCRBY', KEYS[1], 'seq', 1)
return {'ok', redis.call('HGETALL', KEYS[1])}
"""

_LUA_FINISH = """
-- KEYS[1] the task. ARGV: token, new state
local h = load(KEYS[1])
if not h then return {'not_found'} end
if h['state'] ~= 'claimed' or h['token'] ~= ARGV[1] then return {'lease_lost'} end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'owner', '', 'token', '', 'until', '')
redis.call('HINCRBY', KEYS[1], 'seq', 1)
return {'ok'}
"""

_LUA_LIST = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGETALL', KEYS[i]) end
return out
"""

_REDIS_ERRORS: dict[str, type[Exception]] = {
    "not_found": NotFoundError,
    "terminal": TerminalError,
    "blocked": BlockedError,
    "taken": TakenError,
    "lease_lost": LeaseLostError,
    "invalid": ValueError,
}


def _redis_url() -> str:
    return os.environ.get("TASKBOARD_SERVER_URL") or os.environ["TASKBOARD_REDIS_URL"]


def _us(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _from_us(us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=us)


class LuaRedisBoard:
    """Each task is the hash ``<prefix>:t:<id>``; each operation one script that reads
    Redis ``TIME`` itself. Tokens come from ``secrets`` on the client, passed in."""

    clock_mode: ClassVar[str] = "wall"
    expired_lease_policy: ClassVar[str] = "accept"
    live_test: ClassVar[str] = _LUA_LIVE_OK

    def __init__(
        self, tasks: Sequence[Task], clock: Clock, *, url: str | None = None, prefix: str = ""
    ) -> None:
        import redis

        self._url = url or _redis_url()
        self._redis = redis.Redis.from_url(self._url)
        self._prefix = prefix or f"outside:{uuid.uuid4().hex}"
        self._owner = not prefix
        prelude = _LUA_PRELUDE.replace("LIVE_TEST", self.live_test)
        self._claim = self._redis.register_script(prelude + _LUA_CLAIM)
        self._renew = self._redis.register_script(prelude + _LUA_RENEW)
        self._finish = self._redis.register_script(prelude + _LUA_FINISH)
        self._list = self._redis.register_script(_LUA_LIST)
        ids_key = f"{self._prefix}:ids"
        if self._owner:
            pipe = self._redis.pipeline(transaction=True)
            for t in tasks:
                pipe.hset(self._key(t.id), mapping=self._fields(t))
                pipe.rpush(ids_key, t.id)
            pipe.execute()
        self._ids = [i.decode() for i in self._redis.lrange(ids_key, 0, -1)]
        self._deps = {t.id: t.deps for t in tasks} if tasks else self._read_deps()

    def _read_deps(self) -> dict[str, tuple[str, ...]]:
        return {t.id: t.deps for t in self.list_tasks()}

    def _key(self, task_id: str) -> str:
        return f"{self._prefix}:t:{task_id}"

    @staticmethod
    def _fields(t: Task) -> dict[str, Any]:
        lease = t.lease
        return {
            "id": t.id,
            "title": t.title,
            "deps": json.dumps(list(t.deps)),
            "state": str(t.state),
            "owner": t.owner,
            "token": lease.token if lease else "",
            "fence": lease.fence if lease else 0,
            "until": str(_us(lease.until)) if lease and lease.until else "",
            "seq": t.seq,
        }

    @staticmethod
    def _task(raw: list[bytes]) -> Task:
        h = {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)}
        lease = None
        if h["state"] == "claimed":
            until = _from_us(int(h["until"])) if h["until"] else None
            lease = Lease(h["token"], int(h["fence"]), until)
        return Task(
            h["id"],
            h["title"],
            tuple(json.loads(h["deps"])),
            State(h["state"]),
            h["owner"],
            lease,
            int(h["seq"]),
        )

    def _run(self, result: list[Any]) -> list[Any]:
        code = result[0].decode() if isinstance(result[0], bytes) else result[0]
        if code != "ok":
            raise _REDIS_ERRORS[code](code)
        return result

    def open_client(self) -> LuaRedisBoard:
        return type(self)([], SystemClockless(), url=self._url, prefix=self._prefix)

    def close(self) -> None:
        if self._owner:
            keys = [self._key(i) for i in self._ids] + [f"{self._prefix}:ids"]
            self._redis.delete(*keys)
        self._redis.close()

    def list_tasks(self) -> list[Task]:
        raws = self._list(keys=[self._key(i) for i in self._ids])
        return [self._task(r) for r in raws]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if task_id not in self._deps:
            raise NotFoundError(task_id)
        keys = [self._key(task_id)] + [self._key(d) for d in self._deps[task_id]]
        ttl = request.ttl // timedelta(microseconds=1)
        res = self._run(self._claim(keys=keys, args=[agent, ttl, secrets.token_hex(16)]))
        return self._task(res[1])

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        ttl = request.ttl // timedelta(microseconds=1)
        return self._task(self._run(self._renew(keys=[self._key(task_id)], args=[token, ttl]))[1])

    def release(self, task_id: str, token: str) -> None:
        self._run(self._finish(keys=[self._key(task_id)], args=[token, "open"]))

    def complete(self, task_id: str, token: str) -> None:
        self._run(self._finish(keys=[self._key(task_id)], args=[token, "done"]))

    def fail(self, task_id: str, token: str) -> None:
        self._run(self._finish(keys=[self._key(task_id)], args=[token, "failed"]))


class SystemClockless:
    """The clock a Redis client is opened with: the board never reads it (Redis ``TIME``)."""

    def now(self) -> datetime:
        raise AssertionError("LuaRedisBoard reads the server's TIME, never a client clock")


# ---------------------------------------------------------------------------------------
# (b) PostgreSQL: one UPDATE ... RETURNING per operation, the checker's clock as a parameter.
# ---------------------------------------------------------------------------------------

_PG_TABLE = """
CREATE TABLE IF NOT EXISTS outside_tasks (
  board text NOT NULL, id text NOT NULL, title text NOT NULL, deps text[] NOT NULL,
  state text NOT NULL, owner text NOT NULL, token text, fence bigint NOT NULL,
  lease_until timestamptz, seq bigint NOT NULL,
  PRIMARY KEY (board, id), UNIQUE (token)
)
"""

_PG_COLS = "id, title, deps, state, owner, token, fence, lease_until, seq"

_PG_CLAIM = f"""
UPDATE outside_tasks t
   SET state = 'claimed', owner = %(agent)s, token = %(token)s, fence = FENCE_EXPR,
       lease_until = %(until)s, seq = t.seq + 1
 WHERE t.board = %(board)s AND t.id = %(id)s AND %(agent)s <> ''
   AND (t.state IN ('open', 'failed')
        OR (t.state = 'claimed' AND t.lease_until IS NOT NULL AND t.lease_until <= %(now)s))
   AND NOT EXISTS (SELECT 1 FROM outside_tasks d
                    WHERE d.board = t.board AND d.id = ANY(t.deps) AND d.state <> 'done')
RETURNING {_PG_COLS}
"""

_PG_RENEW = f"""
UPDATE outside_tasks SET lease_until = %(until)s, seq = seq + 1
 WHERE board = %(board)s AND id = %(id)s AND state = 'claimed' AND token = %(token)s
   AND (lease_until IS NULL OR lease_until > %(now)s)
RETURNING {_PG_COLS}
"""

_PG_FINISH = """
UPDATE outside_tasks
   SET state = %(state)s, owner = '', token = NULL, lease_until = NULL, seq = seq + 1
 WHERE board = %(board)s AND id = %(id)s AND state = 'claimed' AND token = %(token)s
RETURNING id
"""

_PG_FENCE_OK = "t.fence + 1"


class ReturningPostgresBoard:
    """Rows of one table, keyed by (board, id). Each operation is one conditional
    ``UPDATE ... RETURNING``; when no row comes back, the board reads the row under
    ``FOR UPDATE`` in the same transaction to say why (and tries again if nothing stops it).
    One connection per thread."""

    expired_lease_policy: ClassVar[str] = "accept"
    fence_expr: ClassVar[str] = _PG_FENCE_OK

    def __init__(
        self, tasks: Sequence[Task], clock: Clock, *, url: str | None = None, board: str = ""
    ) -> None:
        self._url = (
            url or os.environ.get("TASKBOARD_SERVER_URL") or os.environ["TASKBOARD_POSTGRES_URL"]
        )
        self._clock = clock
        self._board = board or uuid.uuid4().hex
        self._owner = not board
        self._local = threading.local()
        self._conns: list[Any] = []
        self._conns_lock = threading.Lock()
        self._claim_sql = _PG_CLAIM.replace("FENCE_EXPR", self.fence_expr)
        if self._owner:
            self._create(tasks)

    def _conn(self) -> Any:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            import psycopg

            conn = psycopg.connect(self._url, options="-c timezone=UTC")
            self._local.conn = conn
            with self._conns_lock:
                self._conns.append(conn)
        return conn

    def _create(self, tasks: Sequence[Task]) -> None:
        import psycopg

        conn = self._conn()
        for _ in range(5):
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(424242)")
                    conn.execute(_PG_TABLE)
                break
            except psycopg.errors.UniqueViolation:  # two creators at once
                continue
        with conn.transaction():
            for t in tasks:
                lease = t.lease
                conn.execute(
                    f"INSERT INTO outside_tasks (board, {_PG_COLS}) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (
                        self._board,
                        t.id,
                        t.title,
                        list(t.deps),
                        str(t.state),
                        t.owner,
                        lease.token if lease else None,
                        lease.fence if lease else 0,
                        lease.until if lease else None,
                        t.seq,
                    ),
                )

    @staticmethod
    def _task(row: Sequence[Any]) -> Task:
        tid, title, deps, state, owner, token, fence, until, seq = row
        lease = Lease(token, fence, until) if state == "claimed" else None
        return Task(tid, title, tuple(deps), State(state), owner, lease, seq)

    def open_client(self) -> ReturningPostgresBoard:
        return type(self)([], self._clock, url=self._url, board=self._board)

    def close(self) -> None:
        if self._owner:
            with self._conn().transaction():
                self._conn().execute("DELETE FROM outside_tasks WHERE board = %s", (self._board,))
        with self._conns_lock:
            for c in self._conns:
                c.close()
            self._conns.clear()

    def list_tasks(self) -> list[Task]:
        conn = self._conn()
        with conn.transaction():
            rows = conn.execute(
                f"SELECT {_PG_COLS} FROM outside_tasks WHERE board = %s", (self._board,)
            ).fetchall()
        return [self._task(r) for r in rows]

    def _why_not_claimed(self, conn: Any, task_id: str, agent: str, now: datetime) -> None:
        row = conn.execute(
            f"SELECT {_PG_COLS} FROM outside_tasks WHERE board = %s AND id = %s FOR UPDATE",
            (self._board, task_id),
        ).fetchone()
        if row is None:
            raise NotFoundError(task_id)
        task = self._task(row)
        if task.state == State.DONE:
            raise TerminalError(task_id)
        undone = conn.execute(
            "SELECT count(*) FROM outside_tasks WHERE board = %s AND id = ANY(%s) "
            "AND state <> 'done'",
            (self._board, list(task.deps)),
        ).fetchone()[0]
        if undone:
            raise BlockedError(task_id)
        lease = task.lease
        if task.state == State.CLAIMED and lease and (lease.until is None or now < lease.until):
            raise TakenError(task_id)
        if not agent:
            raise ValueError("empty agent")

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        conn = self._conn()
        while True:
            with conn.transaction():
                now = self._clock.now()
                params = {
                    "board": self._board,
                    "id": task_id,
                    "agent": agent,
                    "token": secrets.token_hex(16),
                    "now": now,
                    "until": now + request.ttl if request.ttl > timedelta(0) else None,
                }
                row = conn.execute(self._claim_sql, params).fetchone()
                if row is not None:
                    return self._task(row)
                self._why_not_claimed(conn, task_id, agent, now)
            # Nothing stopped it on a second look: a racing operation changed the row.

    def _exists(self, conn: Any, task_id: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM outside_tasks WHERE board = %s AND id = %s", (self._board, task_id)
        ).fetchone()
        return row is not None

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        conn = self._conn()
        with conn.transaction():
            now = self._clock.now()
            params = {
                "board": self._board,
                "id": task_id,
                "token": token,
                "now": now,
                "until": now + request.ttl if request.ttl > timedelta(0) else None,
            }
            row = conn.execute(_PG_RENEW, params).fetchone()
            if row is not None:
                return self._task(row)
            if not self._exists(conn, task_id):
                raise NotFoundError(task_id)
            raise LeaseLostError(task_id)

    def _finish(self, task_id: str, token: str, state: str) -> None:
        conn = self._conn()
        with conn.transaction():
            params = {"board": self._board, "id": task_id, "token": token, "state": state}
            if conn.execute(_PG_FINISH, params).fetchone() is not None:
                return
            if not self._exists(conn, task_id):
                raise NotFoundError(task_id)
            raise LeaseLostError(task_id)

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "open")

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "done")

    def fail(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "failed")


class UnusualButCorrectBoard(LockPerTaskBoard):
    """Correct, with the freedoms SPEC leaves: ``seq`` and fences from one board-wide
    counter (they jump at random), ``list_tasks`` in a shuffled order, every ``until``
    returned in another time zone (UTC+05:30, the same instant), and SPEC 3.4 decided per
    task (the default policy, "either"): the late calls of task ``t2`` are refused."""

    expired_lease_policy: ClassVar[str] = "either"
    _ZONE = timezone(timedelta(hours=5, minutes=30))

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        super().__init__(tasks, clock)
        self._counter = 0
        self._counter_lock = threading.Lock()

    def _tick(self) -> int:
        with self._counter_lock:
            self._counter += secrets.randbelow(3) + 1
            return self._counter

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        until = super()._until(now, ttl)
        return until.astimezone(self._ZONE) if until is not None else None

    def _next_fence(self, task: Task) -> int:
        self._fences[task.id] = self._tick()
        return self._fences[task.id]

    def _next_seq(self, task: Task) -> int:
        return self._tick()

    def _may_finish(self, task: Task, token: str, now: datetime) -> bool:
        lease = task.lease
        if lease is not None and not self._live(lease, now) and task.id == "t2":
            return False  # SPEC 3.4: this task's late calls are refused
        return self._owns(task, token)

    def list_tasks(self) -> list[Task]:
        tasks = super().list_tasks()
        return secrets.SystemRandom().sample(tasks, len(tasks))


class CoinFlipExpiredBoard(LockPerTaskBoard):
    """Correct per SPEC 3.4 (policy "either"): a release, complete or fail by the current
    token of an expired lease nobody took over is accepted or refused per call, as a race
    with a background expiry job would decide it (here a coin flip)."""

    expired_lease_policy: ClassVar[str] = "either"

    def _may_finish(self, task: Task, token: str, now: datetime) -> bool:
        if not self._owns(task, token):
            return False
        return self._live(task.lease, now) or secrets.randbelow(2) == 0


class FlooredTtlBoard(LockPerTaskBoard):
    """Correct: stores whole milliseconds and floors a TTL to them (SPEC lets a TTL below the
    resolution round either way, never to "no expiry"): half a millisecond becomes a lease
    that ends at once (``until == now``)."""

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        if ttl <= timedelta(0):
            return None
        return now + (ttl // timedelta(milliseconds=1)) * timedelta(milliseconds=1)


class SortedDepsBoard(LockPerTaskBoard):
    """Keeps dependencies as a set and lists them sorted (Redis ``SMEMBERS``, a sorted SQL
    array): the same dependencies, perhaps in another order than given."""

    def list_tasks(self) -> list[Task]:
        return [replace(t, deps=tuple(sorted(t.deps, reverse=True))) for t in super().list_tasks()]


# ---------------------------------------------------------------------------------------
# Buggy variants: one production bug each.
# ---------------------------------------------------------------------------------------


class LiveAtUntilBoard(LockPerTaskBoard):
    """Claim treats a lease as live while ``now <= until`` (``<=`` for ``<``): no takeover
    at exactly ``until``."""

    def _live(self, lease: Lease | None, now: datetime) -> bool:
        return lease is not None and (lease.until is None or now <= lease.until)


class RenewAtUntilBoard(LockPerTaskBoard):
    """Renew's expiry test is ``now > until``: a renew at exactly ``until`` revives a lease
    that has already expired (claim's test is right)."""

    def _may_renew(self, task: Task, token: str, now: datetime) -> bool:
        lease = task.lease
        return self._owns(task, token) and (
            lease is not None and (lease.until is None or not now > lease.until)
        )


class RenewByAgentNameBoard(LockPerTaskBoard):
    """Renew looks the token up in a token-to-agent table and accepts it when that agent
    is the task's owner: an agent's stale token from an earlier lease renews the current
    one when the same agent name holds it again."""

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        super().__init__(tasks, clock)
        self._agent_of: dict[str, str] = {}

    def _token(self, task_id: str, agent: str) -> str:
        token = super()._token(task_id, agent)
        self._agent_of[token] = agent
        return token

    def _may_renew(self, task: Task, token: str, now: datetime) -> bool:
        return (
            task.state == State.CLAIMED
            and self._agent_of.get(token) == task.owner
            and self._live(task.lease, now)
        )


class TakeoverKeepsFenceBoard(LockPerTaskBoard):
    """A takeover of an expired lease reuses the lease's fence (it only swaps the token and
    owner); only a claim of an open or failed task bumps it."""

    def _grant(self, task: Task, agent: str, now: datetime, ttl: timedelta) -> Task:
        if task.state == State.CLAIMED and task.lease is not None:
            lease = Lease(self._token(task.id, agent), task.lease.fence, self._until(now, ttl))
            new = replace(task, owner=agent, lease=lease, seq=task.seq + 1)
            self._tasks[task.id] = new
            return new
        return super()._grant(task, agent, now, ttl)


class NameDerivedTokenBoard(LockPerTaskBoard):
    """Tokens are ``agent:task:fence``, readable in logs, and the fence is part of them, so
    they look unique; but the fence restarts from the lease's (not the task's) history:
    after a release the next claim by the same agent gets the same token again."""

    def _token(self, task_id: str, agent: str) -> str:
        task = self._tasks[task_id]
        fence = task.lease.fence + 1 if task.lease else 1
        return f"{agent}:{task_id}:{fence}"


class CompleteThenRaiseBoard(LockPerTaskBoard):
    """Complete writes ``DONE`` first, then an after-commit check of the lease's expiry
    raises ``LeaseLostError`` for a late completion: the rejection has changed the task."""

    def complete(self, task_id: str, token: str) -> None:
        task, _ = self._get(task_id)
        late = task.lease is not None and not self._live(task.lease, self._now())
        super().complete(task_id, token)
        if late:
            raise LeaseLostError(task_id)


class ExpiredReleaseSkipsTokenBoard(LockPerTaskBoard):
    """Release skips the token check once the current lease has expired ("it is free
    anyway"): a stale holder's late release clears the next holder's expired lease, before
    that holder's own release or complete."""

    def _may_finish(self, task: Task, token: str, now: datetime) -> bool:
        if task.state == State.CLAIMED and not self._live(task.lease, now):
            return True
        return self._owns(task, token)


class RenewZeroDeletesBoard(LockPerTaskBoard):
    """``renew(ttl=0)`` is implemented as ``PEXPIRE key 0``-style: the lease is deleted
    (the task goes back to open) instead of made to never expire."""

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        if request.ttl > timedelta(0):
            return super().renew(task_id, token, request)
        task, lock = self._get(task_id)
        with lock:
            task = self._tasks[task_id]
            if not self._may_renew(task, token, self._now()):
                raise LeaseLostError(task_id)
            new = replace(task, state=State.OPEN, owner="", lease=None, seq=task.seq + 1)
            self._tasks[task_id] = new
            return new


class ReentrantSameNameBoard(LockPerTaskBoard):
    """A claim by the agent name that holds the task succeeds again (re-entrant, as many
    lock libraries are), with a new token: two processes of one agent name both hold it."""

    def _check_claim(self, task: Task, agent: str, now: datetime) -> None:
        if task.state == State.CLAIMED and task.owner == agent and agent:
            return
        super()._check_claim(task, agent, now)


class FailedDepUnblocksBoard(LockPerTaskBoard):
    """Dependencies count as finished when ``done`` or ``failed`` (a "finished" flag):
    a failed dependency unblocks its dependants."""

    def _deps_done(self, task: Task) -> bool:
        return all(self._tasks[d].state in (State.DONE, State.FAILED) for d in task.deps)


class WholeSecondTtlBoard(LockPerTaskBoard):
    """Stores whole seconds, and computes the TTL as ``int(ttl.total_seconds())``: a TTL
    below one second becomes 0, which the store reads as "no expiry"."""

    clock_resolution: ClassVar[timedelta] = timedelta(seconds=1)

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        seconds = int(ttl.total_seconds())
        return now.replace(microsecond=0) + timedelta(seconds=seconds) if seconds else None


class EmptyAgentFirstBoard(LockPerTaskBoard):
    """Validates its arguments first, as most APIs do: an empty agent is ``ValueError``
    even where SPEC 3.1 says the task's own state answers first (terminal, blocked, taken)."""

    def _check_claim(self, task: Task, agent: str, now: datetime) -> None:
        if not agent:
            raise ValueError("empty agent")
        super()._check_claim(task, agent, now)


class RenewFromOldUntilBoard(LockPerTaskBoard):
    """Renew extends the lease from its old ``until`` (``until += ttl``), not from now."""

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        _, lock = self._get(task_id)
        with lock:
            task = self._tasks[task_id]
            if not self._may_renew(task, token, self._now()):
                raise LeaseLostError(task_id)
            assert task.lease is not None
            old = task.lease.until
            base = old if old is not None else self._now()
            lease = replace(task.lease, until=self._until(base, request.ttl))
            new = replace(task, lease=lease, seq=task.seq + 1)
            self._tasks[task_id] = new
            return new


class OptimisticCacheBoard(LockPerTaskBoard):
    """Keeps a read cache that list_tasks serves; a claim writes the new owner into the
    cache before the store's checks, and a rejected claim does not undo it."""

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        super().__init__(tasks, clock)
        self._cache: dict[str, Task] = dict(self._tasks)

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if task_id in self._cache and agent:
            self._cache[task_id] = replace(self._cache[task_id], owner=agent)
        result = super().claim(task_id, agent, request)
        self._sync(task_id)
        return result

    def _sync(self, task_id: str) -> None:
        self._cache[task_id] = self._tasks[task_id]

    def _finish(self, task_id: str, token: str, state: State) -> None:
        super()._finish(task_id, token, state)
        self._sync(task_id)

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        result = super().renew(task_id, token, request)
        self._sync(task_id)
        return result

    def list_tasks(self) -> list[Task]:
        return [self._cache[t] for t in self._order]


class FenceOnFirstClaimBoard(LockPerTaskBoard):
    """The fence is set once, on the task's first claim, and kept as a lease id after that
    (``fence = fence or next()``)."""

    def _next_fence(self, task: Task) -> int:
        if self._fences[task.id] == 0:
            self._fences[task.id] = 1
        return self._fences[task.id]


class UnlockedCheckBoard(LockPerTaskBoard):
    """Claim checks the task outside its lock and takes the lock only to write: the
    classic check-then-act race (two claims both see it open)."""

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        task, lock = self._get(task_id)
        now = self._now()
        self._check_claim(task, agent, now)
        with lock:
            return self._grant(self._tasks[task_id], agent, now, request.ttl)


class TokenPrefixBoard(LockPerTaskBoard):
    """Matches a token with ``stored LIKE given || '%'`` (a prefix match meant to tolerate
    padded columns): any prefix of the current token, the empty one included, passes."""

    def _owns(self, task: Task, token: str) -> bool:
        return (
            task.state == State.CLAIMED
            and task.lease is not None
            and task.lease.token.startswith(token)
        )


class CaseInsensitiveTokenBoard(LockPerTaskBoard):
    """Compares tokens under a case-insensitive collation (MySQL's ``_ci`` default), and mints
    mixed-case tokens: a token that differs from the current one only in case passes."""

    def _owns(self, task: Task, token: str) -> bool:
        return (
            task.state == State.CLAIMED
            and task.lease is not None
            and task.lease.token.casefold() == token.casefold()
        )


class TornWriteBoard(LockPerTaskBoard):
    """A claim writes the state and then the lease as two writes (two ``HSET`` without
    ``MULTI``), and list_tasks reads without the locks: a snapshot taken between the two
    shows a claimed task without a lease."""

    def _grant(self, task: Task, agent: str, now: datetime, ttl: timedelta) -> Task:
        lease = Lease(self._token(task.id, agent), self._next_fence(task), self._until(now, ttl))
        self._tasks[task.id] = replace(task, state=State.CLAIMED, seq=task.seq + 1)
        time.sleep(0)  # the round trip between the two writes
        new = replace(self._tasks[task.id], owner=agent, lease=lease)
        self._tasks[task.id] = new
        return new

    def list_tasks(self) -> list[Task]:
        return [self._tasks[tid] for tid in self._order]


class IdempotentReleaseBoard(LockPerTaskBoard):
    """Release of a task nobody holds succeeds quietly ("already released"), as many lock
    libraries' unlock does."""

    def release(self, task_id: str, token: str) -> None:
        task, _ = self._get(task_id)
        if task.state == State.OPEN:
            return
        super().release(task_id, token)


class ShortTokenBoard(LockPerTaskBoard):
    """Tokens are 16 random bits (four hex digits, "short ids for the logs"): two claims
    in a few hundred get the same token."""

    def _token(self, task_id: str, agent: str) -> str:
        return secrets.token_hex(2)


class LingeringTokenBoard(LockPerTaskBoard):
    """Complete and fail change the state but leave the lease's token and fence in storage
    (only release clears them), and the listing hides a lease on a finished task; release
    checks the token only, so the finisher's release reopens a done task."""

    def _finish(self, task_id: str, token: str, state: State) -> None:
        _, lock = self._get(task_id)
        with lock:
            task = self._tasks[task_id]
            lease = task.lease
            if lease is None or lease.token != token:
                raise LeaseLostError(task_id)
            kept = lease if state != State.OPEN else None
            self._tasks[task_id] = replace(
                task, state=state, owner="", lease=kept, seq=task.seq + 1
            )

    def list_tasks(self) -> list[Task]:
        return [
            t if t.state == State.CLAIMED else replace(t, lease=None) for t in super().list_tasks()
        ]


class UnlockedCompleteBoard(LockPerTaskBoard):
    """Complete checks the token, then writes, without the task's lock: two completes with
    one token both succeed."""

    def _finish(self, task_id: str, token: str, state: State) -> None:
        task, _ = self._get(task_id)
        if not self._owns(task, token):
            raise LeaseLostError(task_id)
        time.sleep(0)  # the round trip between the check and the write
        self._tasks[task_id] = replace(task, state=state, owner="", lease=None, seq=task.seq + 1)


class RenewNeverShortensBoard(LockPerTaskBoard):
    """Renew keeps the later of the old ``until`` and ``now + ttl`` ("a keep-alive never
    shortens a lease"), and a renew to no expiry keeps the old ``until``."""

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        return now + ttl if ttl > timedelta(0) else None

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        old = self._tasks[task_id].lease if task_id in self._tasks else None
        task = super().renew(task_id, token, request)
        if old is None or old.until is None or task.lease is None:
            return task
        until = task.lease.until
        if until is None or until < old.until:
            task = replace(task, lease=replace(task.lease, until=old.until))
            self._tasks[task_id] = task
        return task


class CachedBlockedBoard(LockPerTaskBoard):
    """Memoizes the dependency check per task (an ``lru_cache`` on "are its deps done?"):
    a task found blocked stays blocked after its dependencies are done."""

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        super().__init__(tasks, clock)
        self._deps_cache: dict[str, bool] = {}

    def _deps_done(self, task: Task) -> bool:
        if task.id not in self._deps_cache:
            self._deps_cache[task.id] = super()._deps_done(task)
        return self._deps_cache[task.id]


class TokenOnlyLookupBoard(LockPerTaskBoard):
    """Renew, release, complete and fail find the lease by its token alone (``UPDATE leases
    ... WHERE token = $1``), checking only that ``task_id`` exists: another task's current
    token acts on that other task."""

    def _by_token(self, task_id: str, token: str) -> str:
        self._get(task_id)
        for tid, task in self._tasks.items():
            if task.lease is not None and task.state == State.CLAIMED and task.lease.token == token:
                return tid
        return task_id

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        return super().renew(self._by_token(task_id, token), token, request)

    def _finish(self, task_id: str, token: str, state: State) -> None:
        super()._finish(self._by_token(task_id, token), token, state)


class CappedTtlBoard(LockPerTaskBoard):
    """Clamps every lease to at most 60 s (a store's "maximum lease", undeclared): a claim
    or renew for longer gets a shorter lease than asked."""

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        return super()._until(now, min(ttl, timedelta(seconds=60)))


class ClientBlockedCacheBoard:
    """Clients of one shared store, each with its own memo of "task X is blocked" that it
    clears only on its own successful completes: a client that saw a task blocked keeps
    refusing it after another client completes the dependency."""

    def __init__(self, tasks: Sequence[Task], clock: Clock, *, store: Any = None) -> None:
        self._store: LockPerTaskBoard = (
            store if store is not None else LockPerTaskBoard(tasks, clock)
        )
        self._blocked: set[str] = set()

    def open_client(self) -> ClientBlockedCacheBoard:
        return ClientBlockedCacheBoard([], SystemClockless(), store=self._store)

    def list_tasks(self) -> list[Task]:
        return self._store.list_tasks()

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if task_id in self._blocked:
            raise BlockedError(task_id)
        try:
            return self._store.claim(task_id, agent, request)
        except BlockedError:
            self._blocked.add(task_id)
            raise

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        return self._store.renew(task_id, token, request)

    def release(self, task_id: str, token: str) -> None:
        self._store.release(task_id, token)

    def complete(self, task_id: str, token: str) -> None:
        self._store.complete(task_id, token)
        self._blocked.clear()

    def fail(self, task_id: str, token: str) -> None:
        self._store.fail(task_id, token)


class LuaRedisLiveAtUntilBoard(LuaRedisBoard):
    """The Lua scripts' live test is ``now <= until``: on the server's clock, a lease is
    still live at exactly ``until`` (takeover refused, renew accepted)."""

    live_test: ClassVar[str] = "now <= tonumber(h['until'])"


class PostgresTimeFenceBoard(ReturningPostgresBoard):
    """The fence is the claim's instant in milliseconds (a "timestamp fencing token"): two
    claims in one millisecond, a release and a reclaim say, get the same fence."""

    fence_expr: ClassVar[str] = "(extract(epoch FROM %(now)s::timestamptz) * 1000)::bigint"


CORRECT_BOARDS: tuple[type, ...] = (
    LockPerTaskBoard,
    UnusualButCorrectBoard,
    FlooredTtlBoard,
    SortedDepsBoard,
)
SERVER_CORRECT_BOARDS: tuple[type, ...] = (LuaRedisBoard, ReturningPostgresBoard)
BUGGY_BOARDS: tuple[type, ...] = (
    LiveAtUntilBoard,
    RenewAtUntilBoard,
    RenewByAgentNameBoard,
    TakeoverKeepsFenceBoard,
    NameDerivedTokenBoard,
    CompleteThenRaiseBoard,
    ExpiredReleaseSkipsTokenBoard,
    RenewZeroDeletesBoard,
    ReentrantSameNameBoard,
    FailedDepUnblocksBoard,
    WholeSecondTtlBoard,
    EmptyAgentFirstBoard,
    RenewFromOldUntilBoard,
    OptimisticCacheBoard,
    FenceOnFirstClaimBoard,
    UnlockedCheckBoard,
    TokenPrefixBoard,
    CaseInsensitiveTokenBoard,
    TornWriteBoard,
    IdempotentReleaseBoard,
    ShortTokenBoard,
    LingeringTokenBoard,
    UnlockedCompleteBoard,
    RenewNeverShortensBoard,
    CachedBlockedBoard,
    TokenOnlyLookupBoard,
    CappedTtlBoard,
    ClientBlockedCacheBoard,
)
SERVER_BUGGY_BOARDS: tuple[type, ...] = (LuaRedisLiveAtUntilBoard, PostgresTimeFenceBoard)
