"""One process of a board command: requests in, answers out, its stderr kept (SPEC 10).

The child is never trusted: an answer that is late, malformed or missing is a
:class:`~taskboard._protocol.codec.ProtocolError`, and after one the process is ended and
every later request fails at once, since its answers can no longer be matched to requests.
"""

from __future__ import annotations

import collections
import contextlib
import os
import selectors
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO, Any

from taskboard._protocol.codec import (
    LONGEST_LINE,
    ProtocolError,
    error_of,
    read_answer,
    read_yield,
    request_line,
)
from taskboard._schedule import note_lock_probe, round_trip

__all__ = ["EXIT_GRACE", "SPIN_SECONDS", "STDERR_LINES", "Child", "await_exits", "holding"]

#: How many of a child's last stderr lines a report shows.
STDERR_LINES = 20
#: How long a reader polls for an answer before it sleeps until one comes.
SPIN_SECONDS = 200e-6
#: How long a child may take to exit after ``close``, and then after SIGTERM.
EXIT_GRACE = 2.0


@contextlib.contextmanager
def holding(lock: threading.Lock) -> Iterator[None]:
    """Hold ``lock`` (a process's, or the board's clock). In a controlled race, a thread
    that waits for it while another holds it (one stopped at a point of its child's, mid-
    request) tells the scheduler it waits on another's lock: the others go on at once."""
    if not lock.acquire(blocking=False):
        taken = threading.Event()
        note_lock_probe(lambda: not taken.is_set())
        lock.acquire()
        taken.set()
        note_lock_probe(None)
    try:
        yield
    finally:
        lock.release()


@dataclass(frozen=True)
class _Ahead:
    """A request whose answer is still unread; ``told``: its answer is only checked."""

    request_id: int
    op: str
    arguments: dict[str, Any]
    told: bool


class Child:
    """A running board process. ``request`` is one round trip; ``close`` always ends it."""

    def __init__(self, argv: Sequence[str], *, timeout: float) -> None:
        """Start ``argv``.

        Raises:
            OSError: the command cannot be started (no such file, not executable).
        """
        self.argv = tuple(argv)
        self.timeout = timeout
        self._next_id = 0
        self._broken: ProtocolError | None = None
        self._lock = threading.Lock()  # one request at a time per process (SPEC 10)
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._unread = bytearray()  # what stdout gave beyond the last answer read
        # Requests written ahead whose answers are still to be read, oldest first: a told
        # ``set_time``, or a ``list`` sent behind a call (see ``request``'s ``then``).
        self._ahead: collections.deque[_Ahead] = collections.deque()
        #: The child said in ``hello`` that it may stop mid-request at points of its own
        #: (``yield`` lines, each answered ``go``); until then such a line is a fault.
        self.yield_points = False
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches the checker, which ends the child itself
        )
        assert self.process.stdout is not None
        assert self.process.stderr is not None
        # stdout is read by the thread that made the request (a thread between them would
        # cost a hand-over per call); stderr by a thread of its own, which closes it at end
        # of file, so that a child that floods stderr never blocks on a full pipe.
        self._stdout = self.process.stdout.fileno()
        os.set_blocking(self._stdout, False)  # see _read_soon
        self._answers = selectors.DefaultSelector()
        self._answers.register(self._stdout, selectors.EVENT_READ)
        self._stderr_reader = threading.Thread(
            target=self._read_stderr, args=(self.process.stderr,), daemon=True
        )
        self._stderr_reader.start()

    def __repr__(self) -> str:
        return f"Child({' '.join(self.argv)!r}, pid={self.process.pid})"

    def _read_line(self, op: str) -> bytes:
        """The child's next line on stdout (without its end at end of file; cut after
        :data:`LONGEST_LINE` bytes), or ``b""`` once stdout is closed.

        Raises:
            ProtocolError: no whole line within the timeout.
        """
        deadline = time.monotonic() + self.timeout
        unread, searched = self._unread, 0
        while True:
            end = unread.find(b"\n", searched, LONGEST_LINE + 1)
            if end >= 0 or len(unread) > LONGEST_LINE:
                cut = end + 1 if end >= 0 else LONGEST_LINE + 1
                line = bytes(unread[:cut])
                del unread[:cut]
                return line
            searched = len(unread)
            chunk = self._read_soon()
            if chunk is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._answers.select(remaining):
                    raise ProtocolError(op, f"no answer within {self.timeout:g} s")
                chunk = os.read(self._stdout, 1 << 16)
            if not chunk:
                line = bytes(unread)
                unread.clear()
                return line
            unread += chunk

    def _read_soon(self) -> bytes | None:
        """What stdout gives within :data:`SPIN_SECONDS` of asking, polled without sleeping;
        ``None`` if nothing came. Most answers come that fast, and a sleeping reader would
        wait as long again to be woken (tens of microseconds a call, more on a VM)."""
        give_up = time.perf_counter() + SPIN_SECONDS
        while True:
            try:
                return os.read(self._stdout, 1 << 16)
            except BlockingIOError:
                if time.perf_counter() > give_up:
                    return None

    def _read_stderr(self, stream: IO[bytes]) -> None:
        with stream:
            for line in iter(stream.readline, b""):
                self._stderr.append(line.decode("utf-8", "replace").rstrip("\r\n"))

    @property
    def stderr_tail(self) -> str:
        """The child's last lines of stderr, as a report shows them."""
        return "\n".join(self._stderr)

    def request(self, op: str, *, then: str | None = None, **arguments: Any) -> dict[str, Any]:
        """Send one request and return its successful answer. With ``then``, a request of
        that op (without arguments) goes out in the same write, and its answer is kept for
        the next ``request(then)``, if nothing else was sent to this process in between: a
        call and the ``list`` behind it then cost one round trip, not two.

        Raises:
            ProtocolError: no answer within the timeout, a malformed one, or a closed pipe.
            Exception: the contract error (or ``ValueError``) the answer names, or a told
                ``set_time`` was answered with.
        """
        with holding(self._lock):
            self._refuse_if_broken(op)
            with self._fault_ends_it():
                answer = self._answer_ahead(op, arguments)
                if answer is None:
                    request_id = self._send(op, arguments, then=then)
                    answer = self._answer(request_id, op)
        if not answer["ok"]:
            raise error_of(answer, op)
        return answer

    def tell(self, op: str, **arguments: Any) -> None:
        """Send a request whose answer is read (and checked) before the next one's: a
        ``set_time`` costs no round trip of its own.

        Raises:
            ProtocolError: the process broke earlier, or stopped reading its stdin.
        """
        with holding(self._lock):
            self._refuse_if_broken(op)
            with self._fault_ends_it():
                self._send(op, arguments, told=True)

    def settle(self) -> None:
        """Read every answer still ahead, so that none is taken for a later request: another
        process is about to share the storage.

        Raises:
            ProtocolError: as ``request``; Exception: a told request's error.
        """
        with self._lock:
            if self._broken is None:
                with self._fault_ends_it():
                    self._answer_ahead(None, {})

    def _refuse_if_broken(self, op: str) -> None:
        if self._broken is not None:
            raise ProtocolError(op, f"the board process broke earlier: {self._broken.reason}")

    @contextlib.contextmanager
    def _fault_ends_it(self) -> Iterator[None]:
        """A fault inside ends the process (its answers can no longer be matched to
        requests) and is raised with the child's last lines of stderr."""
        try:
            yield
        except ProtocolError as fault:
            self._break(fault)
            raise fault.with_stderr(self.stderr_tail) from None

    def _send(
        self, op: str, arguments: dict[str, Any], *, then: str | None = None, told: bool = False
    ) -> int:
        """Write ``op`` (and ``then`` behind it) on the child's stdin; ``op``'s id."""
        self._next_id += 1
        request_id = self._next_id
        data = request_line(request_id, op, arguments)
        ahead = [_Ahead(request_id, op, arguments, told=True)] if told else []
        if then is not None:
            self._next_id += 1
            data += request_line(self._next_id, then, {})
            ahead.append(_Ahead(self._next_id, then, {}, told=False))
        self._write(op, data)
        self._ahead.extend(ahead)
        return request_id

    def _answer(self, request_id: int, op: str) -> dict[str, Any]:
        """The child's answer to request ``request_id``, read and checked.

        Raises:
            ProtocolError: it is malformed, or stdout closed (saying how the child exited).
        """
        while True:
            line = self._read_line(op)
            if not line:
                raise ProtocolError(op, self._exit_reason("it closed its stdout"))
            label = read_yield(line, request_id, op) if self.yield_points else None
            if label is None:
                return read_answer(line, request_id, op)
            # The child stopped at a point of its own, mid-request: in a controlled race this
            # thread waits there for its turn; anywhere else it goes on at once.
            round_trip(f"{op}: yield_point({label})")
            self._write(op, request_line(request_id, "go", {}))

    def _write(self, op: str, data: bytes) -> None:
        """Write ``data`` on the child's stdin at once.

        Raises:
            ProtocolError: the child stopped reading its stdin.
        """
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(data)
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise ProtocolError(op, self._exit_reason("it stopped reading its stdin")) from None

    def _answer_ahead(self, op: str | None, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """Read every answer ahead; return the last one's if it answers ``op`` with
        ``arguments`` (nothing was sent after it), else ``None``.

        Raises:
            ProtocolError: an answer ahead is malformed or missing.
            Exception: the error a told request was answered with (once all were read).
        """
        taken: dict[str, Any] | None = None
        refused: Exception | None = None
        while self._ahead:
            ahead = self._ahead.popleft()
            answer = self._answer(ahead.request_id, ahead.op)
            if ahead.told:
                if not answer["ok"] and refused is None:
                    refused = error_of(answer, ahead.op)
            elif not self._ahead and (ahead.op, ahead.arguments) == (op, arguments):
                taken = answer
        if refused is not None:
            raise refused
        return taken

    def _break(self, fault: ProtocolError) -> None:
        """Its answers can no longer be matched to requests: end it."""
        self._broken = fault
        self._ahead.clear()
        self._end()

    def _exit_reason(self, what: str) -> str:
        try:
            code = self.process.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            return what
        return f"{what}: it exited with status {code}"

    def close(self, *, polite: bool = True) -> None:
        """Ask the child to close (``polite``), then end it whatever it does; idempotent.
        Whatever it answers, ending the process is what matters: so a polite close is sent
        and the child left to exit in the background (the next example need not wait for
        it); :func:`await_exits` waits until every such child is ended."""
        if polite and self._broken is None and self.process.poll() is None:
            try:
                with self._lock:
                    self._send("close", {})
            except ProtocolError:
                pass  # it stopped reading: ended below
            else:
                _EXITS.end_later(self)
                return
        self._end()

    def _end(self) -> None:
        process = self.process
        if process.stdin is not None and not process.stdin.closed:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout=EXIT_GRACE)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=EXIT_GRACE)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._stderr_reader.join(timeout=EXIT_GRACE)
        if process.stdout is not None and not process.stdout.closed:
            self._answers.close()
            process.stdout.close()

    @property
    def exit_code(self) -> int | None:
        """The child's exit status, or ``None`` while it runs."""
        return self.process.poll()


class _Exits:
    """Children that were sent ``close``, ended one after another by one daemon thread (a
    thread of their own would cost each example its start)."""

    def __init__(self) -> None:
        self._pending: list[Child] = []
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def end_later(self, child: Child) -> None:
        with self._changed:
            self._pending.append(child)
            self._changed.notify_all()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="taskboard-exits", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._pending:
                    self._changed.wait()
                child = self._pending[0]
            try:
                child._end()
            finally:
                with self._changed:
                    self._pending.remove(child)
                    self._changed.notify_all()

    def wait(self) -> None:
        with self._changed:
            while self._pending:
                self._changed.wait()


_EXITS = _Exits()


def await_exits() -> None:
    """Wait until every child that was sent ``close`` has exited (or was killed)."""
    _EXITS.wait()
