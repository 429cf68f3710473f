"""Boards written from scratch by an outside user, to test the checker for false alarms and misses.

Everything here is built only from the public contract (SPEC.md and the public
``taskboard`` names). The ``Correct*`` boards keep the contract in different
styles; every ``Buggy*`` board carries one realistic production bug, named in
its docstring. Each board class says how its checker should be configured:
``POLICY`` (SPEC 3.4: "accept", "reject" or None for "either") and
``RESOLUTION`` (None for the default 1 ms).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import sqlite3
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta

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

ZERO = timedelta(0)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# ---------------------------------------------------------------------------
# C1: a dict of mutable records, one RLock, a GLOBAL seq counter that jumps.
# ---------------------------------------------------------------------------


class _Rec:
    __slots__ = ("deps", "fence", "id", "owner", "seq", "state", "title", "token", "until")

    def __init__(self, task: Task) -> None:
        self.id = task.id
        self.title = task.title
        self.deps = list(task.deps)
        self.state = State(task.state)
        self.owner = ""
        self.token: str | None = None
        self.fence: int | None = None
        self.until: datetime | None = None
        self.seq = task.seq


class CorrectRecordDictBoard:
    """Correct: mutable per-task records under one RLock; global seq jumps by 7; uuid4 hex tokens;
    accepts expired-lease actions.
    """

    POLICY: str | None = "accept"
    RESOLUTION: timedelta | None = None
    SEQ_STEP = 7

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._recs = {t.id: _Rec(t) for t in tasks}
        self._hwm: dict[str, int] = {}
        self._agent_of_token: dict[str, str] = {}
        self._gseq = max((t.seq for t in tasks), default=0)

    # -- small policies, one place each ------------------------------------
    def _live(self, until: datetime | None, now: datetime) -> bool:
        return until is None or now < until

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        return now + ttl if ttl > ZERO else None

    def _mint(self, rec: _Rec) -> str:
        return uuid.uuid4().hex

    def _token_ok(self, rec: _Rec, token: str) -> bool:
        return rec.token is not None and token == rec.token

    def _next_fence(self, rec: _Rec) -> int:
        return self._hwm.get(rec.id, 0) + 1

    def _dep_done(self, dep_id: str) -> bool:
        dep = self._recs.get(dep_id)
        return dep is not None and dep.state == State.DONE

    def _check_agent(self, agent: str) -> None:
        if not agent:
            raise ValueError("agent must not be empty")

    def _bump(self, rec: _Rec) -> None:
        self._gseq += self.SEQ_STEP
        rec.seq = self._gseq

    def _get(self, task_id: str) -> _Rec:
        rec = self._recs.get(task_id)
        if rec is None:
            raise NotFoundError(task_id)
        return rec

    def _snap(self, rec: _Rec) -> Task:
        lease = None
        if rec.state == State.CLAIMED:
            assert rec.token is not None
            assert rec.fence is not None
            lease = Lease(rec.token, rec.fence, rec.until)
        return Task(
            id=rec.id,
            title=rec.title,
            deps=tuple(rec.deps),
            state=rec.state,
            owner=rec.owner if rec.state == State.CLAIMED else "",
            lease=lease,
            seq=rec.seq,
        )

    # -- the Board ----------------------------------------------------------
    def list_tasks(self) -> list[Task]:
        with self._lock:
            return [self._snap(r) for r in self._recs.values()]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._lock:
            rec = self._get(task_id)
            if rec.state == State.DONE:
                raise TerminalError(task_id)
            if not all(self._dep_done(d) for d in rec.deps):
                raise BlockedError(task_id)
            now = self._clock.now()
            if rec.state == State.CLAIMED and self._live(rec.until, now):
                raise TakenError(task_id)
            self._check_agent(agent)
            fence = self._next_fence(rec)
            token = self._mint(rec)
            self._hwm[rec.id] = max(fence, self._hwm.get(rec.id, fence))
            self._agent_of_token[token] = agent
            rec.state = State.CLAIMED
            rec.owner = agent
            rec.token = token
            rec.fence = fence
            rec.until = self._until(now, request.ttl)
            self._bump(rec)
            return self._snap(rec)

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._lock:
            rec = self._get(task_id)
            now = self._clock.now()
            if rec.state != State.CLAIMED or not self._token_ok(rec, token):
                raise LeaseLostError(task_id)
            if not self._live(rec.until, now):
                raise LeaseLostError(task_id)
            rec.until = self._until(now, request.ttl)
            self._bump(rec)
            return self._snap(rec)

    def _finish(self, task_id: str, token: str, state: State) -> None:
        with self._lock:
            rec = self._get(task_id)
            if rec.state != State.CLAIMED or not self._token_ok(rec, token):
                raise LeaseLostError(task_id)
            if self.POLICY == "reject" and not self._live(rec.until, self._clock.now()):
                raise LeaseLostError(task_id)
            rec.state = state
            rec.owner = ""
            rec.token = None
            rec.until = None
            self._bump(rec)

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.DONE)

    def fail(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.FAILED)


class CorrectRecordDictRejectBoard(CorrectRecordDictBoard):
    """Correct: the record-dict board, pinned to reject actions on an expired lease (SPEC 3.4)."""

    POLICY = "reject"
    SEQ_STEP = 1000


# ---------------------------------------------------------------------------
# C2: sqlite, normalised schema, until as fixed-width ISO-8601 text compared in SQL.
# ---------------------------------------------------------------------------

_ISO = "%Y-%m-%dT%H:%M:%S.%fZ"


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime(_ISO)


def _from_iso(text: str) -> datetime:
    return datetime.strptime(text, _ISO).replace(tzinfo=UTC)


class CorrectSqliteIsoBoard:
    """Correct: sqlite with task/dep/lease/fence_hwm/minted tables; until as ISO-8601 text; rejects
    expired; no fail.
    """

    POLICY: str | None = "reject"
    RESOLUTION: timedelta | None = None
    SCHEMA = """
        CREATE TABLE task (id TEXT PRIMARY KEY, title TEXT NOT NULL, state TEXT NOT NULL,
                           rev INTEGER NOT NULL);
        CREATE TABLE dep (task TEXT NOT NULL, on_task TEXT NOT NULL, pos INTEGER NOT NULL);
        CREATE TABLE lease (task TEXT PRIMARY KEY, agent TEXT NOT NULL, token TEXT NOT NULL UNIQUE,
                            fence INTEGER NOT NULL, until TEXT);
        CREATE TABLE fence_hwm (task TEXT PRIMARY KEY, hwm INTEGER NOT NULL);
        CREATE TABLE minted (token TEXT PRIMARY KEY, task TEXT NOT NULL, agent TEXT NOT NULL);
    """

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.executescript(self.SCHEMA)
        with self._tx() as db:
            for t in tasks:
                db.execute(
                    "INSERT INTO task(id, title, state, rev) VALUES (?, ?, ?, ?)",
                    (t.id, t.title, str(t.state), t.seq),
                )
                for pos, d in enumerate(t.deps):
                    db.execute("INSERT INTO dep VALUES (?, ?, ?)", (t.id, d, pos))

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def _state(self, db: sqlite3.Connection, task_id: str) -> str:
        row = db.execute("SELECT state FROM task WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise NotFoundError(task_id)
        return row[0]

    def _task(self, db: sqlite3.Connection, task_id: str) -> Task:
        tid, title, state, rev = db.execute(
            "SELECT id, title, state, rev FROM task WHERE id = ?", (task_id,)
        ).fetchone()
        deps = tuple(
            r[0] for r in db.execute("SELECT on_task FROM dep WHERE task = ? ORDER BY pos", (tid,))
        )
        lease_row = db.execute(
            "SELECT agent, token, fence, until FROM lease WHERE task = ?", (tid,)
        ).fetchone()
        owner, lease = "", None
        if lease_row is not None:
            owner = lease_row[0]
            until = None if lease_row[3] is None else _from_iso(lease_row[3])
            lease = Lease(lease_row[1], lease_row[2], until)
        return Task(tid, title, deps, state, owner, lease, rev)

    def list_tasks(self) -> list[Task]:
        with self._tx() as db:
            ids = [r[0] for r in db.execute("SELECT id FROM task ORDER BY id")]
            return [self._task(db, i) for i in ids]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._tx() as db:
            state = self._state(db, task_id)
            if state == "done":
                raise TerminalError(task_id)
            (blocking,) = db.execute(
                "SELECT COUNT(*) FROM dep LEFT JOIN task t ON t.id = dep.on_task "
                "WHERE dep.task = ? AND (t.state IS NULL OR t.state != 'done')",
                (task_id,),
            ).fetchone()
            if blocking:
                raise BlockedError(task_id)
            now_dt = self._clock.now()
            now = _iso(now_dt)
            if state == "claimed":
                live = db.execute(
                    "SELECT 1 FROM lease WHERE task = ? AND (until IS NULL OR until > ?)",
                    (task_id, now),
                ).fetchone()
                if live:
                    raise TakenError(task_id)
            if not agent:
                raise ValueError("empty agent")
            token = uuid.uuid4().hex
            db.execute(
                "INSERT INTO minted(token, task, agent) VALUES (?, ?, ?)", (token, task_id, agent)
            )
            (fence,) = db.execute(
                "SELECT COALESCE(MAX(hwm), 0) + 1 FROM fence_hwm WHERE task = ?", (task_id,)
            ).fetchone()
            db.execute(
                "INSERT INTO fence_hwm(task, hwm) VALUES (?, ?) "
                "ON CONFLICT(task) DO UPDATE SET hwm = excluded.hwm",
                (task_id, fence),
            )
            until = _iso(now_dt + request.ttl) if request.ttl > ZERO else None
            db.execute("DELETE FROM lease WHERE task = ?", (task_id,))
            db.execute(
                "INSERT INTO lease(task, agent, token, fence, until) VALUES (?, ?, ?, ?, ?)",
                (task_id, agent, token, fence, until),
            )
            db.execute("UPDATE task SET state = 'claimed', rev = rev + 1 WHERE id = ?", (task_id,))
            return self._task(db, task_id)

    def _current_lease(
        self, db: sqlite3.Connection, task_id: str, token: str
    ) -> tuple[str, str | None]:
        """Return (agent, until) of the current lease if ``token`` holds it; else LeaseLostError."""
        if self._state(db, task_id) != "claimed":
            raise LeaseLostError(task_id)
        row = db.execute(
            "SELECT agent, token, until FROM lease WHERE task = ?", (task_id,)
        ).fetchone()
        if row is None or row[1] != token:
            raise LeaseLostError(task_id)
        return row[0], row[2]

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._tx() as db:
            _, until = self._current_lease(db, task_id, token)
            now_dt = self._clock.now()
            if until is not None and not until > _iso(now_dt):
                raise LeaseLostError(task_id)
            new_until = _iso(now_dt + request.ttl) if request.ttl > ZERO else None
            db.execute("UPDATE lease SET until = ? WHERE task = ?", (new_until, task_id))
            db.execute("UPDATE task SET rev = rev + 1 WHERE id = ?", (task_id,))
            return self._task(db, task_id)

    def _finish(self, task_id: str, token: str, state: str) -> None:
        with self._tx() as db:
            _, until = self._current_lease(db, task_id, token)
            if until is not None and not until > _iso(self._clock.now()):
                raise LeaseLostError(task_id)
            db.execute("DELETE FROM lease WHERE task = ?", (task_id,))
            db.execute("UPDATE task SET state = ?, rev = rev + 1 WHERE id = ?", (state, task_id))

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "open")

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "done")


# ---------------------------------------------------------------------------
# C3: sqlite, one wide table, until as INTEGER epoch milliseconds, fences from 0.
# ---------------------------------------------------------------------------


class CorrectSqliteMillisBoard:
    """Correct: sqlite one-table board; until as integer epoch ms (1 ms resolution); fences from 0;
    token_urlsafe; accepts expired.
    """

    POLICY: str | None = "accept"
    RESOLUTION: timedelta | None = timedelta(milliseconds=1)

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.executescript(
            """
            CREATE TABLE board (
                id TEXT PRIMARY KEY, title TEXT NOT NULL, deps TEXT NOT NULL, state TEXT NOT NULL,
                owner TEXT NOT NULL DEFAULT '', token TEXT, fence INTEGER, until_ms INTEGER,
                seq INTEGER NOT NULL, top_fence INTEGER
            );
            CREATE TABLE tokens (token TEXT PRIMARY KEY);
            """
        )
        with self._tx() as db:
            db.executemany(
                "INSERT INTO board(id, title, deps, state, seq) VALUES (?, ?, ?, ?, ?)",
                [(t.id, t.title, json.dumps(list(t.deps)), str(t.state), t.seq) for t in tasks],
            )

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    @staticmethod
    def _ms(when: datetime) -> int:
        return (when - EPOCH) // timedelta(milliseconds=1)

    @staticmethod
    def _dt(ms: int | None) -> datetime | None:
        return None if ms is None else EPOCH + timedelta(milliseconds=ms)

    def _until_ms(self, now_ms: int, ttl: timedelta) -> int | None:
        return now_ms + ttl // timedelta(milliseconds=1) if ttl > ZERO else None

    def _next_fence(self, db: sqlite3.Connection, task_id: str, until_ms: int | None) -> int:
        (top,) = db.execute("SELECT top_fence FROM board WHERE id = ?", (task_id,)).fetchone()
        return 0 if top is None else top + 1

    _COLS = "id, title, deps, state, owner, token, fence, until_ms, seq"

    def _to_task(self, row: tuple) -> Task:
        tid, title, deps, state, owner, token, fence, until_ms, seq = row
        lease = Lease(token, fence, self._dt(until_ms)) if state == "claimed" else None
        return Task(tid, title, tuple(json.loads(deps)), state, owner, lease, seq)

    def _row(self, db: sqlite3.Connection, task_id: str) -> tuple:
        row = db.execute(f"SELECT {self._COLS} FROM board WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise NotFoundError(task_id)
        return row

    def list_tasks(self) -> list[Task]:
        with self._tx() as db:
            return [self._to_task(r) for r in db.execute(f"SELECT {self._COLS} FROM board")]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._tx() as db:
            row = self._row(db, task_id)
            state, deps = row[3], json.loads(row[2])
            if state == "done":
                raise TerminalError(task_id)
            if deps:
                marks = ",".join("?" * len(deps))
                (done,) = db.execute(
                    f"SELECT COUNT(*) FROM board WHERE state = 'done' AND id IN ({marks})", deps
                ).fetchone()
                if done != len(set(deps)):
                    raise BlockedError(task_id)
            now_ms = self._ms(self._clock.now())
            if state == "claimed":
                live = db.execute(
                    "SELECT 1 FROM board WHERE id = ? AND (until_ms IS NULL OR until_ms > ?)",
                    (task_id, now_ms),
                ).fetchone()
                if live:
                    raise TakenError(task_id)
            if not agent:
                raise ValueError("empty agent")
            token = secrets.token_urlsafe(18)
            db.execute("INSERT INTO tokens(token) VALUES (?)", (token,))
            until_ms = self._until_ms(now_ms, request.ttl)
            fence = self._next_fence(db, task_id, until_ms)
            db.execute(
                "UPDATE board SET state = 'claimed', owner = ?, token = ?, fence = ?, "
                "until_ms = ?, top_fence = ?, seq = seq + 1 WHERE id = ?",
                (agent, token, fence, until_ms, fence, task_id),
            )
            return self._to_task(self._row(db, task_id))

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._tx() as db:
            self._row(db, task_id)
            now_ms = self._ms(self._clock.now())
            ok = db.execute(
                "SELECT until_ms FROM board WHERE id = ? AND state = 'claimed' AND token = ? "
                "AND (until_ms IS NULL OR until_ms > ?)",
                (task_id, token, now_ms),
            ).fetchone()
            if ok is None:
                raise LeaseLostError(task_id)
            new_until = self._renewed_until(now_ms, ok[0], request.ttl)
            db.execute(
                "UPDATE board SET until_ms = ?, seq = seq + 1 WHERE id = ?", (new_until, task_id)
            )
            return self._to_task(self._row(db, task_id))

    def _renewed_until(self, now_ms: int, old_until_ms: int | None, ttl: timedelta) -> int | None:
        return self._until_ms(now_ms, ttl)

    def _finish(self, task_id: str, token: str, state: str) -> None:
        with self._tx() as db:
            self._row(db, task_id)
            cur = db.execute(
                "UPDATE board SET state = ?, owner = '', token = NULL, fence = NULL, "
                "until_ms = NULL, seq = seq + 1 WHERE id = ? AND state = 'claimed' AND token = ?",
                (state, task_id, token),
            )
            if cur.rowcount != 1:
                raise LeaseLostError(task_id)

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "open")

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "done")

    def fail(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "failed")


# ---------------------------------------------------------------------------
# C4: sqlite, whole-second until, a claims history table (fence = MAX over history).
# ---------------------------------------------------------------------------


class CorrectSqliteSecondsBoard:
    """Correct: sqlite with a claims-history table; until in whole epoch seconds (resolution 1 s);
    rejects expired.
    """

    POLICY: str | None = "reject"
    RESOLUTION: timedelta | None = timedelta(seconds=1)

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        self._db.executescript(
            """
            CREATE TABLE tasks (
                id TEXT PRIMARY KEY, title TEXT, deps TEXT, status TEXT, version INTEGER
            );
            CREATE TABLE claims (
                n INTEGER PRIMARY KEY AUTOINCREMENT, task TEXT NOT NULL, agent TEXT NOT NULL,
                token TEXT NOT NULL, fence INTEGER NOT NULL, until_s INTEGER,
                active INTEGER NOT NULL
            );
            CREATE UNIQUE INDEX one_active ON claims(task) WHERE active = 1;
            """
        )
        with self._tx() as db:
            for t in tasks:
                db.execute(
                    "INSERT INTO tasks VALUES (?, ?, ?, ?, ?)",
                    (t.id, t.title, "\x1f".join(t.deps), str(t.state), t.seq),
                )

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    @staticmethod
    def _secs(when: datetime) -> int:
        return (when - EPOCH) // timedelta(seconds=1)

    def _now_s(self) -> int:
        return self._secs(self._clock.now())

    @staticmethod
    def _until_s(now_s: int, ttl: timedelta) -> int | None:
        return now_s + ttl // timedelta(seconds=1) if ttl > ZERO else None

    def _task(self, db: sqlite3.Connection, task_id: str) -> Task:
        row = db.execute(
            "SELECT id, title, deps, status, version FROM tasks WHERE id = ?", (task_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(task_id)
        tid, title, deps, status, version = row
        owner, lease = "", None
        if status == "claimed":
            agent, token, fence, until_s = db.execute(
                "SELECT agent, token, fence, until_s FROM claims WHERE task = ? AND active = 1",
                (tid,),
            ).fetchone()
            owner = agent
            until = None if until_s is None else EPOCH + timedelta(seconds=until_s)
            lease = Lease(token, fence, until)
        return Task(
            tid, title, tuple(deps.split("\x1f")) if deps else (), status, owner, lease, version
        )

    def list_tasks(self) -> list[Task]:
        with self._tx() as db:
            return [self._task(db, r[0]) for r in db.execute("SELECT id FROM tasks").fetchall()]

    def _mint(self, db: sqlite3.Connection, task_id: str, previous: tuple | None) -> str:
        return str(uuid.uuid4())

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._tx() as db:
            task = self._task(db, task_id)
            if task.state == State.DONE:
                raise TerminalError(task_id)
            for dep in task.deps:
                row = db.execute("SELECT status FROM tasks WHERE id = ?", (dep,)).fetchone()
                if row is None or row[0] != "done":
                    raise BlockedError(task_id)
            now_s = self._now_s()
            active = db.execute(
                "SELECT n, token, until_s FROM claims WHERE task = ? AND active = 1", (task_id,)
            ).fetchone()
            if (
                task.state == State.CLAIMED
                and active is not None
                and (active[2] is None or now_s < active[2])
            ):
                raise TakenError(task_id)
            if not agent:
                raise ValueError("empty agent")
            token = self._mint(db, task_id, active)
            (fence,) = db.execute(
                "SELECT COALESCE(MAX(fence), 0) + 1 FROM claims WHERE task = ?", (task_id,)
            ).fetchone()
            db.execute("UPDATE claims SET active = 0 WHERE task = ? AND active = 1", (task_id,))
            db.execute(
                "INSERT INTO claims(task, agent, token, fence, until_s, active) "
                "VALUES (?, ?, ?, ?, ?, 1)",
                (task_id, agent, token, fence, self._until_s(now_s, request.ttl)),
            )
            db.execute(
                "UPDATE tasks SET status = 'claimed', version = version + 1 WHERE id = ?",
                (task_id,),
            )
            return self._task(db, task_id)

    def _holder(self, db: sqlite3.Connection, task_id: str, token: str) -> int:
        """Return the active claim row held by ``token`` and still live, else LeaseLostError."""
        task = self._task(db, task_id)
        if task.state != State.CLAIMED:
            raise LeaseLostError(task_id)
        row = db.execute(
            "SELECT n, token, until_s FROM claims WHERE task = ? AND active = 1", (task_id,)
        ).fetchone()
        if row is None or row[1] != token:
            raise LeaseLostError(task_id)
        if row[2] is not None and not self._now_s() < row[2]:
            raise LeaseLostError(task_id)
        return row[0]

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._tx() as db:
            n = self._holder(db, task_id, token)
            db.execute(
                "UPDATE claims SET until_s = ? WHERE n = ?",
                (self._until_s(self._now_s(), request.ttl), n),
            )
            db.execute("UPDATE tasks SET version = version + 1 WHERE id = ?", (task_id,))
            return self._task(db, task_id)

    def _finish(self, task_id: str, token: str, status: str) -> None:
        with self._tx() as db:
            n = self._holder(db, task_id, token)
            db.execute("UPDATE claims SET active = 0 WHERE n = ?", (n,))
            db.execute(
                "UPDATE tasks SET status = ?, version = version + 1 WHERE id = ?", (status, task_id)
            )

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "open")

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "done")

    def fail(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, "failed")


# ---------------------------------------------------------------------------
# C5: per-task locks over immutable Task values; naive-UTC until; deps as lists;
#     seq starts at 100; fences from 0; uuid4 str tokens.
# ---------------------------------------------------------------------------


def _naive(when: datetime) -> datetime:
    return when.astimezone(UTC).replace(tzinfo=None)


class _Slot:
    def __init__(self, task: Task) -> None:
        self.lock = threading.Lock()
        self.task = task
        self.hwm = -1
        self.expiry: datetime | None = None  # used by a buggy subclass only


class CorrectPerTaskLockBoard:
    """Correct: a lock per task over immutable Tasks; naive-UTC until; deps as list; seq from 100;
    fences from 0; accepts expired.
    """

    POLICY: str | None = "accept"
    RESOLUTION: timedelta | None = None
    TERMINAL = (State.DONE,)

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._clock = clock
        self._slots = {
            t.id: _Slot(Task(t.id, t.title, list(t.deps), State.OPEN, "", None, t.seq + 100))
            for t in tasks
        }

    def _slot(self, task_id: str) -> _Slot:
        try:
            return self._slots[task_id]
        except KeyError:
            raise NotFoundError(task_id) from None

    def _now(self) -> datetime:
        return _naive(self._clock.now())

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        return now + ttl if ttl else None

    def _expiry(self, slot: _Slot) -> datetime | None:
        assert slot.task.lease is not None
        return slot.task.lease.until

    def _is_live(self, slot: _Slot, now: datetime) -> bool:
        exp = self._expiry(slot)
        return exp is None or now < exp

    def list_tasks(self) -> list[Task]:
        with ExitStack() as stack:
            for key in sorted(self._slots):
                stack.enter_context(self._slots[key].lock)
            return [s.task for s in self._slots.values()]

    def _on_claimed(self, slot: _Slot, now: datetime, ttl: timedelta) -> None:
        pass

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        slot = self._slot(task_id)
        with slot.lock:
            t = slot.task
            if t.state in self.TERMINAL:
                raise TerminalError(task_id)
            for dep in t.deps:
                dep_slot = self._slots.get(dep)
                if dep_slot is None or dep_slot.task.state != State.DONE:
                    raise BlockedError(task_id)
            now = self._now()
            if t.state == State.CLAIMED and self._is_live(slot, now):
                raise TakenError(task_id)
            if agent == "":
                raise ValueError("agent is required")
            slot.hwm += 1
            lease = Lease(str(uuid.uuid4()), slot.hwm, self._until(now, request.ttl))
            slot.task = dataclasses.replace(
                t, state=State.CLAIMED, owner=agent, lease=lease, seq=t.seq + 1
            )
            self._on_claimed(slot, now, request.ttl)
            return slot.task

    def _holds(self, slot: _Slot, token: str) -> bool:
        t = slot.task
        return t.state == State.CLAIMED and t.lease is not None and t.lease.token == token

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        slot = self._slot(task_id)
        with slot.lock:
            now = self._now()
            if not self._holds(slot, token) or not self._is_live(slot, now):
                raise LeaseLostError(task_id)
            t = slot.task
            assert t.lease is not None
            lease = dataclasses.replace(t.lease, until=self._until(now, request.ttl))
            slot.task = dataclasses.replace(t, lease=lease, seq=t.seq + 1)
            return slot.task

    def _finish(self, task_id: str, token: str, state: State) -> None:
        slot = self._slot(task_id)
        with slot.lock:
            if not self._holds(slot, token):
                raise LeaseLostError(task_id)
            t = slot.task
            slot.task = dataclasses.replace(t, state=state, owner="", lease=None, seq=t.seq + 1)

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.DONE)

    def fail(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.FAILED)


# ---------------------------------------------------------------------------
# C6: an append-only event log; state is a fold over it. Mixed SPEC 3.4 choices.
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class _View:
    task: Task
    fence: int = 0  # highest fence ever issued for this task


class CorrectEventLogBoard:
    """Correct: event-sourced; seq = log position; tokens tok-<position>; release/fail accept an
    expired lease, complete rejects it.
    """

    POLICY: str | None = None  # "either", and the board mixes: allowed per operation
    RESOLUTION: timedelta | None = None

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._initial = [
            Task(t.id, t.title, tuple(t.deps), State.OPEN, "", None, t.seq) for t in tasks
        ]
        self._log: list[tuple[str, str, dict]] = []

    def _fold(self) -> dict[str, _View]:
        views = {t.id: _View(t) for t in self._initial}
        for pos, (kind, tid, data) in enumerate(self._log, start=1):
            v = views[tid]
            t = v.task
            if kind == "claimed":
                v.fence = data["fence"]
                lease = Lease(data["token"], data["fence"], data["until"])
                v.task = dataclasses.replace(
                    t, state=State.CLAIMED, owner=data["agent"], lease=lease, seq=pos
                )
            elif kind == "renewed":
                assert t.lease is not None
                v.task = dataclasses.replace(
                    t, lease=dataclasses.replace(t.lease, until=data["until"]), seq=pos
                )
            else:
                v.task = dataclasses.replace(t, state=State(kind), owner="", lease=None, seq=pos)
        return views

    def _fence_for(self, views: dict[str, _View], task_id: str) -> int:
        return views[task_id].fence + 1

    def _view(self, views: dict[str, _View], task_id: str) -> _View:
        if task_id not in views:
            raise NotFoundError(task_id)
        return views[task_id]

    @staticmethod
    def _live(t: Task, now: datetime) -> bool:
        assert t.lease is not None
        return t.lease.until is None or now < t.lease.until

    def list_tasks(self) -> list[Task]:
        with self._lock:
            return [v.task for v in self._fold().values()]

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._lock:
            views = self._fold()
            t = self._view(views, task_id).task
            if t.state == State.DONE:
                raise TerminalError(task_id)
            if any(d not in views or views[d].task.state != State.DONE for d in t.deps):
                raise BlockedError(task_id)
            now = self._clock.now()
            if t.state == State.CLAIMED and self._live(t, now):
                raise TakenError(task_id)
            if not agent:
                raise ValueError("agent")
            data = {
                "agent": agent,
                "token": f"tok-{len(self._log) + 1}",
                "fence": self._fence_for(views, task_id),
                "until": now + request.ttl if request.ttl > ZERO else None,
            }
            self._log.append(("claimed", task_id, data))
            return self._fold()[task_id].task

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._lock:
            t = self._view(self._fold(), task_id).task
            now = self._clock.now()
            if (
                t.state != State.CLAIMED
                or t.lease is None
                or t.lease.token != token
                or not self._live(t, now)
            ):
                raise LeaseLostError(task_id)
            self._log.append(
                ("renewed", task_id, {"until": now + request.ttl if request.ttl > ZERO else None})
            )
            return self._fold()[task_id].task

    def _finish(self, task_id: str, token: str, state: State, *, reject_expired: bool) -> None:
        with self._lock:
            t = self._view(self._fold(), task_id).task
            if t.state != State.CLAIMED or t.lease is None or t.lease.token != token:
                raise LeaseLostError(task_id)
            if reject_expired and not self._live(t, self._clock.now()):
                raise LeaseLostError(task_id)
            self._log.append((state.value, task_id, {}))

    def release(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.OPEN, reject_expired=False)

    def complete(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.DONE, reject_expired=True)

    def fail(self, task_id: str, token: str) -> None:
        self._finish(task_id, token, State.FAILED, reject_expired=False)


CORRECT_BOARDS = [
    CorrectRecordDictBoard,
    CorrectRecordDictRejectBoard,
    CorrectSqliteIsoBoard,
    CorrectSqliteMillisBoard,
    CorrectSqliteSecondsBoard,
    CorrectPerTaskLockBoard,
    CorrectEventLogBoard,
]


# ===========================================================================
# Buggy boards: one realistic bug each.
# ===========================================================================

# --- on the record-dict board -----------------------------------------------


class BuggyLeOnExpiry(CorrectRecordDictBoard):
    """Bug: liveness is `now <= until`, so at exactly `until` the lease is still taken (SPEC 2 says
    expired).
    """

    def _live(self, until: datetime | None, now: datetime) -> bool:
        return until is None or now <= until


class BuggyTimedeltaSecondsExpiry(CorrectRecordDictBoard):
    """Bug: liveness is `(until - now).seconds > 0`: sub-second remainders count as expired,
    negatives as live.
    """

    def _live(self, until: datetime | None, now: datetime) -> bool:
        return until is None or (until - now).seconds > 0


class BuggyRenewSameAgent(CorrectRecordDictBoard):
    """Bug: renew accepts any token ever minted for an agent named like the current owner."""

    def _token_ok(self, rec: _Rec, token: str) -> bool:
        return token == rec.token

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._lock:
            rec = self._get(task_id)
            now = self._clock.now()
            same_agent = self._agent_of_token.get(token) == rec.owner
            if rec.state != State.CLAIMED or not (token == rec.token or same_agent):
                raise LeaseLostError(task_id)
            if not self._live(rec.until, now):
                raise LeaseLostError(task_id)
            rec.until = self._until(now, request.ttl)
            self._bump(rec)
            return self._snap(rec)


class BuggyFailNoSeqBump(CorrectRecordDictBoard):
    """Bug: fail() writes the new state but forgets to bump seq."""

    def fail(self, task_id: str, token: str) -> None:
        with self._lock:
            rec = self._get(task_id)
            if rec.state != State.CLAIMED or not self._token_ok(rec, token):
                raise LeaseLostError(task_id)
            rec.state, rec.owner, rec.token, rec.until = State.FAILED, "", None, None


class BuggyTtlDotSeconds(CorrectRecordDictBoard):
    """Bug: ttl converted with `ttl.seconds`, dropping sub-second parts (5 ms: 'no expiry')."""

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        secs = ttl.seconds
        return now + timedelta(seconds=secs) if secs else None


class BuggyWallClockUntil(CorrectRecordDictBoard):
    """Bug: until computed from the wall clock (datetime.now) instead of the injected clock."""

    def _until(self, now: datetime, ttl: timedelta) -> datetime | None:
        return datetime.now(UTC) + ttl if ttl > ZERO else None


class BuggyRejectedCompleteClearsOwner(CorrectRecordDictBoard):
    """Bug: complete() clears owner before verifying the token; a rejected complete leaves the owner
    blank.
    """

    def complete(self, task_id: str, token: str) -> None:
        with self._lock:
            rec = self._get(task_id)
            rec.owner = ""  # "we are about to finish it anyway"
            if rec.state != State.CLAIMED or not self._token_ok(rec, token):
                raise LeaseLostError(task_id)
            rec.state, rec.token, rec.until = State.DONE, None, None
            self._bump(rec)


class BuggyFailedReclaimKeepsFence(CorrectRecordDictBoard):
    """Bug: re-claiming a FAILED task reuses its last fence ('a retry is the same generation')."""

    def _next_fence(self, rec: _Rec) -> int:
        if rec.state == State.FAILED and rec.fence is not None:
            return rec.fence
        return super()._next_fence(rec)


class BuggyFailedCountsAsDone(CorrectRecordDictBoard):
    """Bug: the blocked check treats a FAILED dependency as finished, like DONE."""

    def _dep_done(self, dep_id: str) -> bool:
        dep = self._recs.get(dep_id)
        return dep is not None and dep.state in (State.DONE, State.FAILED)


class BuggyEmptyAgentAccepted(CorrectRecordDictBoard):
    """Bug: claim never validates the agent, so an empty agent wins a claim."""

    def _check_agent(self, agent: str) -> None:
        pass


class BuggyEmptyAgentCheckedFirst(CorrectRecordDictBoard):
    """Bug: input validation runs first: claim('', ...) is ValueError even where
    NotFound/Terminal/Blocked/Taken is due.
    """

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        if not agent:
            raise ValueError("agent must not be empty")
        return super().claim(task_id, agent, request)


class BuggyCaseInsensitiveToken(CorrectRecordDictBoard):
    """Bug: token comparison is case-insensitive (a collation habit); a forged upper-cased token
    passes.
    """

    def _token_ok(self, rec: _Rec, token: str) -> bool:
        return rec.token is not None and token.lower() == rec.token.lower()


class BuggyPerTaskCounterTokens(CorrectRecordDictBoard):
    """Bug: tokens are a per-task counter ("1", "2", ...), so two tasks hand out the same token."""

    def _mint(self, rec: _Rec) -> str:
        return str(self._next_fence(rec))


class BuggyRenewTtlZeroSetsNow(CorrectRecordDictBoard):
    """Bug: renew with ttl 0 sets until = now instead of 'no expiry'."""

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._lock:
            rec = self._get(task_id)
            now = self._clock.now()
            if (
                rec.state != State.CLAIMED
                or not self._token_ok(rec, token)
                or not self._live(rec.until, now)
            ):
                raise LeaseLostError(task_id)
            rec.until = now + request.ttl
            self._bump(rec)
            return self._snap(rec)


class BuggyClaimReturnsStaleSeq(CorrectRecordDictBoard):
    """Bug: claim builds its return value before bumping seq, so it returns the pre-write seq."""

    def _bump(self, rec: _Rec) -> None:
        self._pending = self._snap(rec)
        super()._bump(rec)

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._lock:
            super().claim(task_id, agent, request)
            return self._pending


class BuggyKeyErrorForUnknown(CorrectRecordDictBoard):
    """Bug: an unknown id surfaces as the dict's KeyError, not NotFoundError."""

    def _get(self, task_id: str) -> _Rec:
        return self._recs[task_id]


class BuggyFalsyEmptyToken(CorrectRecordDictBoard):
    """Bug: `if token and token != current: reject` lets an empty token act as the holder."""

    def _token_ok(self, rec: _Rec, token: str) -> bool:
        return rec.token is not None and (not token or token == rec.token)


class BuggyPrefixToken(CorrectRecordDictBoard):
    """Bug: abbreviated tokens accepted like git short SHAs (`current.startswith(token)`), even 1
    character.
    """

    def _token_ok(self, rec: _Rec, token: str) -> bool:
        return rec.token is not None and bool(token) and rec.token.startswith(token)


class BuggyRenewAfterExpiry(CorrectRecordDictBoard):
    """Bug: renew is a heartbeat: it revives an expired lease nobody took over (SPEC 3.5 says
    LeaseLostError).
    """

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        with self._lock:
            rec = self._get(task_id)
            if rec.state != State.CLAIMED or not self._token_ok(rec, token):
                raise LeaseLostError(task_id)
            rec.until = self._until(self._clock.now(), request.ttl)
            self._bump(rec)
            return self._snap(rec)


class BuggyStaleReadCache(CorrectRecordDictBoard):
    """Bug: list_tasks serves a cached snapshot that renew() forgets to invalidate."""

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        super().__init__(tasks, clock)
        self._cache: list[Task] | None = None

    def list_tasks(self) -> list[Task]:
        with self._lock:
            if self._cache is None:
                self._cache = super().list_tasks()
            return list(self._cache)

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        with self._lock:
            self._cache = None
            return super().claim(task_id, agent, request)

    def _finish(self, task_id: str, token: str, state: State) -> None:
        with self._lock:
            self._cache = None
            super()._finish(task_id, token, state)


class BuggyPolicyOnlyOnRelease(CorrectRecordDictRejectBoard):
    """Bug: the 'reject expired' rule (pinned by the host) was wired into release only;
    complete/fail still accept.
    """

    def _finish(self, task_id: str, token: str, state: State) -> None:
        if state == State.OPEN:
            super()._finish(task_id, token, state)
            return
        with self._lock:
            rec = self._get(task_id)
            if rec.state != State.CLAIMED or not self._token_ok(rec, token):
                raise LeaseLostError(task_id)
            rec.state, rec.owner, rec.token, rec.until = state, "", None, None
            self._bump(rec)


# --- on the sqlite ISO board -------------------------------------------------


class BuggyReleaseByAgent(CorrectSqliteIsoBoard):
    """Bug: release resolves the token to the agent it was minted for and compares agents, not
    tokens.
    """

    def release(self, task_id: str, token: str) -> None:
        with self._tx() as db:
            if self._state(db, task_id) != "claimed":
                raise LeaseLostError(task_id)
            minted = db.execute("SELECT agent FROM minted WHERE token = ?", (token,)).fetchone()
            lease = db.execute(
                "SELECT agent, until FROM lease WHERE task = ?", (task_id,)
            ).fetchone()
            if minted is None or lease is None or minted[0] != lease[0]:
                raise LeaseLostError(task_id)
            if lease[1] is not None and not lease[1] > _iso(self._clock.now()):
                raise LeaseLostError(task_id)
            db.execute("DELETE FROM lease WHERE task = ?", (task_id,))
            db.execute("UPDATE task SET state = 'open', rev = rev + 1 WHERE id = ?", (task_id,))


class BuggyListSkipsDone(CorrectSqliteIsoBoard):
    """Bug: list_tasks reuses the dashboard query `WHERE state != 'done'`, hiding DONE tasks."""

    def list_tasks(self) -> list[Task]:
        with self._tx() as db:
            ids = [
                r[0] for r in db.execute("SELECT id FROM task WHERE state != 'done' ORDER BY id")
            ]
            return [self._task(db, i) for i in ids]


class BuggyCommitOnDomainError(CorrectSqliteIsoBoard):
    """Bug: rows are 'touched' (rev+1) to lock them first, and the tx commits on BoardError (only
    sqlite errors roll back).
    """

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except sqlite3.Error:
                self._db.execute("ROLLBACK")
                raise
            finally:
                if self._db.in_transaction:
                    self._db.execute("COMMIT")

    def _finish(self, task_id: str, token: str, state: str) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE task SET rev = rev + 1 WHERE id = ?", (task_id,)
            )  # take the row lock
            _, until = self._current_lease(db, task_id, token)
            if until is not None and not until > _iso(self._clock.now()):
                raise LeaseLostError(task_id)
            db.execute("DELETE FROM lease WHERE task = ?", (task_id,))
            db.execute("UPDATE task SET state = ? WHERE id = ?", (state, task_id))


# --- on the sqlite millis board ---------------------------------------------


class BuggyRenewFromOldUntil(CorrectSqliteMillisBoard):
    """Bug: renew extends from the old until (until += ttl) instead of from now."""

    def _renewed_until(self, now_ms: int, old_until_ms: int | None, ttl: timedelta) -> int | None:
        if ttl <= ZERO:
            return None
        base = old_until_ms if old_until_ms is not None else now_ms
        return base + ttl // timedelta(milliseconds=1)


class BuggyFenceIsExpiry(CorrectSqliteMillisBoard):
    """Bug: the fence is the lease expiry in ms ('later leases expire later'); 0 for no expiry; not
    monotonic.
    """

    def _next_fence(self, db: sqlite3.Connection, task_id: str, until_ms: int | None) -> int:
        return until_ms or 0


class BuggyTakeoverKeepsFence(CorrectSqliteMillisBoard):
    """Bug: a takeover of an expired lease keeps the old fence (only OPEN/FAILED claims bump it)."""

    def _next_fence(self, db: sqlite3.Connection, task_id: str, until_ms: int | None) -> int:
        state, fence = db.execute(
            "SELECT state, fence FROM board WHERE id = ?", (task_id,)
        ).fetchone()
        if state == "claimed" and fence is not None:
            return fence
        return super()._next_fence(db, task_id, until_ms)


# --- on the sqlite seconds board --------------------------------------------


class BuggyTakeoverReusesToken(CorrectSqliteSecondsBoard):
    """Bug: a takeover carries the expired lease's token over to the new holder."""

    def _mint(self, db: sqlite3.Connection, task_id: str, previous: tuple | None) -> str:
        return previous[1] if previous is not None else super()._mint(db, task_id, previous)


class BuggyWholeSecondsDeclared1ms(CorrectSqliteSecondsBoard):
    """Bug: stores whole seconds (a DATETIME column without fractions) but runs with the default 1
    ms resolution.
    """

    RESOLUTION = None


# --- on the per-task-lock board ---------------------------------------------


class BuggyCompleteAnyTokenWhenExpired(CorrectPerTaskLockBoard):
    """Bug: complete skips the token check once the lease has expired ('nobody holds it anyway')."""

    def complete(self, task_id: str, token: str) -> None:
        slot = self._slot(task_id)
        with slot.lock:
            t = slot.task
            if t.state != State.CLAIMED:
                raise LeaseLostError(task_id)
            if self._is_live(slot, self._now()) and not self._holds(slot, token):
                raise LeaseLostError(task_id)
            slot.task = dataclasses.replace(
                t, state=State.DONE, owner="", lease=None, seq=t.seq + 1
            )


class BuggyExpiryIgnoresRenew(CorrectPerTaskLockBoard):
    """Bug: takeover checks a claim-time expiry column; renew updates only the displayed until."""

    def _on_claimed(self, slot: _Slot, now: datetime, ttl: timedelta) -> None:
        slot.expiry = self._until(now, ttl)

    def _is_live(self, slot: _Slot, now: datetime) -> bool:
        return slot.expiry is None or now < slot.expiry


class BuggyFailedIsTerminal(CorrectPerTaskLockBoard):
    """Bug: claim treats FAILED as terminal (TerminalError), so failed work can never be redone."""

    TERMINAL = (State.DONE, State.FAILED)


# --- on the event-log board --------------------------------------------------


class BuggyFenceRestartsAfterRelease(CorrectEventLogBoard):
    """Bug: fence counts claims since the last release/complete/fail, so it restarts at 1 after a
    release.
    """

    def _fence_for(self, views: dict[str, _View], task_id: str) -> int:
        n = 0
        for kind, tid, _ in self._log:
            if tid != task_id:
                continue
            n = n + 1 if kind == "claimed" else (n if kind == "renewed" else 0)
        return n + 1


BUGGY_BOARDS = [
    BuggyLeOnExpiry,
    BuggyTimedeltaSecondsExpiry,
    BuggyRenewSameAgent,
    BuggyFailNoSeqBump,
    BuggyTtlDotSeconds,
    BuggyWallClockUntil,
    BuggyRejectedCompleteClearsOwner,
    BuggyFailedReclaimKeepsFence,
    BuggyFailedCountsAsDone,
    BuggyEmptyAgentAccepted,
    BuggyEmptyAgentCheckedFirst,
    BuggyCaseInsensitiveToken,
    BuggyPerTaskCounterTokens,
    BuggyRenewTtlZeroSetsNow,
    BuggyClaimReturnsStaleSeq,
    BuggyKeyErrorForUnknown,
    BuggyFalsyEmptyToken,
    BuggyPrefixToken,
    BuggyRenewAfterExpiry,
    BuggyStaleReadCache,
    BuggyPolicyOnlyOnRelease,
    BuggyReleaseByAgent,
    BuggyListSkipsDone,
    BuggyCommitOnDomainError,
    BuggyRenewFromOldUntil,
    BuggyFenceIsExpiry,
    BuggyTakeoverKeepsFence,
    BuggyTakeoverReusesToken,
    BuggyWholeSecondsDeclared1ms,
    BuggyCompleteAnyTokenWhenExpired,
    BuggyExpiryIgnoresRenew,
    BuggyFailedIsTerminal,
    BuggyFenceRestartsAfterRelease,
]
