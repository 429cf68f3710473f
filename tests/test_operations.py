"""The one table of board operations: it agrees with the contract's Protocols, and the driver,
the fault injector, the session, the protocol board and server, the CLI and the machine's
strategies all read it."""

from __future__ import annotations

import inspect
import io
import itertools
import json
import sys
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import (
    Board,
    ClaimRequest,
    Clock,
    FailingBoard,
    ManualClock,
    RenewingBoard,
    Task,
)
from taskboard._cli import _summary
from taskboard._driver import DirectDriver, driven
from taskboard._fuzz import FuzzOptions, fuzz
from taskboard._operations import (
    BOARD_METHODS,
    BY_OP,
    CORE_METHODS,
    OPERATIONS,
    OPTIONAL_NAMES,
    BoardOperation,
    operation,
    operations_of,
)
from taskboard.faults import inject_faults
from taskboard.hosts.memory import MemoryBoard
from taskboard.model import Call, Op
from taskboard.protocol import exec_board, serve
from taskboard.stateful import BoardMachine
from taskboard.stateful._generation import AT_EXPIRY, TOKEN_OPS
from taskboard.stateful._session import ExampleStats, on_example_end

#: Every set of optional operations a board may have.
SHAPES = [
    frozenset(chosen)
    for size in range(len(OPTIONAL_NAMES) + 1)
    for chosen in itertools.combinations(sorted(OPTIONAL_NAMES), size)
]


def board_with(optional: frozenset[str]) -> type:
    """A class of boards over MemoryBoard with the core methods and exactly ``optional``."""

    def delegate(method: str) -> Any:
        def call(self: Any, *args: Any) -> Any:
            return getattr(self.inner, method)(*args)

        call.__name__ = method
        return call

    def init(self: Any, tasks: Sequence[Task], clock: Clock) -> None:
        self.inner = MemoryBoard(tasks, clock)

    methods = {m: delegate(m) for m in CORE_METHODS}
    methods.update({operation(name).method: delegate(operation(name).method) for name in optional})
    return type("Board" + "".join(sorted(optional)).title(), (), {"__init__": init, **methods})


class RenewOnlyBoard(board_with(frozenset({"renew"}))):  # type: ignore[misc]
    """MemoryBoard without fail."""


def fresh(cls: type) -> Any:
    return cls([Task("t1"), Task("t2")], ManualClock())


# -- the table itself ------------------------------------------------------------------------


def test_every_op_has_a_row_and_every_row_names_its_op() -> None:
    """The table holds one row per Op, and list_tasks, the one read the model does not judge."""
    assert set(BY_OP) == set(Op)
    assert [row.method for row in OPERATIONS if row.op is None] == ["list_tasks"]
    assert all(row.op is op and row.name == op.value for op, row in BY_OP.items())
    assert (*CORE_METHODS, "renew", "fail") == BOARD_METHODS


@pytest.mark.parametrize("row", OPERATIONS, ids=lambda row: row.method)
def test_each_row_is_the_method_its_protocol_declares(row: BoardOperation) -> None:
    """Each row's method is declared by its Protocol (not inherited), with the row's
    arguments in order, and the row is optional exactly when that Protocol extends Board."""
    assert row.method in vars(row.declared_by)
    signature = inspect.signature(getattr(row.declared_by, row.method))
    assert tuple(signature.parameters)[1:] == row.arguments
    returned = signature.return_annotation
    assert {"Task": "task", "None": "nothing", "Sequence[Task]": "tasks"}[returned] == row.returns
    assert row.optional == (row.declared_by is not Board)
    assert (row.declared_by in (RenewingBoard, FailingBoard)) == row.optional


def test_the_machine_draws_the_token_operations_in_the_tables_order() -> None:
    """TOKEN_OPS, a rule's argument strategy, is the table's token operations in the order
    they were drawn before the table: the catch rates stay the same."""
    assert TOKEN_OPS == ("release", "complete", "renew", "fail")
    assert {name for name in AT_EXPIRY if name != "nothing"} == set(Op)


def test_every_judged_operation_grants_or_ends_a_lease_never_both() -> None:
    """The session's one-live-holder check records a lease as given up only after an
    operation that ends it: each judged operation today grants one or ends one."""
    for row in BY_OP.values():
        assert row.grants_lease != row.ends_lease, row


def test_an_unknown_operation_is_named_with_the_known_ones() -> None:
    """operation() finds a row by Op value or method, and refuses any other name."""
    assert operation("claim").op is Op.CLAIM
    assert operation("list_tasks").protocol_op == "list"
    with pytest.raises(ValueError, match=r"'nope' is no board operation .*renew"):
        operation("nope")


def test_a_row_of_arguments_no_invoker_can_pass_is_refused() -> None:
    """A row whose arguments have no invoker is refused when the table is built, not at its
    first call."""
    with pytest.raises(ValueError, match="no invoker"):
        BoardOperation("wave", None, ("agent",), "nothing", Board, protocol_op="wave", spec="0")


# -- calling an operation ----------------------------------------------------------------------


class Recorder:
    """A board that records each call and returns a task from every method."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, method: str) -> Any:
        def record(*args: Any) -> Task:
            self.calls.append((method, args))
            return Task("t1")

        return record


@pytest.mark.parametrize("op", list(Op))
def test_a_call_passes_its_fields_as_its_methods_arguments(op: Op) -> None:
    """Call.invoke calls the op's method with the task, then the agent or the token, then the
    ClaimRequest of the ttl; an op that returns nothing returns None whatever the board did."""
    board = Recorder()
    call = Call(op, "t1", agent="a1", token="tok", ttl=timedelta(seconds=3))
    returned = call.invoke(board)
    expected = {
        Op.CLAIM: ("t1", "a1", ClaimRequest(timedelta(seconds=3))),
        Op.RENEW: ("t1", "tok", ClaimRequest(timedelta(seconds=3))),
    }.get(op, ("t1", "tok"))
    assert board.calls == [(op.value, expected)]
    assert returned == (Task("t1") if op in (Op.CLAIM, Op.RENEW) else None)


# -- wrappers with exactly the board's optional methods -------------------------------------


def wrap_driven(board: Any) -> Any:
    return driven(board, DirectDriver(None))


def wrap_faulty(board: Any) -> Any:
    return inject_faults(board, rate=0)


@pytest.mark.parametrize("wrap", [wrap_driven, wrap_faulty])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "+".join(sorted(shape)) or "core")
def test_a_wrapper_has_exactly_the_optional_methods_of_its_board(
    wrap: Any, shape: frozenset[str]
) -> None:
    """The driven board and the fault injector's wrapper have renew and fail exactly when
    the board does, so isinstance answers as for the board; one class serves every board of
    that shape."""
    cls = board_with(shape)
    wrapper = wrap(fresh(cls))
    assert operations_of(wrapper) == shape
    assert isinstance(wrapper, Board)
    assert isinstance(wrapper, RenewingBoard) == ("renew" in shape)
    assert isinstance(wrapper, FailingBoard) == ("fail" in shape)
    assert not any(hasattr(wrapper, name) for name in OPTIONAL_NAMES - shape)
    assert type(wrap(fresh(cls))) is type(wrapper)
    got = wrapper.claim("t1", "a1", ClaimRequest())
    assert got.lease is not None
    if isinstance(wrapper, RenewingBoard):
        assert wrapper.renew("t1", got.lease.token, ClaimRequest()).owner == "a1"


def test_a_driven_boards_class_is_named_after_its_optional_methods() -> None:
    """Driven, DrivenWithRenew, DrivenWithFail, DrivenWithRenewAndFail: the names the
    hand-written classes had."""
    names = {shape: type(wrap_driven(fresh(board_with(shape)))).__name__ for shape in SHAPES}
    assert sorted(names.values()) == [
        "Driven",
        "DrivenWithFail",
        "DrivenWithRenew",
        "DrivenWithRenewAndFail",
    ]


def test_operations_of_counts_only_callable_methods() -> None:
    """A class or a board has an optional operation when it has a callable method of that
    name; an attribute that is not callable does not count."""
    assert operations_of(MemoryBoard) == OPTIONAL_NAMES
    assert operations_of(fresh(board_with(frozenset()))) == frozenset()

    class NotCallable(board_with(frozenset({"fail"}))):  # type: ignore[misc]
        renew = None

    assert operations_of(NotCallable) == {"fail"}


# -- the session and the fuzzer ------------------------------------------------------------------


class RenewOnlyMachine(BoardMachine):
    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        board: Board = RenewOnlyBoard(tasks, clock)
        return board


def test_a_board_without_fail_is_never_called_with_fail() -> None:
    """The session reads the board's optional operations from the table: the examples report
    renew alone, and the machine renews but never fails a task."""
    heard: list[ExampleStats] = []
    with on_example_end(heard.append):
        run_state_machine_as_test(
            RenewOnlyMachine, settings=settings(max_examples=30, database=None, deadline=None)
        )
    assert {stats.operations for stats in heard} == {frozenset({"renew"})}
    ops = {op for stats in heard for (_, op, _) in stats.transitions}
    assert any(op.startswith("renew") for op in ops)
    assert not any(op.startswith("fail") for op in ops)


def test_a_board_without_fail_gets_advice_about_renews_but_not_failed_tasks(
    tmp_path: Path,
) -> None:
    """The fuzz summary leaves out the one key transition only fail reaches (the claim of a
    failed task), keeps the renews, and says why."""
    options = FuzzOptions(
        seed=1, database=str(tmp_path / "db"), trace_dir=str(tmp_path / "traces")
    ).replace(max_examples=20, mode="sequential")
    report = fuzz("tests.test_operations:RenewOnlyBoard", options, progress=None)
    assert report.operations == frozenset({"renew"})
    text = _summary(report).split("key transitions:", 1)[1]
    assert "claim of a failed task" not in text
    assert "renew of a live lease" in text
    assert "the board has no fail(): the transitions that need it are left out" in text


# -- the board protocol ------------------------------------------------------------------------


def served(shape: frozenset[str]) -> list[str]:
    """What a server of MemoryBoard declaring the optional methods of ``shape`` serves."""
    return [
        sys.executable,
        "-c",
        "from taskboard.protocol import serve; "
        "from taskboard.hosts.memory import MemoryBoard; "
        f"serve(MemoryBoard, shape=type('Shape', (), {{m: print for m in {sorted(shape)!r}}}))",
    ]


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    boards: list[Any] = []
    yield boards
    for board in boards:
        board.close()


def test_a_child_that_declares_only_renew_is_a_board_without_fail(opened: list[Any]) -> None:
    """exec_board gives a child's board exactly the optional methods its hello declared, and
    calls them over the wire with the table's arguments."""
    board = exec_board(served(frozenset({"renew"})), [Task("t1")], ManualClock())
    opened.append(board)
    assert isinstance(board, RenewingBoard)
    assert not isinstance(board, FailingBoard)
    got = board.claim("t1", "a1", ClaimRequest(timedelta(milliseconds=5)))
    assert got.lease is not None
    renewed = board.renew("t1", got.lease.token, ClaimRequest(timedelta(0)))
    assert renewed.lease is not None
    assert renewed.lease.until is None
    assert board.release("t1", got.lease.token) is None  # type: ignore[func-returns-value]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: "+".join(sorted(shape)) or "core")
def test_the_server_declares_the_optional_methods_of_its_shape(shape: frozenset[str]) -> None:
    """serve()'s hello lists the optional ops its shape has, in the table's order."""
    written = io.BytesIO()
    hello = json.dumps({"id": 1, "op": "hello", "protocol": 1}).encode() + b"\n"
    serve(MemoryBoard, shape=board_with(shape), stdin=io.BytesIO(hello), stdout=written)
    declared = json.loads(written.getvalue())["ops"]
    assert declared == [name for name in ("renew", "fail") if name in shape]
