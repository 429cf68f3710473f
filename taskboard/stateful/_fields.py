"""The fields of a trace file: typed reading of JSON objects that names the path of whatever
is wrong, and the JSON of the values every kind of step writes (durations, tasks, windows)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from taskboard._clock import as_utc
from taskboard._contract import Lease, Task
from taskboard.model import Window

__all__ = [
    "LONGEST_US",
    "Reader",
    "TraceFileError",
    "kind_of",
    "micros",
    "read_count",
    "read_task",
    "read_window",
    "task_json",
    "when_json",
]


class TraceFileError(ValueError):
    """A trace file that cannot be read: not JSON, not a trace, a newer schema, a bad field.

    The message names the file and the offending field, e.g. ``steps[3].op``. Loading
    a trace never changes anything, so fixing the file and loading again is safe.
    """


def micros(delta: timedelta) -> int:
    """``delta`` in whole microseconds, as trace files write durations."""
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class Reader:
    """Typed access to one JSON object, naming the path of whatever is wrong."""

    def __init__(self, source: str, where: str, value: object) -> None:
        if not isinstance(value, dict):
            raise self._error(source, where, f"expected an object, got {kind_of(value)}")
        self.source, self.where, self.value = source, where, value

    @staticmethod
    def _error(source: str, where: str, problem: str) -> TraceFileError:
        return TraceFileError(f"{source}: {where or 'top level'}: {problem}")

    def error(self, key: str, problem: str) -> TraceFileError:
        return self._error(self.source, self._at(key), problem)

    def _at(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def get(self, key: str, kind: type | tuple[type, ...], *, optional: bool = False) -> Any:
        if key not in self.value:
            if optional:
                return None
            raise self.error(key, "missing")
        value = self.value[key]
        if value is None and optional:
            return None
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise self.error(key, f"expected {names}, got {kind_of(value)}")
        return value

    def duration(self, key: str, *, positive: bool = False) -> timedelta:
        """A non-negative (or positive) whole number of microseconds, as a timedelta."""
        micros = self.get(key, int)
        if micros > LONGEST_US:
            raise self.error(key, f"{micros} microseconds is longer than a trace can span")
        if micros < 0 or (positive and micros == 0):
            raise self.error(
                key, f"must be {'positive' if positive else 'non-negative'}, got {micros}"
            )
        try:
            return timedelta(microseconds=micros)
        except OverflowError:
            raise self.error(key, f"{micros} microseconds is longer than any duration") from None

    def when(self, key: str, *, optional: bool = False) -> datetime | None:
        text = self.get(key, str, optional=optional)
        if text is None:
            return None
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise self.error(key, f"not an ISO 8601 time: {text!r}") from None
        if value.tzinfo is None:
            raise self.error(key, f"needs a UTC offset: {text!r}")
        return value.astimezone(UTC)

    def child(self, key: str, value: object) -> Reader:
        return Reader(self.source, self._at(key), value)


def kind_of(value: object) -> str:
    """What kind of JSON value ``value`` is, for messages: ``null``, ``str``, ``dict``..."""
    return "null" if value is None else type(value).__name__


def read_window(reader: Reader, bounds: list[Any]) -> Window:
    """A call's window from ``[earliest, latest]``, read as ``reader``'s ``window`` field."""
    if len(bounds) != 2 or not all(isinstance(b, str) for b in bounds):
        raise reader.error("window", "expected [earliest, latest] as two ISO 8601 times")
    edges = reader.child("window", {"earliest": bounds[0], "latest": bounds[1]})
    earliest, latest = edges.when("earliest"), edges.when("latest")
    assert earliest is not None
    assert latest is not None
    if earliest > latest:
        raise reader.error("window", f"earliest {bounds[0]!r} is after latest {bounds[1]!r}")
    return Window(earliest, latest)


#: A duration longer than any clock could run a trace for (about 30 years), in microseconds.
LONGEST_US = 10**15


def when_json(value: object) -> object:
    """A time as trace files write it: ISO 8601 in UTC (anything else as it is)."""
    return as_utc(value).isoformat() if isinstance(value, datetime) else value


def task_json(task: Task) -> dict[str, Any]:
    """A task as trace files write it (as the board showed it, odd values included)."""
    lease = task.lease
    return {
        "id": task.id,
        "title": task.title,
        "deps": list(task.deps) if isinstance(task.deps, tuple | list) else task.deps,
        "state": str(task.state) if isinstance(task.state, str) else task.state,
        "owner": task.owner,
        "lease": None
        if not isinstance(lease, Lease)
        else {"token": lease.token, "fence": lease.fence, "until": when_json(lease.until)},
        "seq": task.seq,
    }


def read_task(reader: Reader) -> Task:
    """A task written by :func:`task_json`."""
    lease_reader = reader.get("lease", dict, optional=True)
    lease = None
    if lease_reader is not None:
        lr = reader.child("lease", lease_reader)
        lease = Lease(lr.get("token", str), lr.get("fence", int), lr.when("until", optional=True))
    deps = reader.get("deps", list)
    for i, dep in enumerate(deps):
        if not isinstance(dep, str):
            raise reader.error(f"deps[{i}]", f"expected str, got {kind_of(dep)}")
    return Task(
        id=reader.get("id", str),
        title=reader.get("title", str),
        deps=tuple(deps),
        state=reader.get("state", str),
        owner=reader.get("owner", str),
        lease=lease,
        seq=reader.get("seq", int),
    )


def read_count(reader: Reader, key: str) -> int:
    """A non-negative whole number (of TTL units, ticks), read as ``reader``'s ``key``.

    Raises:
        TraceFileError: it is missing, not a whole number, or negative.
    """
    count: int = reader.get(key, int)
    if count < 0:
        raise reader.error(key, f"must be non-negative, got {count}")
    return count
