"""The virtual clock's preload library, built on first use, and the file it reads time from.

``clock.c``, shipped beside this module, is compiled with the machine's C compiler into a
per-user cache directory, under a name that holds a hash of its source (a changed source is
built anew; a built one is reused by every later run). A process started with it in
``LD_PRELOAD`` and :data:`CLOCK_FILE_VARIABLE` naming a :class:`ClockFile` reads its wall
clock (``clock_gettime(CLOCK_REALTIME)``, ``gettimeofday``, ``time``) from that file.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

__all__ = [
    "CLOCK_FILE_VARIABLE",
    "LIFELINE_SIGNAL_VARIABLE",
    "LIFELINE_VARIABLE",
    "ClockFile",
    "VirtualClockUnavailable",
    "preload_library",
]

#: The environment variable that names the clock file to a process under the library.
CLOCK_FILE_VARIABLE = "TASKBOARD_VIRTUAL_CLOCK_FILE"
#: The environment variable that names the read end of a pipe whose other end the checker
#: holds: when it closes (the checker's process ended, however), the process under the
#: library sends itself SIGTERM.
LIFELINE_VARIABLE = "TASKBOARD_VIRTUAL_LIFELINE_FD"
#: The environment variable that names the signal (a number) the process sends itself when
#: its lifeline closes; SIGTERM when unset.
LIFELINE_SIGNAL_VARIABLE = "TASKBOARD_VIRTUAL_LIFELINE_SIGNAL"

_SOURCE = Path(__file__).with_name("clock.c")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_build_lock = threading.Lock()


class VirtualClockUnavailable(RuntimeError):
    """The virtual clock cannot run on this machine: it is not Linux, or no C compiler
    (``cc``, or ``$CC``) is there to build its preload library, or the build failed."""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "taskboard" / "virtual-clock"


def preload_library() -> Path:
    """The path of the built preload library, building it first if this source never was.

    Raises:
        VirtualClockUnavailable: not Linux, no C compiler, or the compiler failed (the
            message holds its output).
    """
    if not sys.platform.startswith("linux"):
        raise VirtualClockUnavailable(
            f"the virtual clock is Linux only (it preloads a library into the server with "
            f"LD_PRELOAD); this is {sys.platform}: use clock_mode = 'wall' here"
        )
    source = _SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    library = _cache_dir() / f"clock-{digest}.so"
    with _build_lock:
        if library.exists():
            return library
        compiler = os.environ.get("CC") or "cc"
        if shutil.which(compiler) is None:
            raise VirtualClockUnavailable(
                f"the virtual clock builds a small preload library from C on first use, and "
                f"no C compiler {compiler!r} is on PATH: install one (apt-get install gcc), "
                "or set CC"
            )
        library.parent.mkdir(parents=True, exist_ok=True)
        # Built beside its final name and renamed: a process that builds it at the same time
        # never sees half a library.
        fd, partial = tempfile.mkstemp(suffix=".so", dir=library.parent)
        os.close(fd)
        try:
            built = subprocess.run(
                [
                    compiler,
                    "-shared",
                    "-fPIC",
                    "-O2",
                    "-pthread",
                    "-o",
                    partial,
                    str(_SOURCE),
                    "-ldl",
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if built.returncode != 0:
                raise VirtualClockUnavailable(
                    f"building the virtual clock's preload library with {compiler!r} failed "
                    f"(exit {built.returncode}):\n{built.stderr.strip()}"
                )
            os.replace(partial, library)
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        return library


def micros_of(when: datetime) -> int:
    """``when`` (aware) as whole microseconds since the Unix epoch."""
    return (when - _EPOCH) // _MICROSECOND


class ClockFile:
    """The file a process under the preload library reads its wall clock from: 8 bytes, a
    signed count of microseconds since the epoch, mapped shared, so a write here is what the
    process's next clock read returns. The time it holds never goes back.

    Raises:
        ValueError: :meth:`set` to a time before the one it holds, or a naive datetime.
    """

    def __init__(self, path: Path, start: datetime) -> None:
        self.path = path
        path.write_bytes(micros_of(start).to_bytes(8, sys.byteorder, signed=True))
        with open(path, "r+b") as file:
            self._map = mmap.mmap(file.fileno(), 8)
        # One aligned 8-byte store per write: a reader never sees half of one.
        self._words = memoryview(self._map).cast("q")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The time the file holds."""
        return _EPOCH + self._words[0] * _MICROSECOND

    def set(self, when: datetime) -> None:
        """Write ``when``, which must not be before the time the file holds."""
        if when.tzinfo is None:
            raise ValueError(f"the virtual clock takes an aware datetime, got naive {when!r}")
        micros = micros_of(when)
        with self._lock:
            held = self._words[0]
            if micros < held:
                raise ValueError(
                    f"the virtual clock never goes back: set_time({when.isoformat()}) is "
                    f"before its time {(_EPOCH + held * _MICROSECOND).isoformat()}"
                )
            self._words[0] = micros

    def close(self) -> None:
        """Unmap the file (a process under the library keeps its own mapping)."""
        self._words.release()
        self._map.close()
