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
from collections.abc import Sequence
from typing import IO, Any

from taskboard._protocol.codec import (
    LONGEST_LINE,
    ProtocolError,
    error_of,
    read_answer,
    request_line,
)

__all__ = ["STDERR_LINES", "Child"]

#: How many of a child's last stderr lines a report shows.
STDERR_LINES = 20
#: How long a child may take to exit after ``close``, and then after SIGTERM.
EXIT_GRACE = 2.0


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
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._answers.select(remaining):
                raise ProtocolError(op, f"no answer within {self.timeout:g} s")
            chunk = os.read(self._stdout, 1 << 16)
            if not chunk:
                line = bytes(unread)
                unread.clear()
                return line
            unread += chunk

    def _read_stderr(self, stream: IO[bytes]) -> None:
        with stream:
            for line in iter(stream.readline, b""):
                self._stderr.append(line.decode("utf-8", "replace").rstrip("\r\n"))

    @property
    def stderr_tail(self) -> str:
        """The child's last lines of stderr, as a report shows them."""
        return "\n".join(self._stderr)

    def request(self, op: str, **arguments: Any) -> dict[str, Any]:
        """Send one request and return its successful answer.

        Raises:
            ProtocolError: no answer within the timeout, a malformed one, or a closed pipe.
            Exception: the contract error (or ``ValueError``) the answer names.
        """
        with self._lock:
            if self._broken is not None:
                raise ProtocolError(op, f"the board process broke earlier: {self._broken.reason}")
            self._next_id += 1
            try:
                answer = self._round_trip(self._next_id, op, arguments)
            except ProtocolError as fault:
                self._broken = fault
                self._end()
                raise fault.with_stderr(self.stderr_tail) from None
        if not answer["ok"]:
            raise error_of(answer, op)
        return answer

    def _round_trip(self, request_id: int, op: str, arguments: dict[str, Any]) -> dict[str, Any]:
        stdin = self.process.stdin
        assert stdin is not None
        try:
            stdin.write(request_line(request_id, op, arguments))
            stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise ProtocolError(op, self._exit_reason("it stopped reading its stdin")) from None
        line = self._read_line(op)
        if not line:
            raise ProtocolError(op, self._exit_reason("it closed its stdout"))
        return read_answer(line, request_id, op)

    def _exit_reason(self, what: str) -> str:
        try:
            code = self.process.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            return what
        return f"{what}: it exited with status {code}"

    def close(self, *, polite: bool = True) -> None:
        """Ask the child to close (``polite``), then end it whatever it does; idempotent."""
        if polite and self._broken is None and self.process.poll() is None:
            # Whatever it answers, ending the process is what matters here.
            with contextlib.suppress(Exception):
                self.request("close")
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
