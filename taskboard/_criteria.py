"""The two concurrency criteria, run with real threads from one start line (SPEC section 5)."""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar, cast

from taskboard._contract import Board, ClaimRequest
from taskboard._driver import LoopDriver, driven, is_async_board
from taskboard._errors import (
    BoardError,
    CriterionError,
    CriterionVerdict,
    LeaseLostError,
    TakenError,
)
from taskboard._race import Lane, Preset, race_on_threads
from taskboard.model._calls import Call, Op

__all__ = ["DEFAULT_TIMEOUT", "SETUP_AGENT", "concurrent_claim", "duplicate_token_submit"]

#: Seconds a criterion waits for its participants before calling them an infrastructure fault.
DEFAULT_TIMEOUT = 30.0

#: The agent name :func:`duplicate_token_submit` claims the task with before the race.
SETUP_AGENT = "duplicate-token-submit"

_INFRA_HINT = (
    "Those are not contract outcomes, so the count cannot be judged (a fault is never "
    "counted as a loser): fix what the exceptions below point at (the storage, the "
    "connection, or the board's code) and run again; if the board is only slow, pass a "
    "larger timeout."
)


@dataclass(frozen=True)
class _Outcome:
    """What one participant did: returned ``value``, or failed (raised, or timed out)."""

    label: str
    value: object = None
    failure: Exception | None = None
    timed_out: bool = False


def _outcome(label: str, lane: Lane, timeout: float) -> _Outcome:
    if not lane.finished:
        late = TimeoutError(
            f"{label} did not return within the {timeout:g} s timeout; it is still running "
            "(in a daemon thread) and whatever it does later is ignored"
        )
        return _Outcome(label, failure=late, timed_out=True)
    if lane.crash is not None:  # SystemExit & co., which a thread would end on silently
        crash = lane.crash
        if not isinstance(crash, Exception):
            wrapped = RuntimeError(f"{label} raised {type(crash).__name__}: {crash}")
            wrapped.__cause__ = crash
            crash = wrapped
        return _Outcome(label, failure=crash)
    (made,) = lane.made
    return _Outcome(label, made.value, made.error)


def _race(
    calls: Sequence[tuple[str, Board, Call]],
    timeout: float,
    deadline: float | None = None,
) -> list[_Outcome]:
    """Make every call in its own daemon thread, all from one start line (see
    :func:`taskboard._race.race_on_threads`).

    Each call must return before ``deadline`` (a ``time.monotonic()`` value), or
    ``timeout`` seconds after the start line when ``deadline`` is None; a call
    that does not is a :class:`TimeoutError` and is left running.
    """
    try:
        lanes = race_on_threads(
            [board for _, board, _ in calls],
            [[Preset(call)] for _, _, call in calls],
            timeout=timeout,
            deadline=deadline,
            names=[f"taskboard: {label}" for label, _, _ in calls],
        )
        unstarted = next((lane.crash for lane in lanes if not lane.started), None)
        if unstarted is not None:
            raise unstarted
    except RuntimeError as exc:  # BrokenBarrierError is a RuntimeError, as is a failed start
        raise CriterionError(
            "infrastructure fault",
            f"could not bring {len(calls)} participant threads to the start line within "
            f"{timeout:g} s ({type(exc).__name__}: {exc}); the machine running the criterion "
            "is out of threads or overloaded: free resources or use fewer participants.",
            [exc],
        ) from None
    return [
        _outcome(label, lane, timeout) for (label, _, _), lane in zip(calls, lanes, strict=True)
    ]


def _callers(
    board: Board,
    clients: Sequence[Board] | None,
    count: int,
    who: str,
    task_id: str,
    method: str,
) -> list[tuple[str, Board]]:
    """Who each participant calls, and how a report names it: ``board``, or its own client."""
    if clients is None:
        return [("board", board)] * count
    if isinstance(clients, str) or not isinstance(clients, Sequence):
        raise TypeError(f"clients must be a sequence of boards, one per {who}, got {clients!r}")
    if len(clients) != count:
        raise ValueError(
            f"clients must hold one client per {who}: {count} {who}s, {len(clients)} clients"
        )
    for client in clients:
        _check_target(client, task_id, method)
    return [(f"clients[{i}]", client) for i, client in enumerate(clients)]


def _verdict(errors: Sequence[Exception]) -> CriterionVerdict:
    """Contract errors (and misuse ValueErrors) are inconclusive; anything else is a fault."""
    if all(isinstance(exc, BoardError | ValueError) for exc in errors):
        return "inconclusive"
    return "infrastructure fault"


def _count(n: int, noun: str, plural: str = "") -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(f"timeout must be a number of seconds (int or float), got {timeout!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    return float(timeout)


def _check_target(board: object, task_id: object, *methods: str) -> None:
    if not isinstance(task_id, str):
        raise TypeError(f"task_id must be a str, got {task_id!r}")
    for name in methods:
        if not callable(getattr(board, name, None)):
            raise TypeError(
                f"board must be a taskboard.Board with a {name}() method, got {board!r}"
            )


@dataclass
class _Tally:
    winners: int = 0
    losers: int = 0
    timeouts: int = 0
    others: list[Exception] = field(default_factory=list)


def _collect(outcomes: Sequence[_Outcome], loser: type[BoardError]) -> _Tally:
    """Count winners and expected losers; collect every other exception, noting who raised it."""
    tally = _Tally()
    for out in outcomes:
        failure = out.failure
        if failure is None:
            tally.winners += 1
        elif isinstance(failure, loser):
            tally.losers += 1
        else:
            if out.timed_out:
                tally.timeouts += 1
            else:
                failure.add_note(f"taskboard: raised by {out.label}")
            tally.others.append(failure)
    return tally


def _timeouts(tally: _Tally, seconds: float) -> str:
    return f" ({tally.timeouts} of them timed out after {seconds:g} s)" if tally.timeouts else ""


Criterion = TypeVar("Criterion", bound=Callable[..., int])


def _drives_async_boards(criterion: Criterion) -> Criterion:
    """Run a criterion on an async board through an event loop of the criterion's own:
    every participant's coroutine runs there, so they interleave at their ``await`` points."""
    signature = inspect.signature(criterion)

    @functools.wraps(criterion)
    def run(*args: Any, **kwargs: Any) -> int:
        arguments = signature.bind(*args, **kwargs)
        board = arguments.arguments["board"]
        clients = arguments.arguments.get("clients")
        if not is_async_board(board):
            return criterion(*args, **kwargs)
        driver = LoopDriver(None)
        arguments.arguments["board"] = driven(board, driver)
        if isinstance(clients, Sequence) and not isinstance(clients, str):
            arguments.arguments["clients"] = [driven(client, driver) for client in clients]
        try:
            return criterion(*arguments.args, **arguments.kwargs)
        finally:
            driver.close()

    return cast(Criterion, run)


@_drives_async_boards
def concurrent_claim(
    board: Board,
    task_id: str,
    agents: Sequence[str],
    ttl: timedelta = timedelta(0),
    *,
    timeout: float = DEFAULT_TIMEOUT,
    clients: Sequence[Board] | None = None,
) -> int:
    """Let every agent claim the same task at once and count the winners.

    One daemon thread per agent calls ``board.claim(task_id, agent,
    ClaimRequest(ttl))``; all are released from one :class:`threading.Barrier`.
    An atomic claim has exactly one winner; a read-check-write claim lets
    several agents read the same ``OPEN`` and all win. Every loser must raise
    :class:`~taskboard.TakenError`. The caller asserts the count::

        assert concurrent_claim(board, "t1", ["a"] * 8) == 1

    The task should exist, not be ``DONE``, have every dependency ``DONE`` and
    no live lease; the criterion does not release the winner's claim.

    An async board (coroutine methods) is driven on an event loop the criterion
    starts and stops, so its client must bind to a loop on first use.

    Args:
        board: The board under test.
        task_id: The task every agent claims.
        agents: The agent names, one thread each; names may repeat (agents are
            not identities, tokens are).
        ttl: The lease length every agent asks for (``ClaimRequest(ttl)``).
        timeout: Seconds, counted from the start line, within which every
            claim must return.
        clients: SPEC 8: one client of ``board``'s storage per agent (each with
            its own connection, as another process would open it); agent ``i``
            claims through ``clients[i]``. ``None``: every agent claims through
            ``board``. A claim that is atomic only inside one client object
            passes with one board and fails with clients.

    Returns:
        The number of agents whose claim returned (0 or more than 1 is a
        contract violation for the caller to report; this function does not raise
        for it).

    Raises:
        CriterionError: Some claim neither returned nor raised ``TakenError``;
            it carries every such exception (the timeouts as
            :class:`TimeoutError`). Its ``verdict`` is ``"infrastructure fault"``
            when any of them is not a :class:`~taskboard.BoardError` or
            :class:`ValueError` (a ``ConnectionError``, a driver error, a claim
            still running after ``timeout`` seconds), else ``"inconclusive"``
            (e.g. ``BlockedError``: the agents never reached the contention).
            Also raised, as an infrastructure fault, when the threads cannot be
            started.
        TypeError: ``agents`` is a string or holds a non-string, ``task_id`` is
            not a string, ``board`` (or a client) has no ``claim``, ``ttl`` is not
            a timedelta, or ``timeout`` is not a number.
        ValueError: ``agents`` is empty or holds an empty name, ``clients`` does
            not hold one client per agent, ``ttl`` is negative, or ``timeout`` is
            not positive and finite.
    """
    _check_target(board, task_id, "claim")
    if isinstance(agents, str) or not isinstance(agents, Sequence):
        raise TypeError(f"agents must be a sequence of agent names (str), got {agents!r}")
    agents = list(agents)
    if not agents:
        raise ValueError("agents must name at least one agent; a race needs participants")
    for agent in agents:
        if not isinstance(agent, str):
            raise TypeError(f"every agent name must be a str, got {agent!r} in {agents!r}")
        if not agent:
            raise ValueError(f"agent names must not be empty (claim rejects them), got {agents!r}")
    request = ClaimRequest(ttl)
    seconds = _check_timeout(timeout)
    callers = _callers(board, clients, len(agents), "agent", task_id, "claim")

    calls = [
        (
            f"agent #{i} {where}.claim({task_id!r}, {agent!r}, {request!r})",
            caller,
            Call(Op.CLAIM, task_id, agent=agent, ttl=ttl),
        )
        for i, (agent, (where, caller)) in enumerate(zip(agents, callers, strict=True))
    ]
    tally = _collect(_race(calls, seconds), TakenError)
    if not tally.others:
        return tally.winners
    verdict = _verdict(tally.others)
    hint = (
        _INFRA_HINT
        if verdict == "infrastructure fault"
        else "The agents were rejected with contract errors other than TakenError, so they "
        "never reached the contention being judged: run the criterion on a task that exists, "
        "is not DONE, has every dependency DONE and no live lease."
    )
    raise CriterionError(
        verdict,
        f"concurrent_claim({task_id!r}) with {_count(len(agents), 'agent')} from one start "
        f"line saw {_count(tally.winners, 'winner')}, {_count(tally.losers, 'loser')} "
        f"raising TakenError and {_count(len(tally.others), 'other outcome')}"
        f"{_timeouts(tally, seconds)}. {hint}",
        tally.others,
    )


@_drives_async_boards
def duplicate_token_submit(
    board: Board,
    task_id: str,
    workers: int,
    ttl: timedelta = timedelta(0),
    *,
    timeout: float = DEFAULT_TIMEOUT,
    clients: Sequence[Board] | None = None,
) -> int:
    """Claim the task once, then let every worker complete it with that one token at once.

    The criterion claims the task itself as agent ``"duplicate-token-submit"``
    with ``ClaimRequest(ttl)`` (the board mints the token), then one daemon
    thread per worker calls ``board.complete(task_id, token)`` with that same
    token, all released from one :class:`threading.Barrier`. An atomic
    complete has exactly one success; a complete that checks the token and
    then writes lets several submitters pass the check. Every other submitter
    must raise :class:`~taskboard.LeaseLostError`. The caller asserts the count::

        assert duplicate_token_submit(board, "t1", 8) == 1

    The task should exist, not be ``DONE``, have every dependency ``DONE`` and
    no live lease; on success it is left ``DONE``.

    An async board (coroutine methods) is driven on an event loop the criterion
    starts and stops, so its client must bind to a loop on first use.

    Args:
        board: The board under test.
        task_id: The task to claim and complete.
        workers: How many threads submit the token (at least 1).
        ttl: The lease length of the set-up claim (``ClaimRequest(ttl)``).
        timeout: Seconds the whole criterion may take, counted from the start
            of the set-up claim: the set-up claim and every submitter must
            return before then.
        clients: SPEC 8: one client of ``board``'s storage per worker; worker
            ``i`` completes through ``clients[i]`` (the set-up claim runs on
            ``board``). ``None``: every worker completes through ``board``.

    Returns:
        The number of submitters whose complete returned (0 or more than 1 is a
        contract violation for the caller to report; this function does not raise
        for it).

    Raises:
        CriterionError: The set-up claim raised, did not return a task with a
            lease token, or did not return in time (then it carries that one
            exception and no submitter ran); or some submitter neither returned
            nor raised ``LeaseLostError`` (then it carries every such exception,
            the timeouts as :class:`TimeoutError`). Its ``verdict`` is
            ``"infrastructure fault"`` when any carried exception is not a
            :class:`~taskboard.BoardError` or :class:`ValueError` (a
            ``ConnectionError``, a driver error, a call still running at the
            deadline, a claim result without a lease), else ``"inconclusive"``
            (e.g. ``TerminalError`` from the set-up claim of a ``DONE`` task).
            Also raised, as an infrastructure fault, when the threads cannot be
            started.
        TypeError: ``workers`` is not an int, ``task_id`` is not a string,
            ``board`` lacks ``claim`` or ``complete``, ``ttl`` is not a timedelta,
            or ``timeout`` is not a number.
        ValueError: ``workers`` is less than 1, ``clients`` does not hold one
            client per worker, ``ttl`` is negative, or ``timeout`` is not
            positive and finite.
    """
    _check_target(board, task_id, "claim", "complete")
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise TypeError(f"workers must be an int, got {workers!r}")
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    callers = _callers(board, clients, workers, "worker", task_id, "complete")
    request = ClaimRequest(ttl)
    seconds = _check_timeout(timeout)
    deadline = time.monotonic() + seconds

    claim_label = f"the set-up board.claim({task_id!r}, {SETUP_AGENT!r}, {request!r})"
    (setup,) = _race(
        [(claim_label, board, Call(Op.CLAIM, task_id, agent=SETUP_AGENT, ttl=ttl))],
        seconds,
        deadline,
    )
    setup_failure = setup.failure
    token = ""
    if setup_failure is None:
        minted = getattr(getattr(setup.value, "lease", None), "token", None)
        if isinstance(minted, str) and minted:
            token = minted
        else:
            setup_failure = TypeError(
                f"{claim_label} returned {setup.value!r}, which carries no lease token; a "
                "successful claim must return the task with its new lease (SPEC 3.1)"
            )
    if setup_failure is not None:
        verdict = _verdict([setup_failure])
        hint = (
            _INFRA_HINT
            if verdict == "infrastructure fault"
            else "Run the criterion on a task that exists, is not DONE, has every dependency "
            "DONE and no live lease."
        )
        raise CriterionError(
            verdict,
            f"duplicate_token_submit({task_id!r}) could not set up: {claim_label} failed "
            f"with {type(setup_failure).__name__}, so no submitter ran. {hint}",
            [setup_failure],
        )

    calls = [
        (
            f"submitter #{i} {where}.complete({task_id!r}, <the set-up claim's token>)",
            caller,
            Call(Op.COMPLETE, task_id, token=token),
        )
        for i, (where, caller) in enumerate(callers)
    ]
    tally = _collect(_race(calls, seconds, deadline), LeaseLostError)
    if not tally.others:
        return tally.winners
    verdict = _verdict(tally.others)
    hint = (
        _INFRA_HINT
        if verdict == "infrastructure fault"
        else "The set-up claim succeeded, yet submitters were rejected with contract errors "
        "other than LeaseLostError, so they never reached the contention being judged: check "
        "that complete() accepts the token claim() returned and that nothing else touches "
        "the task during the run."
    )
    raise CriterionError(
        verdict,
        f"duplicate_token_submit({task_id!r}) with {_count(workers, 'submitter')} of one "
        f"token from one start line saw {_count(tally.winners, 'success', 'successes')}, "
        f"{_count(tally.losers, 'loser')} raising LeaseLostError and "
        f"{_count(len(tally.others), 'other outcome')}{_timeouts(tally, seconds)}. {hint}",
        tally.others,
    )
