"""The board protocol's values and the never-trusting reading of a child's answers
(SPEC 10)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskboard import Lease, LeaseLostError, NotFoundError, State, TakenError, Task
from taskboard._protocol.codec import (
    LONGEST_LINE,
    ProtocolError,
    UnsupportedOp,
    decode_task,
    decode_time,
    encode_task,
    encode_time,
    encode_ttl,
    error_of,
    read_answer,
    request_line,
)

times = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
)
leases = st.builds(Lease, st.text(), st.integers(), st.none() | times)
tasks = st.builds(
    Task,
    id=st.text(),
    title=st.text(),
    deps=st.lists(st.text(), max_size=3).map(tuple),
    state=st.sampled_from(State),
    owner=st.text(),
    lease=st.none() | leases,
    seq=st.integers(),
)


@given(tasks)
def test_a_task_survives_the_wire(task: Task) -> None:
    """Any task, encoded, written as JSON, read and decoded, is the same task."""
    assert decode_task(json.loads(json.dumps(encode_task(task)))) == task


def test_times_are_microseconds_since_the_epoch() -> None:
    """A time is an integer of microseconds since the Unix epoch, UTC; null is no expiry."""
    when = datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=UTC)
    assert encode_time(when) == 1_767_225_600_000_005
    assert decode_time(1_767_225_600_000_005) == when
    assert encode_time(None) is None
    assert decode_time(None) is None
    assert encode_ttl(timedelta(milliseconds=5)) == 5000


@pytest.mark.parametrize("value", [1.5, "12", True, [1]])
def test_a_time_of_the_wrong_type_is_refused(value: object) -> None:
    """A time that is not an integer or null is a TypeError, never a guess."""
    with pytest.raises(TypeError, match="a time is an integer"):
        decode_time(value)


def test_a_time_out_of_range_is_refused() -> None:
    """An integer no datetime can hold is a ValueError."""
    with pytest.raises(ValueError, match="out of range"):
        decode_time(10**20)


def test_an_unknown_state_passes_for_the_checker_to_judge() -> None:
    """Types are the protocol's, values the contract's: an unknown state string stays."""
    wire = encode_task(Task("t1"))
    wire["state"] = "zombie"
    assert decode_task(wire).state == "zombie"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("id", 7, "task field 'id' is a str"),
        ("deps", "t2", "'deps' is a list of strings"),
        ("deps", [1], "'deps' is a list of strings"),
        ("seq", "3", "task field 'seq' is an integer"),
        ("seq", False, "task field 'seq' is an integer"),
        ("lease", {"token": "x", "fence": 1.0, "until": None}, "'fence' is an integer"),
        ("lease", {"token": "x", "fence": 1}, "a lease lacks until"),
        ("lease", [], "a lease is a JSON object"),
    ],
)
def test_a_task_field_of_the_wrong_type_is_refused(field: str, value: object, message: str) -> None:
    """A task a child wrote with a field of the wrong type is a TypeError naming the field."""
    wire = encode_task(Task("t1"))
    wire[field] = value
    with pytest.raises(TypeError, match=message):
        decode_task(wire)


def test_a_task_without_a_field_is_refused() -> None:
    """A missing field is named."""
    wire = encode_task(Task("t1"))
    del wire["owner"]
    with pytest.raises(TypeError, match="a task lacks owner"):
        decode_task(wire)


def test_a_request_is_one_json_line() -> None:
    """A request is one compact JSON object with its id and op, ending in a newline."""
    line = request_line(3, "claim", {"task": "t1", "agent": "a1", "ttl": 5000})
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line) == {"id": 3, "op": "claim", "task": "t1", "agent": "a1", "ttl": 5000}


def test_a_good_answer_is_read() -> None:
    """An answer to the right id with a boolean ok comes back as its object."""
    assert read_answer(b'{"id": 4, "ok": true, "storage": "/tmp/b"}\n', 4, "init") == {
        "id": 4,
        "ok": True,
        "storage": "/tmp/b",
    }


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"", "closed its stdout"),
        (b"not json\n", "not JSON"),
        (b"\xff\xfe{}\n", "not UTF-8"),
        (b"[1, 2]\n", "an answer is a JSON object"),
        (b'{"id": 5, "ok": true}\n', "answers id 5, not 4"),
        (b'{"id": true, "ok": true}\n', "answers id True, not 4"),
        (b'{"ok": true}\n', "answers id None, not 4"),
        (b'{"id": 4, "ok": "yes"}\n', "'ok' is true or false"),
        (b'{"id": 4, "ok": false}\n', "a failed answer has a string 'error' and 'message'"),
        (b'{"id": 4, "ok": false, "error": "taken"}\n', "a string 'error' and 'message'"),
        (b'{"id": 4, "ok": true, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n", "nested deeper"),
    ],
)
def test_a_broken_answer_is_a_protocol_error_naming_the_op(line: bytes, reason: str) -> None:
    """Every malformed answer is a ProtocolError (an infrastructure fault) naming the op."""
    with pytest.raises(ProtocolError, match=reason) as caught:
        read_answer(line, 4, "claim")
    assert caught.value.op == "claim"
    assert "'claim'" in str(caught.value)


def test_brackets_inside_strings_are_no_nesting() -> None:
    """A token full of brackets is a string, not a deep answer."""
    token = "[{" * 100
    line = json.dumps({"id": 1, "ok": True, "token": token}).encode() + b"\n"
    assert read_answer(line, 1, "claim")["token"] == token


def test_an_oversized_line_is_refused_and_shown_cut() -> None:
    """A line over the limit is refused, and the report shows at most 200 characters of it."""
    line = b'{"id": 1, "ok": true, "pad": "' + b"x" * LONGEST_LINE + b'"}\n'
    with pytest.raises(ProtocolError, match="a line over") as caught:
        read_answer(line, 1, "list")
    assert len(caught.value.line) <= 200 + len("... (200 characters)")


def test_a_long_bad_line_is_shown_cut_to_two_hundred_characters() -> None:
    """The offending line in a report is cut to 200 characters, with its length said."""
    with pytest.raises(ProtocolError) as caught:
        read_answer(b"y" * 1000 + b"\n", 1, "list")
    assert caught.value.line == "y" * 200 + "... (1000 characters)"


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("not_found", NotFoundError),
        ("taken", TakenError),
        ("lease_lost", LeaseLostError),
        ("invalid", ValueError),
        ("unsupported", UnsupportedOp),
    ],
)
def test_an_error_code_is_the_exception_a_python_board_raises(
    code: str, kind: type[Exception]
) -> None:
    """Each error code maps to the sentinel (or ValueError) a Python board would raise."""
    error = error_of({"id": 1, "ok": False, "error": code, "message": "why"}, "claim")
    assert type(error) is kind
    assert str(error) == "why"


def test_an_unknown_error_code_is_a_protocol_error() -> None:
    """An error code the protocol does not name is an infrastructure fault, never a verdict."""
    with pytest.raises(ProtocolError, match="error code 'oops' is none of"):
        error_of({"id": 1, "ok": False, "error": "oops", "message": ""}, "release")
