"""The values of the board protocol (SPEC 10) and the reading of a child's answers.

Everything a child writes is checked before it is used: a line too long, not UTF-8, not
JSON, nested too deep, with the wrong id, a missing field or a field of the wrong type is a
:class:`ProtocolError`, an infrastructure fault that names the op and shows the line, cut.
Types are the protocol's business; values are the contract's: a task whose state is an
unknown string, or whose fence went backwards, is passed on as it came, for the checker
to judge as a board's bug, not as a broken pipe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from taskboard._contract import Lease, Task
from taskboard._errors import (
    BlockedError,
    LeaseLostError,
    NotFoundError,
    TakenError,
    TerminalError,
)

__all__ = [
    "ARGUMENT_FIELDS",
    "ERROR_CODES",
    "LONGEST_LINE",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "UnsupportedOp",
    "decode_task",
    "decode_time",
    "encode_task",
    "encode_time",
    "encode_ttl",
    "error_of",
    "read_answer",
    "read_yield",
    "request_line",
]

PROTOCOL_VERSION = 1
#: The request field of each argument a board operation takes (``taskboard._operations``):
#: a ``ClaimRequest`` goes as its ``ttl``.
ARGUMENT_FIELDS = {"task_id": "task", "agent": "agent", "token": "token", "request": "ttl"}
#: The longest answer line read, in bytes: a snapshot of every task fits many times over.
LONGEST_LINE = 4 * 1024 * 1024
#: How much of an offending line a report shows (SPEC 10).
SHOWN_CHARACTERS = 200
#: The deepest nesting an answer may have: a task is three levels deep in a ``list`` answer.
DEEPEST_NESTING = 16

# A JSON string (its escapes included), and a bracket outside one.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_BRACKET = re.compile(r"[\[\]{}]")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


class ProtocolError(Exception):
    """A child broke the protocol: an infrastructure fault, never a contract verdict.

    ``op`` is the request it was answering, ``line`` what it wrote (cut to
    :data:`SHOWN_CHARACTERS`), ``reason`` what was wrong with it, ``stderr`` the child's
    last lines of stderr, when known.
    """

    def __init__(self, op: str, reason: str, line: str | bytes = "", stderr: str = "") -> None:
        self.op = op
        self.reason = reason
        self.line = cut(line)
        self.stderr = stderr
        shown = f": {self.line}" if line else ""
        text = f"the board's answer to {op!r} broke the protocol ({reason}){shown}"
        if stderr:
            text += f"\nthe board's last lines of stderr:\n{stderr}"
        super().__init__(text)

    def with_stderr(self, stderr: str) -> ProtocolError:
        """The same error, showing the child's last lines of ``stderr``."""
        return ProtocolError(self.op, self.reason, self.line, stderr)


class UnsupportedOp(NotImplementedError):
    """The child answered ``unsupported``: it did not declare this op in ``hello``."""


#: The protocol's error codes and the exceptions a Python board raises for them.
ERROR_CODES: Mapping[str, type[Exception]] = {
    "not_found": NotFoundError,
    "taken": TakenError,
    "blocked": BlockedError,
    "terminal": TerminalError,
    "lease_lost": LeaseLostError,
    "invalid": ValueError,
    "unsupported": UnsupportedOp,
}


def cut(line: str | bytes) -> str:
    """``line`` as a report shows it: decoded leniently, at most 200 characters."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    if len(text) <= SHOWN_CHARACTERS:
        return text
    return f"{text[:SHOWN_CHARACTERS]}... ({len(text)} characters)"


# -- values --------------------------------------------------------------------------------------


def encode_time(when: datetime | None) -> int | None:
    """Microseconds since the Unix epoch (UTC); ``None`` stays ``None`` (no expiry)."""
    if when is None:
        return None
    return (when - _EPOCH) // _MICROSECOND


def decode_time(value: object) -> datetime | None:
    """The aware UTC datetime of a protocol time, or ``None`` for ``null``.

    Raises:
        TypeError: ``value`` is neither ``null`` nor an integer.
        ValueError: it is an integer outside the years a datetime can hold.
    """
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"a time is an integer of microseconds or null, got {value!r}")
    try:
        return _EPOCH + value * _MICROSECOND
    except OverflowError:
        raise ValueError(f"time {value} is out of range") from None


def encode_ttl(ttl: timedelta) -> int:
    """A TTL as an integer count of microseconds."""
    return ttl // _MICROSECOND


def encode_task(task: Task) -> dict[str, Any]:
    """A task as the protocol writes it."""
    lease = task.lease
    return {
        "id": task.id,
        "title": task.title,
        "deps": list(task.deps),
        "state": str(task.state),
        "owner": task.owner,
        "lease": None
        if lease is None
        else {"token": lease.token, "fence": lease.fence, "until": encode_time(lease.until)},
        "seq": task.seq,
    }


def decode_task(value: object) -> Task:
    """The task a child wrote, its fields' types checked (their values are the checker's).

    Raises:
        TypeError: not an object, a field missing, or a field of the wrong type.
        ValueError: a time out of range.
    """
    fields = _fields(value, "a task", ("id", "title", "deps", "state", "owner", "lease", "seq"))
    for name in ("id", "title", "state", "owner"):
        _typed(fields[name], str, f"task field {name!r}")
    deps = fields["deps"]
    if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
        raise TypeError(f"task field 'deps' is a list of strings, got {deps!r}")
    lease = None
    if fields["lease"] is not None:
        held = _fields(fields["lease"], "a lease", ("token", "fence", "until"))
        _typed(held["token"], str, "lease field 'token'")
        _integer(held["fence"], "lease field 'fence'")
        lease = Lease(held["token"], held["fence"], decode_time(held["until"]))
    _integer(fields["seq"], "task field 'seq'")
    # A known state string becomes a State in Task itself; an unknown one stays for check().
    return Task(
        id=fields["id"],
        title=fields["title"],
        deps=tuple(deps),
        state=fields["state"],
        owner=fields["owner"],
        lease=lease,
        seq=fields["seq"],
    )


def _fields(value: object, what: str, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} is a JSON object, got {value!r}")
    missing = [n for n in names if n not in value]
    if missing:
        raise TypeError(f"{what} lacks {', '.join(missing)}")
    return value


def _typed(value: object, kind: type, what: str) -> None:
    if not isinstance(value, kind):
        raise TypeError(f"{what} is a {kind.__name__}, got {value!r}")


def _integer(value: object, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} is an integer, got {value!r}")


# -- lines ---------------------------------------------------------------------------------------


#: One encoder for every request (``json.dumps`` with options builds one per call).
_REQUEST_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def request_line(request_id: int, op: str, arguments: Mapping[str, Any]) -> bytes:
    """One request as the line the checker writes on a child's stdin."""
    request = {"id": request_id, "op": op, **arguments}
    return _REQUEST_ENCODER.encode(request).encode() + b"\n"


def read_answer(line: bytes, request_id: int, op: str) -> dict[str, Any]:
    """The answer ``line`` carries to request ``request_id`` (``op``), checked as SPEC 10 says.

    Returns the answer object; its ``ok`` is a bool, and a failed answer's ``error`` and
    ``message`` are strings.

    Raises:
        ProtocolError: the line is empty (the child closed stdout), too long, not UTF-8, not
            a JSON object, nested too deep, or answers another id, or ``ok``, ``error`` or
            ``message`` is missing or of the wrong type.
    """
    if not line:
        raise ProtocolError(op, "the board closed its stdout")
    if len(line) > LONGEST_LINE:
        raise ProtocolError(op, f"a line over {LONGEST_LINE} bytes", line[:SHOWN_CHARACTERS])
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(op, f"not UTF-8: {exc.reason} at byte {exc.start}", line) from None
    if _nesting(text) > DEEPEST_NESTING:
        raise ProtocolError(op, f"nested deeper than {DEEPEST_NESTING} levels", line)
    try:
        answer = json.loads(text)
    except ValueError as exc:
        raise ProtocolError(op, f"not JSON: {exc}", line) from None
    if not isinstance(answer, dict):
        raise ProtocolError(op, "an answer is a JSON object", line)
    if answer.get("id") != request_id or isinstance(answer.get("id"), bool):
        raise ProtocolError(op, f"it answers id {answer.get('id')!r}, not {request_id}", line)
    if not isinstance(answer.get("ok"), bool):
        raise ProtocolError(op, "'ok' is true or false", line)
    if not answer["ok"] and not (
        isinstance(answer.get("error"), str) and isinstance(answer.get("message"), str)
    ):
        raise ProtocolError(op, "a failed answer has a string 'error' and 'message'", line)
    return answer


def read_yield(line: bytes, request_id: int, op: str) -> str | None:
    """The label of a ``yield`` line (``{"id": N, "yield": "label"}``: the child stopped at a
    point of its own while it handles request ``request_id``), or ``None`` when ``line`` is
    no such line (an answer, to be read as one).

    Raises:
        ProtocolError: it is a ``yield`` line for another id, or its label is no string.
    """
    if b'"yield"' not in line or len(line) > LONGEST_LINE:
        return None  # most lines: an answer, read without a second parse
    try:
        text = line.decode("utf-8")
        stop = json.loads(text) if _nesting(text) <= DEEPEST_NESTING else None
    except ValueError:  # UnicodeDecodeError too
        stop = None  # read_answer says what is wrong with it
    if not isinstance(stop, dict) or "yield" not in stop or "ok" in stop:
        return None
    if stop.get("id") != request_id or isinstance(stop.get("id"), bool):
        raise ProtocolError(op, f"it yields in id {stop.get('id')!r}, not {request_id}", line)
    label = stop["yield"]
    if not isinstance(label, str):
        raise ProtocolError(op, "a yield's label is a string", line)
    return label


def _nesting(text: str) -> int:
    # Counted before parsing, so that a hostile line never reaches json's recursion; brackets
    # inside strings (a token may hold any character) do not count.
    opening = text.count("[") + text.count("{")
    if opening <= DEEPEST_NESTING:
        return opening  # no deeper than that: most answers end here, without a scan
    deepest = depth = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def error_of(answer: Mapping[str, Any], op: str) -> Exception:
    """The exception a Python board would have raised for this failed answer.

    Raises:
        ProtocolError: the error code is none of :data:`ERROR_CODES`.
    """
    code, message = answer["error"], answer["message"]
    kind = ERROR_CODES.get(code)
    if kind is None:
        known = ", ".join(ERROR_CODES)
        raise ProtocolError(op, f"error code {code!r} is none of {known}", json.dumps(answer))
    return kind(message or code)
