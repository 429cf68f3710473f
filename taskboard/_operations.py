"""The one table of board operations (SPEC 1 and 3): each Board method, how it is called,
whether a board must have it, and its names in the model, on the wire and in SPEC.

Whatever lists operations reads :data:`OPERATIONS`: the wrapper classes of the driver and of
the fault injector (one per set of optional operations a board has), the session's
``supports``, the machine's token operations, the protocol board and server, the CLI's
coverage advice and the model's clauses. An optional operation is then a row here, an
:class:`Op` member, the Protocol that declares it (``taskboard._contract``), and the model's
semantics for it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal, Protocol

from taskboard._contract import Board, ClaimRequest, FailingBoard, RenewingBoard, State

__all__ = [
    "ACTS_WITH_TOKEN",
    "BOARD_METHODS",
    "BY_METHOD",
    "BY_OP",
    "CORE_METHODS",
    "ENDS_LEASE",
    "GRANTS_LEASE",
    "OPERATIONS",
    "OPTIONAL_NAMES",
    "OPTIONAL_OPERATIONS",
    "Argument",
    "BoardOperation",
    "CallArguments",
    "Invoke",
    "Op",
    "Returns",
    "operation",
    "operations_of",
]


class Op(enum.StrEnum):
    """The board operations the model judges (``list_tasks`` is read after every step)."""

    CLAIM = "claim"
    RENEW = "renew"
    RELEASE = "release"
    COMPLETE = "complete"
    FAIL = "fail"


#: An argument of a Board method, named as :class:`~taskboard.model.Call` names its value:
#: ``request`` is the ``ClaimRequest`` of the call's ``ttl``.
Argument = Literal["task_id", "agent", "token", "request"]
#: What a Board method returns: the snapshot, the task as it stands afterwards, or nothing.
Returns = Literal["tasks", "task", "nothing"]


class CallArguments(Protocol):
    """The values an operation is called with (a :class:`~taskboard.model.Call` has them)."""

    @property
    def task_id(self) -> str: ...
    @property
    def agent(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def ttl(self) -> timedelta: ...


#: Calls ``board``'s method for an operation with the arguments ``call`` holds.
Invoke = Callable[[Any, CallArguments], Any]


@dataclass(frozen=True)
class BoardOperation:
    """One Board method: a row of :data:`OPERATIONS`.

    ``arguments`` are positional, in order: none (a read), or the task id, then the agent or
    the token, then, for an operation that sets a lease's length, the request.
    ``declared_by`` is the Protocol that declares the method: :class:`~taskboard.Board` for
    the methods every board has, an extension (``RenewingBoard``) for an optional one.
    ``grants_lease``: a success returns the task under a lease, new or extended, whose
    ``until`` the checker keeps; ``ends_lease``: a success ends the lease its token names,
    leaving the task ``leaves``. ``invoke(board, call)`` makes the call.

    Raises:
        ValueError: ``arguments`` and ``returns`` have a shape :func:`_invoker` cannot call.
    """

    method: str
    op: Op | None
    arguments: tuple[Argument, ...]
    returns: Returns
    declared_by: type
    #: The op's name in the board protocol (SPEC 10).
    protocol_op: str
    #: The SPEC section that says what it does.
    spec: str
    grants_lease: bool = False
    ends_lease: bool = False
    #: The state a success leaves the task in; ``None`` for a read.
    leaves: State | None = None
    invoke: Invoke = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "invoke", _invoker(self.method, self.arguments, self.returns))

    @property
    def name(self) -> str:
        """What the model, traces and rules call it: the :class:`Op` value, or the method."""
        return self.method if self.op is None else self.op.value

    @property
    def optional(self) -> bool:
        """True when a board may lack it (its Protocol extends Board)."""
        return self.declared_by is not Board

    @property
    def token(self) -> bool:
        """True when it acts with a lease token (not as an agent)."""
        return "token" in self.arguments

    @property
    def request(self) -> bool:
        """True when it takes a ``ClaimRequest``, made of the call's ``ttl``."""
        return "request" in self.arguments


def _invoker(method: str, arguments: tuple[Argument, ...], returns: Returns) -> Invoke:
    """The function that calls ``method`` with ``arguments`` taken from a call, and returns
    what it returned, or ``None`` for a method that ``returns`` nothing (whatever a board's
    method gave back).

    Raises:
        ValueError: no closure below has that shape of arguments and result.
    """
    # One closure per shape, each passing the call's fields positionally, as a hand-written
    # ``board.claim(...)`` does: unpacking ``*args`` instead makes the dispatch of a claim
    # half as slow again, and Call.invoke is on the path of every step.
    shape = (arguments, returns)
    if shape == ((), "tasks"):
        return lambda board, call: getattr(board, method)()
    if shape == (("task_id", "agent", "request"), "task"):
        return lambda board, call: getattr(board, method)(
            call.task_id, call.agent, ClaimRequest(call.ttl)
        )
    if shape == (("task_id", "token", "request"), "task"):
        return lambda board, call: getattr(board, method)(
            call.task_id, call.token, ClaimRequest(call.ttl)
        )
    if shape == (("task_id", "agent"), "nothing"):

        def as_agent(board: Any, call: CallArguments) -> None:
            getattr(board, method)(call.task_id, call.agent)

        return as_agent
    if shape == (("task_id", "token"), "nothing"):

        def with_token(board: Any, call: CallArguments) -> None:
            getattr(board, method)(call.task_id, call.token)

        return with_token
    raise ValueError(f"{method}: no invoker for arguments {arguments} returning {returns!r}")


#: Every Board method, the ones every board has first (the order of generated draws and of
#: the names in messages).
OPERATIONS: tuple[BoardOperation, ...] = (
    BoardOperation("list_tasks", None, (), "tasks", Board, protocol_op="list", spec="3.7"),
    BoardOperation(
        "claim",
        Op.CLAIM,
        ("task_id", "agent", "request"),
        "task",
        Board,
        protocol_op="claim",
        spec="3.1",
        grants_lease=True,
        leaves=State.CLAIMED,
    ),
    BoardOperation(
        "release",
        Op.RELEASE,
        ("task_id", "token"),
        "nothing",
        Board,
        protocol_op="release",
        spec="3.2",
        ends_lease=True,
        leaves=State.OPEN,
    ),
    BoardOperation(
        "complete",
        Op.COMPLETE,
        ("task_id", "token"),
        "nothing",
        Board,
        protocol_op="complete",
        spec="3.3",
        ends_lease=True,
        leaves=State.DONE,
    ),
    BoardOperation(
        "renew",
        Op.RENEW,
        ("task_id", "token", "request"),
        "task",
        RenewingBoard,
        protocol_op="renew",
        spec="3.5",
        grants_lease=True,
        leaves=State.CLAIMED,
    ),
    BoardOperation(
        "fail",
        Op.FAIL,
        ("task_id", "token"),
        "nothing",
        FailingBoard,
        protocol_op="fail",
        spec="3.6",
        ends_lease=True,
        leaves=State.FAILED,
    ),
)

#: Each row by its Board method.
BY_METHOD: dict[str, BoardOperation] = {row.method: row for row in OPERATIONS}
#: Each judged row by its :class:`Op`.
BY_OP: dict[Op, BoardOperation] = {row.op: row for row in OPERATIONS if row.op is not None}
#: The methods every board has (the ``Board`` Protocol's own).
CORE_METHODS: tuple[str, ...] = tuple(row.method for row in OPERATIONS if not row.optional)
#: Those and the optional extensions' methods.
BOARD_METHODS: tuple[str, ...] = tuple(row.method for row in OPERATIONS)
#: The operations a board may lack, and their names.
OPTIONAL_OPERATIONS: tuple[BoardOperation, ...] = tuple(row for row in OPERATIONS if row.optional)
OPTIONAL_NAMES: frozenset[str] = frozenset(row.name for row in OPTIONAL_OPERATIONS)
#: The judged operations that act with a token, that grant a lease, that end one.
ACTS_WITH_TOKEN: frozenset[Op] = frozenset(op for op, row in BY_OP.items() if row.token)
GRANTS_LEASE: frozenset[Op] = frozenset(op for op, row in BY_OP.items() if row.grants_lease)
ENDS_LEASE: frozenset[Op] = frozenset(op for op, row in BY_OP.items() if row.ends_lease)
_BY_NAME = {**BY_METHOD, **{row.name: row for row in OPERATIONS}}


def operation(name: str) -> BoardOperation:
    """The row of the operation ``name`` (its :class:`Op` value or its method).

    Raises:
        ValueError: no operation is called ``name``.
    """
    row = _BY_NAME.get(name)
    if row is None:
        known = ", ".join(r.name for r in OPERATIONS)
        raise ValueError(f"{name!r} is no board operation (known: {known})")
    return row


def operations_of(board: object) -> frozenset[str]:
    """The names of the optional operations ``board`` (or a board class) has a method for.

    Read once per board: a wrapper gets the methods ``board`` has, so that
    ``isinstance(wrapper, RenewingBoard)`` answers as for ``board``, and nothing asks again
    per call (a runtime Protocol check costs more than the call it guards).
    """
    return frozenset(
        row.name for row in OPTIONAL_OPERATIONS if callable(getattr(board, row.method, None))
    )
