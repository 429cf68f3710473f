"""Board processes started ahead of need: the next process of a command has answered ``hello``
before a board or client asks for one.

Starting a process and hearing its ``hello`` costs a Go board about 2 ms and a Python board
about 0.3 s, in every example and for every client. A spare started in the background while
the current example runs hides that wait. One spare per command and timeout is kept; taking
it starts the next.

Every process a spare ever was is ended: when taken, by its board's ``close``; otherwise by
:func:`end_spares`, which a ``fuzz`` or ``replay`` run calls when it ends (a pass, a failure,
a fault or Ctrl-C), and which also runs at interpreter exit.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from taskboard._operations import OPTIONAL_OPERATIONS
from taskboard._protocol.child import EXIT_GRACE, Child, await_exits
from taskboard._protocol.codec import PROTOCOL_VERSION, ProtocolError
from taskboard.model._model import EXPIRED_LEASE_POLICIES

__all__ = ["ExecStartError", "Hello", "end_spares", "hello_of", "start_child", "take_child"]

#: The optional ops a child may declare in ``hello``: the optional board operations, and the
#: protocol's own.
OPTIONAL_OPS = frozenset(
    {
        *(row.protocol_op for row in OPTIONAL_OPERATIONS),
        "connect",
        "restart_storage",
        "drop_connections",
    }
)


class ExecStartError(Exception):
    """The board command could not be started, or did not answer ``hello`` as SPEC 10 says: a
    usage error (``taskboard fuzz`` exits 2), shown with the child's stderr."""


class Hello:
    """What a child said of itself in ``hello``: its name, optional ops, durability and (when
    it says) its expired-lease policy and whether it marks points of its own."""

    def __init__(self, answer: dict[str, object]) -> None:
        """Raises:
        ProtocolError: a field is missing or of the wrong type, or the version differs."""
        if answer.get("protocol") != PROTOCOL_VERSION:
            raise ProtocolError("hello", f"protocol {answer.get('protocol')!r}, not 1")
        ops, name, durable = answer.get("ops"), answer.get("name"), answer.get("durable")
        if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
            raise ProtocolError("hello", f"'ops' is a list of strings, got {ops!r}")
        unknown = sorted(set(ops) - OPTIONAL_OPS)
        if unknown:
            raise ProtocolError("hello", f"unknown ops {unknown}; known: {sorted(OPTIONAL_OPS)}")
        if not isinstance(name, str) or not isinstance(durable, bool):
            raise ProtocolError("hello", "'name' is a string and 'durable' true or false")
        policy = answer.get("expired_lease_policy")
        if policy is not None and policy not in EXPIRED_LEASE_POLICIES:
            raise ProtocolError(
                "hello",
                f"'expired_lease_policy' is 'either', 'accept' or 'reject', got {policy!r}",
            )
        points = answer.get("yield_points", False)
        if not isinstance(points, bool):
            raise ProtocolError("hello", f"'yield_points' is true or false, got {points!r}")
        self.name = name
        self.ops = frozenset(ops)
        self.durable = durable
        #: SPEC 3.4: the policy the board keeps, when it says (``None``: it does not).
        self.expired_lease_policy: str | None = policy
        #: It marks every place in a call where another process's call may come in, and stops
        #: there mid-request (``yield`` lines), as the checker offered in its ``hello``: its
        #: calls are atomic between them, and a controlled race schedules its requests.
        self.yield_points = points


def start_child(
    argv: Sequence[str], timeout: float, started: Callable[[Child], None] = lambda child: None
) -> tuple[Child, Hello]:
    """Start ``argv`` and hear its ``hello``; ``started`` hears of the process before that.

    Raises:
        ExecStartError: it does not start, or does not answer ``hello`` as SPEC 10 says (the
            process is ended, and the error shows its last lines of stderr).
    """
    try:
        child = Child(argv, timeout=timeout)
    except OSError as exc:
        raise ExecStartError(f"cannot start the board command {' '.join(argv)!r}: {exc}") from None
    started(child)
    try:
        # A child that knows yield points writes them only to a checker that offered to take
        # them, so old checkers and old children keep working.
        hello = Hello(child.request("hello", protocol=PROTOCOL_VERSION, yield_points=True))
        child.yield_points = hello.yield_points
        return child, hello
    except Exception as exc:  # whatever it did, the command is unusable
        child.close(polite=False)
        reason = exc.reason if isinstance(exc, ProtocolError) else f"{type(exc).__name__}: {exc}"
        raise ExecStartError(
            f"the board command {' '.join(argv)!r} did not answer hello as SPEC 10 says "
            f"({reason})\nits last lines of stderr:\n{child.stderr_tail or '(none)'}"
        ) from None


_Key = tuple[tuple[str, ...], float]


class _Spares:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[_Key, Future[tuple[Child, Hello]]] = {}
        #: Every process a spare started and nobody took yet, from its start on.
        self._untaken: set[Child] = set()
        #: How many times :meth:`end` ran: a spare still starting when it did is ended too.
        self._ends = 0
        #: The threads starting spares: :meth:`end` waits for them, so that none starts a
        #: process after the run ended.
        self._starting: set[threading.Thread] = set()

    def take(self, argv: Sequence[str], timeout: float) -> tuple[Child, Hello]:
        key = (tuple(argv), timeout)
        with self._lock:
            ready = self._next.pop(key, None)
            self._next[key] = self._start(key)
        if ready is not None:
            try:
                child, hello = ready.result()
            except ExecStartError:
                pass  # started again below, so that the error is this call's own
            else:
                with self._lock:
                    self._untaken.discard(child)
                if child.exit_code is None:
                    return child, hello
                child.close(polite=False)
        return start_child(argv, timeout)

    def _start(self, key: _Key) -> Future[tuple[Child, Hello]]:
        future: Future[tuple[Child, Hello]] = Future()
        ends = self._ends

        def started(child: Child) -> None:
            with self._lock:
                if ends == self._ends:
                    self._untaken.add(child)
                    return
            child.close(polite=False)  # ended while it started: its hello fails, unheard

        def run() -> None:
            try:
                future.set_result(start_child(*key, started))
            except BaseException as exc:
                future.set_exception(exc)
            finally:
                with self._lock:
                    self._starting.discard(thread)

        # A daemon thread, not an executor's: a child that never answers must not hold up
        # the interpreter's exit, and end_spares ends its process whatever the thread does.
        thread = threading.Thread(target=run, name="taskboard-spare", daemon=True)
        self._starting.add(thread)  # under the lock: take() holds it
        thread.start()
        return future

    def end(self) -> None:
        with self._lock:
            untaken, self._untaken = self._untaken, set()
            self._next.clear()
            self._ends += 1
        for child in untaken:
            child.close(polite=False)
        with self._lock:
            starting = list(self._starting)
        for thread in starting:
            # Its process, once started, is ended by ``started`` (ends changed); its hello
            # then fails at once. Bounded: a child that ignores SIGTERM is killed after that.
            thread.join(timeout=3 * EXIT_GRACE)
        await_exits()


_SPARES = _Spares()
atexit.register(_SPARES.end)


def take_child(argv: Sequence[str], timeout: float) -> tuple[Child, Hello]:
    """A process of ``argv`` that has answered ``hello``: the spare when one is ready, else
    a new one; either way the next spare starts.

    Raises:
        ExecStartError: as :func:`start_child`.
    """
    return _SPARES.take(argv, timeout)


def hello_of(argv: Sequence[str], timeout: float) -> Hello:
    """What the command says of itself in ``hello``; the process is ended afterwards, and a
    spare waits for the first board.

    Raises:
        ExecStartError: it does not start, or does not answer ``hello`` as SPEC 10 says.
    """
    child, hello = take_child(argv, timeout)
    child.close()
    return hello


def end_spares() -> None:
    """End every spare process nobody took, and wait for every closed one to exit; the next
    :func:`take_child` starts afresh."""
    _SPARES.end()
