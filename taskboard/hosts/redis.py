"""Redis reference hosts: one Lua script per operation, on redis-py (sync) or redis.asyncio.

This is a reference host that shows how to meet the contract (SPEC sections
1-3) on Redis, with `redis-py <https://redis.readthedocs.io>`_ (``pip install
'taskboard-contract[redis]'``); it is not a storage product (no cluster support beyond
keeping a board's keys in one slot, no persistence policy, no tuning).
:class:`RedisBoard` is synchronous; :class:`AsyncRedisBoard` is the same board
whose methods are coroutines. Both run the same Lua scripts on the same keys,
so a sync and an async board can even attach to one board. Time comes from an
injected :class:`~taskboard.Clock`, or with ``clock="server"`` from Redis ``TIME``
inside each script.

Restarts and lost connections (SPEC 9). A board never re-runs a script by itself: its
client does not retry (a client given to it that retries is used only for its address,
see :class:`RedisBoard`), because a script whose reply was lost may already have run, and
running a claim, renew, release, complete or fail twice is not the same as once. A call
that meets a dropped connection or a restarting server raises ``redis.ConnectionError``
(an infrastructure fault: it may or may not have taken effect); the connection is dropped
and the next call opens a new one, and reloads the scripts (``NOSCRIPT``) after a restart.
The connections of a board made from a URL are named ``taskboard:<board_id>`` (``CLIENT
SETNAME``), so an operator can find them in ``CLIENT LIST`` (and kill them: ``CLIENT KILL
ID``).

What survives a restart is the server's business: with ``appendonly yes`` and
``appendfsync always`` every acknowledged script is on disk before its reply, and the board
is durable. Without persistence (``--save '' --appendonly no``) a restart loses every key,
the history of issued fences (``issued``) included, so counting fences from it would issue
fence 1 again. ``fences="time"`` is for such a server: each claim's fence is ``max(greatest
fence issued + 1, Redis TIME in microseconds)``, computed in the claim script, so a fence
issued after the server lost everything is still greater than every fence issued before
it, as long as the server's clock does not step back across the restart and more than a
microsecond of real time passes per claim of one task (a restart takes milliseconds; a
claim, a round trip). Such fences are about 1.7e15, below 2**53, so they stay exact even as
Lua numbers (the scripts keep them as decimal strings anyway). Tokens are 128 random bits,
so they never repeat either. Tasks are another matter: a board whose keys are gone lists
no tasks; its application re-creates it, e.g. by constructing the board again with its
initial tasks and its ``board_id`` (the constructor inserts the tasks the board lacks).
"""

from __future__ import annotations

import asyncio
import re
import secrets
import threading
from collections.abc import Iterable, Iterator, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, ClassVar, Literal, Self

from taskboard._clock import Clock
from taskboard._contract import ClaimRequest, State, Task
from taskboard.hosts._redis_codec import (
    _MICROSECOND,
    _claimed,
    _micros,
    _returned_none,
    _returned_task,
    _snapshot,
    _task_args,
    _ttl,
    _until,
)
from taskboard.hosts._redis_lua import _COLUMNS, _switched
from taskboard.hosts._redis_lua import SCRIPTS as SCRIPTS  # the reference scripts: public here
from taskboard.hosts._redis_lua import SERVER_SCRIPTS as SERVER_SCRIPTS

try:
    import redis
    import redis.asyncio
    import redis.asyncio.retry
    import redis.retry
    from redis.backoff import NoBackoff
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "taskboard.hosts.redis needs redis-py: pip install 'taskboard-contract[redis]'"
    ) from exc

__all__ = ["AsyncRedisBoard", "RedisBoard"]

_BOARD_ID = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: How many fresh tokens a claim draws before giving up (a repeat of a 128-bit random
#: token means a broken random source, not bad luck).
_MINT_ATTEMPTS = 8
#: What a script raises when its connection is lost or times out (the server restarted or
#: killed connections): an infrastructure fault, re-raised as is, since the script may or
#: may not have run (SPEC 9). The pool's idle connections are likely dead too: a board
#: drops them first (``_drop_idle``), so that its next call opens a fresh one. Any other
#: error propagates untouched; a script's rejection is a reply (``_redis_codec._reject``).
_CONNECTION_LOST = (redis.ConnectionError, redis.TimeoutError)

#: How claims number their fences (see the module docstring): ``"counter"``, one above the
#: greatest fence the board issued; ``"time"``, also at least the server's ``TIME`` in
#: microseconds, so that fences never repeat on a server that lost every key.
Fences = Literal["counter", "time"]
_FENCES: tuple[str, ...] = ("counter", "time")

#: Where a board's client connects: the ``redis://`` URL it was made from, or the
#: connection class and settings of the client object it was given (SPEC 8: how
#: another client of the same board is opened, here or in another process).
_Address = str | tuple[type[Any], dict[str, Any]]
#: Keys a redis-py connection pool adds to its connections' keyword arguments for its
#: own use (state shared by that pool's connections, a maintenance handler): not
#: settings of the client, and a new client's pool makes its own.
_POOL_STATE = (
    "himport_registry",
    "maint_notifications_pool_handler",
    "oss_cluster_maint_notifications_handler",
)
#: Settings a pool keeps a copy of before a maintenance notification may move them
#: (a new host, relaxed timeouts): a new client takes the originals.
_ORIGINALS = {
    "orig_host_address": "host",
    "orig_socket_timeout": "socket_timeout",
    "orig_socket_connect_timeout": "socket_connect_timeout",
}


class _Core:
    """What the sync and async boards share: keys, arguments, a claim's attempts and the
    decision to close (their scripts' replies are read by :mod:`._redis_codec`'s functions);
    each board adds only the calls to its client."""

    #: SPEC 3.4: release/complete/fail of an expired lease are LeaseLostError.
    expired_lease_policy: ClassVar[Literal["accept", "reject"]] = "reject"
    #: ``until`` is stored as exact integer microseconds since the epoch, with either
    #: clock: an injected clock's instant, or Redis TIME (itself in whole microseconds)
    #: plus the TTL, added exactly in the script.
    clock_resolution: ClassVar[timedelta] = _MICROSECOND

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock | Literal["server"],
        board_id: str | None,
        delete_on_close: bool | None,
        fences: Fences = "counter",
    ) -> None:
        if isinstance(clock, str) and clock != "server":
            raise ValueError(
                f"{type(self).__name__}: clock must be a Clock or 'server', got {clock!r}"
            )
        if fences not in _FENCES:
            raise ValueError(
                f"{type(self).__name__}: fences must be 'counter' or 'time', got {fences!r}"
            )
        initial = list(tasks)
        seen: set[str] = set()
        for task in initial:
            if task.id in seen:
                raise ValueError(f"{type(self).__name__}: duplicate initial task id {task.id!r}")
            seen.add(task.id)
        if board_id is not None and not _BOARD_ID.fullmatch(board_id):
            raise ValueError(
                f"{type(self).__name__}: board_id {board_id!r} must be 1-128 characters "
                "from A-Z, a-z, 0-9, '_', '.', '-'"
            )
        self._clock = clock
        #: How claims number fences: ``"counter"`` or ``"time"`` (see the module docstring).
        self.fences: Fences = fences
        self.board_id = secrets.token_hex(16) if board_id is None else board_id
        #: Delete the board's keys at close: by default, only if this instance created them.
        self.delete_on_close = board_id is None if delete_on_close is None else delete_on_close
        self.keys = [f"taskboard:{{{self.board_id}}}:{column}" for column in _COLUMNS]
        self._initial_args = [arg for task in initial for arg in _task_args(task)]
        self._closed = False
        self._close_lock = threading.Lock()

    #: Where this board's client connects (set by the subclass, from its url_or_client).
    _address: _Address
    #: Whether this board made its client, and so closes it (set by the subclass).
    _owns_client: bool

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the board's address: unpickling opens a new client of the same board
        (SPEC 8), as ``open_client`` does."""
        return (_attach, (type(self), self._address, self._clock, self.board_id, (), self.fences))

    @classmethod
    def _client_of(
        cls,
        address: _Address,
        clock: Clock | Literal["server"],
        board_id: str,
        fences: Fences = "counter",
    ) -> Self:
        """A new board with a new client of its own on ``address``, attached to ``board_id``."""
        options = cls._fence_options(fences)
        make: Any = cls  # each subclass's constructor takes (tasks, clock, url_or_client, ...)
        client = address if isinstance(address, str) else cls._new_client(address)
        try:
            board: Self = make(
                (), clock, client, board_id=board_id, delete_on_close=False, **options
            )
        except BaseException:
            if client is not address:
                cls._discard_client(client)
            raise
        board._owns_client = True  # made here, or by the board from the URL: closed with it
        return board

    def _client_for(self, url_or_client: Any) -> Any:
        """The client this board runs its scripts on, given the constructor's
        ``url_or_client``; sets :attr:`_address` and :attr:`_owns_client`."""
        if isinstance(url_or_client, str):
            self._address = url_or_client
            self._owns_client = True
            return self._url_client(url_or_client, self.board_id)
        self._address = _settings(url_or_client.connection_pool)
        self._owns_client = _may_retry(url_or_client.connection_pool)
        # A client that retries could run a script twice: the board opens its own.
        return self._new_client(self._address) if self._owns_client else url_or_client

    @staticmethod
    def _url_client(url: str, board_id: str) -> Any:
        """A new client of the subclass's kind on ``url``, for board ``board_id``, with
        :func:`_url_options`."""
        raise NotImplementedError

    @staticmethod
    def _new_client(address: tuple[type[Any], dict[str, Any]]) -> Any:
        """A new client of the subclass's kind, with a pool of its own, on ``address``."""
        raise NotImplementedError

    @staticmethod
    def _discard_client(client: Any) -> None:
        """Close ``client``, made by :meth:`_new_client`, that no board took."""
        raise NotImplementedError

    @staticmethod
    def _fence_options(fences: Fences) -> dict[str, Any]:
        """The constructor's ``fences`` argument, given only when not the default (a subclass
        with a constructor of its own may not take it)."""
        return {} if fences == "counter" else {"fences": fences}

    def _registered_sources(self) -> dict[str, str]:
        """The Lua source of each script this board registers: :attr:`_sources`, with the
        fence scheme switched to ``"time"`` if the board was made so."""
        sources = self._sources
        if self.fences == "counter":
            return sources
        return {name: _switched(source) for name, source in sources.items()}

    def _register(self, client: Any) -> dict[str, Any]:
        """Each of :meth:`_registered_sources` registered on ``client``, by name: a script
        object that runs it with ``EVALSHA`` (and loads it on ``NOSCRIPT``). No I/O: a
        script reaches the server on its first run."""
        return {
            name: client.register_script(source)
            for name, source in self._registered_sources().items()
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}(board_id={self.board_id!r}, clock={self._clock!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _begin_close(self) -> bool:
        """Mark the board closed; whether it was open, and so this call must close it. Of
        calls from several threads at once, exactly one gets ``True``."""
        with self._close_lock:
            if self._closed:
                return False
            self._closed = True
            return True

    @property
    def _sources(self) -> dict[str, str]:
        """The Lua source of each script this board registers, by name."""
        return SERVER_SCRIPTS if isinstance(self._clock, str) else SCRIPTS

    # Each *_args matches its script's ARGV: an injected clock is read here, once, just
    # before the script runs (the script runs at the latest instant the store has seen, if
    # that is later); with clock="server" the script reads TIME. Both get the TTL.

    def _claim_args(self, task_id: str, agent: str, request: ClaimRequest) -> list[str]:
        if isinstance(self._clock, str):  # "server"
            return [task_id, agent, _ttl(request.ttl), secrets.token_hex(16)]
        now = _micros(self._clock.now())
        until = _until(now, request.ttl)
        return [task_id, agent, str(now), until, secrets.token_hex(16), _ttl(request.ttl)]

    def _renew_args(self, task_id: str, token: str, request: ClaimRequest) -> list[str]:
        if isinstance(self._clock, str):  # "server"
            return [task_id, token, _ttl(request.ttl)]
        now = _micros(self._clock.now())
        return [task_id, token, str(now), _until(now, request.ttl), _ttl(request.ttl)]

    def _finish_args(self, task_id: str, token: str, state: State) -> list[str]:
        if isinstance(self._clock, str):  # "server"
            return [task_id, token, state.value]
        return [task_id, token, str(_micros(self._clock.now())), state.value]

    def _claim_attempts(
        self, task_id: str, agent: str, request: ClaimRequest
    ) -> Iterator[list[str]]:
        """The claim script's arguments for each of at most :data:`_MINT_ATTEMPTS` runs,
        each made when the loop asks for it, just before its run: a fresh token, and an
        injected clock read anew. A claim runs the script with each until :func:`_claimed`
        gives a task (or raises), then raises :meth:`_unminted`."""
        for _ in range(_MINT_ATTEMPTS):
            yield self._claim_args(task_id, agent, request)

    def _unminted(self) -> RuntimeError:
        """What a claim raises when every attempt drew a token already issued."""
        return RuntimeError(f"{self!r}: could not mint an unused token")


class RedisBoard(_Core):
    """A board on a Redis server, synchronous (redis-py); a reference host, not a product.

    Every operation, reads included, is one Lua script (``EVALSHA``, registered
    with ``register_script``). Redis runs a script alone, so read-check-write is
    atomic across threads, processes and machines, and a script checks before it
    writes, so a rejected operation changes nothing. :meth:`list_tasks` is one
    script too: a consistent snapshot, sorted by id. The board is thread-safe:
    redis-py's connection pool hands each thread its own connection.

    Time comes from exactly one place. With a :class:`~taskboard.Clock`, each call
    reads it just before its script and passes ``now`` (and ``until``) as integer
    microseconds since the epoch; the scripts never read Redis ``TIME``. Two calls
    may reach the store in another order than they read the clock, so the store
    keeps the latest instant a script ran at, and a script given an older one runs
    at that latest instant: time in the store never goes back (a renew that read the
    time before a lease's ``until`` cannot revive it after another call has found it
    expired). With ``clock="server"``, each claim, renew, release, complete and fail
    script reads Redis ``TIME`` itself (microseconds) and computes ``until = now +
    ttl`` exactly, as decimal strings; the board then never reads any Python clock,
    as a store that keeps its own time does, and only a wall-clock test (SPEC
    section 7) can check it. Either way ``until`` is stored exactly, and compared
    exactly as decimal strings (Lua's numbers are doubles), so
    :attr:`clock_resolution` is one microsecond: the ``until`` a claim or renew
    returns is exactly the stored one, and ``until - ttl`` is the instant the script
    ran (with ``"server"``, the server's own clock).

    Storage (keys ``taskboard:{board_id}:<column>``; the ``{board_id}`` hash tag
    puts a board's keys in one cluster slot): one hash per column, task id to
    value (``state``, ``title``, ``deps`` as a JSON array, ``owner``, and the
    current lease's ``token``, ``fence`` and ``until``, absent when there is
    none, and ``seq``); ``issued``, the greatest fence ever issued per task,
    which is never reset, so the next fence is greater than every earlier one
    across releases, completions, failures and takeovers; and ``tokens``, the
    set of every token ever issued, which the claim script checks, so a token
    is never minted twice, for any task, not just unlikely to be. Tokens are
    128 random bits from :mod:`secrets`, drawn anew if already issued; nothing
    about them derives from the agent or the task. With an injected clock,
    ``clock`` holds the latest instant a script ran at.

    Fences: by default (``fences="counter"``) a claim's fence is one above
    ``issued``, the greatest fence issued for the task. On a server that may lose
    its keys (no persistence, or a failover to a replica that lags) pass
    ``fences="time"``: the fence is then ``max(issued + 1, Redis TIME in
    microseconds)``, so fences never repeat even after ``issued`` is lost (read
    the module docstring for the argument and its assumptions). ``TIME`` is
    read for that alone: the board's time, for leases, still comes from
    ``clock``.

    Restarts and lost connections (SPEC 9): a call that meets a dropped
    connection or a server restart raises ``redis.ConnectionError`` (it may or
    may not have taken effect), and the next call reconnects. The board never
    retries a script (see the module docstring): it makes its client from a URL
    with retries off, and its connections are named ``taskboard:<board_id>``;
    given a client whose connections retry (``redis.Redis(host=...)`` retries by
    default), it leaves that client alone and opens one of its own with the
    same settings and retries off, which it closes at :meth:`close`.

    Sharing: each new board gets a random ``board_id``, so boards on one server
    are isolated. Passing an existing ``board_id`` attaches to that board: the
    constructor inserts only the tasks it does not hold yet, in one script, so
    several processes may construct at once and all see the same board.

    Clients (SPEC 8): the board is reached by its address, where its client
    connects, and ``board_id``. The address is the URL the board was given, or,
    given a client object, that client's connection class and settings (its
    pool's ``connection_kwargs``, less the pool's own state; a bare ``object()``
    sentinel there is left out, so the library's default applies).
    :meth:`open_client` opens another client of the same board, as another
    process would: a new board with a new ``redis.Redis`` client and connection
    pool of its own, attached (it inserts no tasks), ``delete_on_close=False``,
    reading the same clock (``"server"`` included); closing it closes only its
    own client, never the board. Pickling a board carries only its class,
    address, ``board_id`` and clock (a :class:`~taskboard.ManualClock` travels
    as a copy at its current instant), so unpickling it, in a ``spawn``-ed
    process say, opens such a client too.

    Expired leases (SPEC 3.4, a host's choice): this board **rejects**
    ``release``, ``complete`` and ``fail`` with ``LeaseLostError`` once the
    lease has expired (``now >= until``), even if the token is still current
    and nobody has taken over, as :class:`~taskboard.hosts.sqlite.SQLiteBoard`
    does: a holder's authority ends exactly when its lease does. The choice is
    exposed as :attr:`expired_lease_policy` (``"reject"``).

    Args:
        tasks: the initial tasks, stored as given if missing from the board
            (an initial lease's fence and token count as issued).
        clock: the only source of time this board reads: a
            :class:`~taskboard.Clock` (a ``ManualClock`` in tests), or
            ``"server"`` for the Redis server's ``TIME``, read inside each
            script (no Python clock is read then). A board with ``"server"``
            cannot be tested with a manual clock: test it with the machine's
            wall-clock mode (SPEC section 7), e.g. from a ``make_board(tasks,
            clock)`` that ignores the ``SystemClock`` it is given.
        url_or_client: a ``redis://`` URL (the board makes a client and closes
            it at :meth:`close`) or a ``redis.Redis`` client (left open; used as
            is unless its connections retry, see above).
        board_id: attach to this board instead of making a new one
            (1-128 characters from ``A-Za-z0-9_.-``).
        delete_on_close: delete the board's keys at :meth:`close`; by default
            only when this instance made the board (``board_id`` not given),
            so one process leaving does not pull the board from under others.
        fences: ``"counter"`` (default) or ``"time"``, for a server that may
            lose its keys (see above). Clients opened from the board, and
            unpickled copies, number fences the same way.

    Raises:
        ValueError: two initial tasks share an id, ``board_id`` is malformed,
            ``clock`` is a string other than ``"server"``, or ``fences`` is
            neither ``"counter"`` nor ``"time"``.
        redis.RedisError: the server could not be reached or refused a command.
    """

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock | Literal["server"],
        url_or_client: str | redis.Redis,
        *,
        board_id: str | None = None,
        delete_on_close: bool | None = None,
        fences: Fences = "counter",
    ) -> None:
        super().__init__(tasks, clock, board_id, delete_on_close, fences)
        self._client: redis.Redis = self._client_for(url_or_client)
        try:
            self._scripts = self._register(self._client)
            if self._initial_args:
                self._run("insert", self._initial_args)
        except BaseException:
            if self._owns_client:
                self._client.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def open_client(self) -> Self:
        """Another client of this board (SPEC 8), as another process would open it: a new
        board with a new client (its own connection pool) on the same address, attached
        to the same ``board_id``, ``delete_on_close=False``, the same clock and fences.
        Closing it closes only its own client."""
        return self._client_of(self._address, self._clock, self.board_id, self.fences)

    @staticmethod
    def _url_client(url: str, board_id: str) -> redis.Redis:
        return redis.Redis.from_url(url, **_url_options(board_id, redis.retry.Retry))

    @staticmethod
    def _new_client(address: tuple[type[Any], dict[str, Any]]) -> redis.Redis:
        return _sync_client(address)

    @staticmethod
    def _discard_client(client: Any) -> None:
        client.close()

    def close(self) -> None:
        """Delete the board's keys (see ``delete_on_close``) and close the client if this
        board made it; idempotent. Any later operation raises ``RuntimeError``."""
        if not self._begin_close():
            return
        try:
            if self.delete_on_close:
                try:
                    self._client.delete(*self.keys)
                except redis.ConnectionError:
                    # The server ended the connection (a restart, CLIENT KILL); DEL is
                    # idempotent, so once more, on a fresh one.
                    self._drop_idle()
                    self._client.delete(*self.keys)
        finally:
            if self._owns_client:
                self._client.close()

    def _run(self, name: str, args: Sequence[str]) -> Any:
        self._check_open()
        try:
            return self._scripts[name](keys=self.keys, args=args)
        except _CONNECTION_LOST:
            self._drop_idle()
            raise

    def _drop_idle(self) -> None:
        """Disconnect the pool's idle connections (see :data:`_CONNECTION_LOST`)."""
        self._client.connection_pool.disconnect(inuse_connections=False)

    def list_tasks(self) -> list[Task]:
        """Return a consistent snapshot of every task, sorted by id (SPEC 3.7)."""
        return _snapshot(self._run("list", ()))

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        """Claim ``task_id`` for ``agent`` with a freshly minted lease (SPEC 3.1).

        Returns:
            The task exactly as :meth:`list_tasks` shows it afterwards.

        Raises:
            NotFoundError: no task has this id.
            TerminalError: the task is ``DONE``.
            BlockedError: a dependency is not ``DONE`` (or names no task).
            TakenError: the task is ``CLAIMED`` and its lease is live.
            ValueError: ``agent`` is empty (checked last).
        """
        for args in self._claim_attempts(task_id, agent, request):
            task = _claimed(task_id, self._run("claim", args))
            if task is not None:
                return task
        raise self._unminted()

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        """Recompute the lease's ``until`` from this board's clock (SPEC 3.5): the injected
        clock, or Redis ``TIME`` with ``clock="server"``.

        Token, fence and owner stay; ``seq`` grows.

        Returns:
            The task exactly as :meth:`list_tasks` shows it afterwards.

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired.
        """
        reply = self._run("renew", self._renew_args(task_id, token, request))
        return _returned_task(task_id, reply)

    def release(self, task_id: str, token: str) -> None:
        """Give the task back: ``OPEN``, no owner, no lease (SPEC 3.2).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired (SPEC 3.4 "reject").
        """
        self._finish(task_id, token, State.OPEN)

    def complete(self, task_id: str, token: str) -> None:
        """Mark the task ``DONE``, which is terminal (SPEC 3.3).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired (SPEC 3.4 "reject").
        """
        self._finish(task_id, token, State.DONE)

    def fail(self, task_id: str, token: str) -> None:
        """Mark the task ``FAILED``; it can be claimed again (SPEC 3.6).

        Raises:
            NotFoundError: no task has this id.
            LeaseLostError: the task is not ``CLAIMED``, ``token`` is not its
                current token, or the lease has expired (SPEC 3.4 "reject").
        """
        self._finish(task_id, token, State.FAILED)

    def _finish(self, task_id: str, token: str, state: State) -> None:
        _returned_none(task_id, self._run("finish", self._finish_args(task_id, token, state)))


class AsyncRedisBoard(_Core):
    """:class:`RedisBoard` on ``redis.asyncio``: the same scripts, keys and semantics (read
    its docstring), with coroutine methods.

    Initialisation is lazy, since a constructor cannot await: the constructor
    does no I/O (it checks the initial ids, and makes a client from a URL,
    which binds to the running event loop on its first command); the initial
    insert runs once, guarded by an :class:`asyncio.Lock`, before the first
    operation. So the board can be made in a plain function or outside any
    loop. ``await AsyncRedisBoard.create(...)`` makes it and runs the insert at
    once, so a server fault shows at creation. Use one board on one event loop.

    Concurrent coroutines interleave only between scripts, never inside one, so
    every operation is as atomic as on :class:`RedisBoard`.

    Lost connections: ``redis.asyncio`` checks an idle connection before using it
    only as far as its event loop has noticed the end of the stream, so the first
    call after a server restart or a ``CLIENT KILL`` usually raises
    ``redis.ConnectionError`` (its script never reached the server: the
    connection was dead before it was sent); the board then drops its idle
    connections, and the next call connects afresh.

    Close with ``await board.aclose()`` (``close`` is the same coroutine) or
    ``async with``; it deletes the board's keys (see ``delete_on_close``) and
    closes the client if the board made it; idempotent.

    Clients (SPEC 8) and pickling are as for :class:`RedisBoard` (read its
    docstring), with ``redis.asyncio`` clients. :meth:`open_client` is a plain
    method, not a coroutine: it does no I/O, since the new board inserts no
    tasks and its new client connects on its first command, binding to the
    event loop that runs it (so it may be opened outside any loop). Close the
    client with ``await client.aclose()``; that closes only its own client.

    Args:
        tasks, board_id, delete_on_close, fences: as for :class:`RedisBoard`.
        clock: as for :class:`RedisBoard`: a :class:`~taskboard.Clock`, or
            ``"server"`` for Redis ``TIME`` read inside each script (no Python
            clock is read then; test such a board in wall-clock mode, SPEC 7).
        url_or_client: a ``redis://`` URL (the board makes a client and closes
            it at :meth:`aclose`) or a ``redis.asyncio.Redis`` client (left open;
            used as is unless its connections retry, as for :class:`RedisBoard`).

    Raises:
        ValueError: two initial tasks share an id, ``board_id`` is malformed,
            ``clock`` is a string other than ``"server"``, or ``fences`` is
            neither ``"counter"`` nor ``"time"``.
    """

    def __init__(
        self,
        tasks: Iterable[Task],
        clock: Clock | Literal["server"],
        url_or_client: str | redis.asyncio.Redis,
        *,
        board_id: str | None = None,
        delete_on_close: bool | None = None,
        fences: Fences = "counter",
    ) -> None:
        super().__init__(tasks, clock, board_id, delete_on_close, fences)
        self._client: redis.asyncio.Redis = self._client_for(url_or_client)
        self._scripts = self._register(self._client)
        self._ready = not self._initial_args
        self._ready_lock = asyncio.Lock()  # binds to the loop on first contended use

    @classmethod
    async def create(
        cls,
        tasks: Iterable[Task],
        clock: Clock | Literal["server"],
        url_or_client: str | redis.asyncio.Redis,
        *,
        board_id: str | None = None,
        delete_on_close: bool | None = None,
        fences: Fences = "counter",
    ) -> Self:
        """Make the board and insert its initial tasks now (see the class docstring).

        Raises:
            ValueError: as the constructor.
            redis.RedisError: the server could not be reached or refused a command.
        """
        board = cls(
            tasks,
            clock,
            url_or_client,
            board_id=board_id,
            delete_on_close=delete_on_close,
            **cls._fence_options(fences),
        )
        try:
            await board._ensure_ready()
        except BaseException:
            if board._owns_client:
                await board._client.aclose()
            raise
        return board

    def open_client(self) -> Self:
        """Another client of this board (SPEC 8), as another process would open it: a new
        board with a new ``redis.asyncio`` client (its own connection pool) on the same
        address, attached to the same ``board_id``, ``delete_on_close=False``, the same
        clock. No I/O: the client connects on its first command. ``await
        client.aclose()`` closes only its own client.

        A client opened before this board's first command also carries its initial tasks,
        so that it sees them whichever of the two reaches the server first."""
        client = self._client_of(self._address, self._clock, self.board_id, self.fences)
        return client._inserting(self._pending())

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the board's address (and, before its first command, its initial tasks):
        unpickling opens a new client of the same board, as :meth:`open_client` does."""
        return (
            _attach,
            (type(self), self._address, self._clock, self.board_id, self._pending(), self.fences),
        )

    def _pending(self) -> tuple[str, ...]:
        """The insert script's arguments for the initial tasks, until the first command."""
        return () if self._ready else tuple(self._initial_args)

    def _inserting(self, pending: Sequence[str]) -> Self:
        """This board, made to insert ``pending`` initial tasks before its first command."""
        # The insert script adds only the tasks the board lacks, so two clients may both run it.
        if pending:
            self._initial_args, self._ready = list(pending), False
        return self

    @staticmethod
    def _url_client(url: str, board_id: str) -> redis.asyncio.Redis:
        return redis.asyncio.Redis.from_url(
            url, **_url_options(board_id, redis.asyncio.retry.Retry)
        )

    @staticmethod
    def _new_client(address: tuple[type[Any], dict[str, Any]]) -> redis.asyncio.Redis:
        return _async_client(address)

    @staticmethod
    def _discard_client(client: Any) -> None:
        pass  # it has made no connection yet, and closing one is a coroutine

    async def __aenter__(self) -> Self:
        await self._ensure_ready()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Delete the board's keys (see ``delete_on_close``) and close the client if this
        board made it; idempotent. Any later operation raises ``RuntimeError``."""
        if not self._begin_close():
            return
        try:
            if self.delete_on_close:
                try:
                    await self._client.delete(*self.keys)
                except redis.ConnectionError:
                    # The server ended the connection (a restart, CLIENT KILL); DEL is
                    # idempotent, so once more, on a fresh one.
                    await self._drop_idle()
                    await self._client.delete(*self.keys)
        finally:
            if self._owns_client:
                await self._client.aclose()

    async def close(self) -> None:
        """The same as :meth:`aclose`."""
        await self.aclose()

    async def _ensure_ready(self) -> None:
        if self._ready:
            return
        async with self._ready_lock:
            if not self._ready:
                self._check_open()
                await self._script("insert", self._initial_args)
                self._ready = True

    async def _run(self, name: str, args: Sequence[str]) -> Any:
        await self._ensure_ready()
        self._check_open()
        return await self._script(name, args)

    async def _script(self, name: str, args: Sequence[str]) -> Any:
        try:
            return await self._scripts[name](keys=self.keys, args=args)
        except _CONNECTION_LOST:
            await self._drop_idle()
            raise

    async def _drop_idle(self) -> None:
        """Disconnect the pool's idle connections (see :data:`_CONNECTION_LOST`): here they
        matter most, since ``redis.asyncio`` does not check them before use."""
        await self._client.connection_pool.disconnect(inuse_connections=False)

    async def list_tasks(self) -> list[Task]:
        """Return a consistent snapshot of every task, sorted by id (SPEC 3.7)."""
        return _snapshot(await self._run("list", ()))

    async def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        """Claim ``task_id`` for ``agent`` (SPEC 3.1); as :meth:`RedisBoard.claim`."""
        for args in self._claim_attempts(task_id, agent, request):
            task = _claimed(task_id, await self._run("claim", args))
            if task is not None:
                return task
        raise self._unminted()

    async def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        """Recompute the lease's ``until`` (SPEC 3.5); as :meth:`RedisBoard.renew`."""
        reply = await self._run("renew", self._renew_args(task_id, token, request))
        return _returned_task(task_id, reply)

    async def release(self, task_id: str, token: str) -> None:
        """Give the task back (SPEC 3.2); as :meth:`RedisBoard.release`."""
        await self._finish(task_id, token, State.OPEN)

    async def complete(self, task_id: str, token: str) -> None:
        """Mark the task ``DONE`` (SPEC 3.3); as :meth:`RedisBoard.complete`."""
        await self._finish(task_id, token, State.DONE)

    async def fail(self, task_id: str, token: str) -> None:
        """Mark the task ``FAILED`` (SPEC 3.6); as :meth:`RedisBoard.fail`."""
        await self._finish(task_id, token, State.FAILED)

    async def _finish(self, task_id: str, token: str, state: State) -> None:
        reply = await self._run("finish", self._finish_args(task_id, token, state))
        _returned_none(task_id, reply)


# -- clients -----------------------------------------------------------------------------------


def _settings(pool: Any) -> tuple[type[Any], dict[str, Any]]:
    """A client's address from its connection pool: the connection class and settings.

    The pool's own state is left out (a new pool makes its own), a setting a maintenance
    notification may have moved is taken at its original value, and a bare ``object()``,
    a library's sentinel for "the default", is left out: it would mean nothing once
    pickled (a copy is not the sentinel), and leaving it out gives that same default.
    """
    settings = dict(pool.connection_kwargs)
    for key in _POOL_STATE:
        settings.pop(key, None)
    for original, key in _ORIGINALS.items():
        value = settings.pop(original, None)
        if value is not None:
            settings[key] = value
    return pool.connection_class, {
        key: value for key, value in settings.items() if type(value) is not object
    }


def _url_options(board_id: str, retry: type[Any]) -> dict[str, Any]:
    """What a board adds to a URL's settings: no retries (see :func:`_may_retry`), and its
    connections named after the board (a ``client_name`` in the URL wins)."""
    return {"retry": retry(NoBackoff(), 0), "client_name": f"taskboard:{board_id}"}


def _may_retry(pool: Any) -> bool:
    """Whether the connections of ``pool`` retry a command that failed on a lost connection.

    A retried script may already have run, its reply lost with the connection: a claim run
    twice is a ``TakenError`` to a caller whose claim succeeded, a release run twice a
    ``LeaseLostError``, a renew run twice grows ``seq`` twice. This reads the settings as a
    redis-py connection does: an explicit ``retry``'s count, else one retry if
    ``retry_on_error`` or ``retry_on_timeout`` is set.
    """
    kwargs = pool.connection_kwargs
    retry = kwargs.get("retry")
    if retry is not None:
        return bool(retry.get_retries())
    errors = kwargs.get("retry_on_error")
    if kwargs.get("retry_on_timeout"):
        return True
    return isinstance(errors, list | tuple) and bool(errors)


def _without_retries(settings: dict[str, Any], retry: type[Any]) -> dict[str, Any]:
    """``settings`` with retries off (a ``retry`` of ``retry`` class that retries nothing)."""
    kept = {k: v for k, v in settings.items() if k not in ("retry_on_error", "retry_on_timeout")}
    return {**kept, "retry": retry(NoBackoff(), 0)}


def _sync_client(address: tuple[type[Any], dict[str, Any]]) -> redis.Redis:
    """A new ``redis.Redis`` client, with a pool of its own, on ``address``; no retries."""
    connection_class, settings = address
    return redis.Redis.from_pool(
        redis.ConnectionPool(
            connection_class=connection_class,
            **_without_retries(settings, redis.retry.Retry),
        )
    )


def _async_client(address: tuple[type[Any], dict[str, Any]]) -> redis.asyncio.Redis:
    """A new ``redis.asyncio.Redis`` client, with a pool of its own, on ``address``; no
    retries."""
    connection_class, settings = address
    return redis.asyncio.Redis.from_pool(
        redis.asyncio.ConnectionPool(
            connection_class=connection_class,
            **_without_retries(settings, redis.asyncio.retry.Retry),
        )
    )


def _attach(
    cls: type[_Core],
    address: _Address,
    clock: Clock | Literal["server"],
    board_id: str,
    pending: Sequence[str] = (),
    fences: Fences = "counter",
) -> _Core:
    """Unpickle a board: a new client of board ``board_id`` at ``address`` (SPEC 8), which
    inserts the ``pending`` initial tasks of a lazy board that never reached the server."""
    client = cls._client_of(address, clock, board_id, fences)
    return client._inserting(pending) if isinstance(client, AsyncRedisBoard) else client
