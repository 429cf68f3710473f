"""The public surface: exports, values, errors and clocks (SPEC sections 1 and 2)."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import threading
from datetime import UTC, datetime, timedelta, timezone

import pytest

import taskboard
import taskboard.strategies
from taskboard import (
    Board,
    ClaimRequest,
    Clock,
    Code,
    CriterionError,
    FailingBoard,
    Lease,
    ManualClock,
    Problem,
    RenewingBoard,
    State,
    SystemClock,
    Task,
)
from taskboard.hosts.memory import MemoryBoard
from taskboard.stateful import _generation

SPEC_NAMES = {
    "State", "Lease", "Task", "ClaimRequest", "Problem", "Code", "Board", "RenewingBoard",
    "FailingBoard", "BoardError", "NotFoundError", "TakenError", "BlockedError", "TerminalError",
    "LeaseLostError", "Clock", "SystemClock", "ManualClock", "check", "concurrent_claim",
    "duplicate_token_submit", "CriterionError",
}  # fmt: skip


def test_all_is_sorted_and_exactly_the_spec_names() -> None:
    """taskboard exports exactly the SPEC section 1 names, in a sorted __all__."""
    assert taskboard.__all__ == sorted(taskboard.__all__)
    assert set(taskboard.__all__) == SPEC_NAMES


#: Every public module of the package: no part of its dotted name starts with "_".
PUBLIC_MODULES = sorted(
    module.name
    for module in pkgutil.walk_packages(taskboard.__path__, "taskboard.")
    if not any(part.startswith("_") for part in module.name.split("."))
)


@pytest.mark.parametrize("name", ["taskboard", *PUBLIC_MODULES])
def test_every_name_a_public_module_exports_exists(name: str) -> None:
    """Each public module's __all__ (taskboard.strategies' among them) names only what the
    module has, each once, so ``from taskboard.X import *`` and the docs' names all work."""
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", [])
    assert [n for n in exported if not hasattr(module, n)] == []
    assert len(set(exported)) == len(exported)


def test_the_strategies_module_exports_what_the_checker_draws() -> None:
    """taskboard.strategies is public and re-exports the machine's own draws, not copies."""
    assert "taskboard.strategies" in PUBLIC_MODULES
    assert taskboard.strategies.TTL_TICKS is _generation.TTL_TICKS
    assert taskboard.strategies.dependency_graphs is _generation.dependency_graphs


@pytest.mark.parametrize("name", sorted(SPEC_NAMES))
def test_public_names_show_the_public_module(name: str) -> None:
    """Tracebacks and reprs name taskboard.X, not the private module holding the code."""
    assert getattr(taskboard, name).__module__ == "taskboard"


def test_state_values_and_terminal() -> None:
    """State has the four SPEC values and only DONE is terminal."""
    assert [s.value for s in State] == ["open", "claimed", "done", "failed"]
    assert [s for s in State if s.terminal] == [State.DONE]


def test_code_has_the_ten_invariant_classes() -> None:
    """Code carries exactly the ten SPEC section 4 codes."""
    assert {c.value for c in Code} == {
        "empty_id", "duplicate_id", "unknown_state", "unknown_dep", "self_dep", "dep_cycle",
        "claimed_without_lease", "lease_without_claim", "terminal_claimed", "blocked_claim",
    }  # fmt: skip


def test_values_are_frozen_with_spec_defaults() -> None:
    """Task, Lease, ClaimRequest and Problem are frozen dataclasses with the SPEC defaults."""
    task = Task("t1")
    assert (task.title, task.deps, task.state, task.owner, task.lease, task.seq) == (
        "", (), State.OPEN, "", None, 0,
    )  # fmt: skip
    assert Lease("k", 1).until is None
    assert ClaimRequest().ttl == timedelta(0)
    for value in (task, Lease("k", 1), ClaimRequest(), Problem("t", Code.SELF_DEP, "x")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            value.__setattr__("seq", 1)


def test_task_accepts_odd_values_for_check_to_report() -> None:
    """Task never rejects a field value: an unknown state or empty id reaches check()."""
    odd = Task("", state="paused")  # type: ignore[arg-type]
    assert odd.state == "paused"
    assert odd.id == ""


def test_task_normalises_a_deps_list_and_a_state_string() -> None:
    """A deps list becomes a tuple and a known state string becomes a State member."""
    task = Task("t", deps=["a", "b"], state="claimed")  # type: ignore[arg-type]
    assert task.deps == ("a", "b")
    assert task.state is State.CLAIMED
    assert task == Task("t", deps=("a", "b"), state=State.CLAIMED)


def test_claim_request_rejects_negative_and_non_timedelta_ttl() -> None:
    """A negative ttl is a ValueError and a non-timedelta ttl a TypeError, at construction."""
    with pytest.raises(ValueError, match="must not be negative"):
        ClaimRequest(timedelta(seconds=-1))
    with pytest.raises(TypeError, match="must be a timedelta"):
        ClaimRequest(5)  # type: ignore[arg-type]


def test_error_hierarchy_has_one_root() -> None:
    """The five contract errors derive from BoardError; NotFoundError is also a LookupError."""
    for name in ("NotFoundError", "TakenError", "BlockedError", "TerminalError", "LeaseLostError"):
        error = getattr(taskboard, name)
        assert issubclass(error, taskboard.BoardError)
        assert error.__doc__
    assert issubclass(taskboard.NotFoundError, LookupError)
    assert not issubclass(CriterionError, taskboard.BoardError)


def test_criterion_error_is_an_exception_group_keeping_its_verdict() -> None:
    """CriterionError groups the collected exceptions and keeps its verdict through except*."""
    error = CriterionError("infrastructure fault", "2 of 3 failed", [ConnectionError("down")])
    assert str(error).startswith("infrastructure fault: 2 of 3 failed")
    assert error.verdict == "infrastructure fault"
    caught: list[BaseExceptionGroup[BaseException]] = []
    try:
        raise error
    except* ConnectionError as group:
        caught.append(group)
    assert isinstance(caught[0], CriterionError)
    assert caught[0].verdict == "infrastructure fault"


def test_reference_hosts_satisfy_every_protocol() -> None:
    """Board, RenewingBoard and FailingBoard are runtime-checkable; a plain object is none."""
    board = MemoryBoard([Task("t")], ManualClock())
    assert isinstance(board, Board)
    assert isinstance(board, RenewingBoard)
    assert isinstance(board, FailingBoard)
    assert not isinstance(object(), Board)
    assert isinstance(SystemClock(), Clock)
    assert isinstance(ManualClock(), Clock)


def test_system_clock_is_aware_utc() -> None:
    """SystemClock gives timezone-aware UTC datetimes."""
    now = SystemClock().now()
    assert now.utcoffset() == timedelta(0)


def test_manual_clock_starts_where_told_and_moves_only_forward() -> None:
    """ManualClock advances and sets forward, and returns its new time."""
    start = datetime(2030, 5, 1, tzinfo=UTC)
    clock = ManualClock(start)
    assert clock.now() == start
    assert clock.advance(timedelta(seconds=5)) == start + timedelta(seconds=5)
    assert clock.advance(timedelta(0)) == start + timedelta(seconds=5)
    assert clock.set(start + timedelta(seconds=9)) == clock.now() == start + timedelta(seconds=9)


def test_manual_clock_default_start_is_fixed_and_aware() -> None:
    """Two default ManualClocks start at the same aware instant, so runs repeat."""
    assert ManualClock().now() == ManualClock().now()
    assert ManualClock().now().tzinfo is not None


def test_manual_clock_converts_other_zones_to_utc() -> None:
    """An aware non-UTC start is kept as the same instant, expressed in UTC."""
    plus_two = timezone(timedelta(hours=2))
    clock = ManualClock(datetime(2030, 1, 1, 12, tzinfo=plus_two))
    assert clock.now() == datetime(2030, 1, 1, 10, tzinfo=UTC)
    assert clock.now().utcoffset() == timedelta(0)


def test_manual_clock_refuses_to_go_backwards() -> None:
    """A negative advance or a set into the past is a ValueError and changes nothing."""
    clock = ManualClock()
    before = clock.now()
    with pytest.raises(ValueError, match="never goes backwards"):
        clock.advance(timedelta(microseconds=-1))
    with pytest.raises(ValueError, match="never goes backwards"):
        clock.set(before - timedelta(microseconds=1))
    assert clock.now() == before


def test_manual_clock_refuses_naive_and_wrong_types() -> None:
    """Naive datetimes are a ValueError; non-datetime/timedelta arguments a TypeError."""
    with pytest.raises(ValueError, match="timezone-aware"):
        ManualClock(datetime(2030, 1, 1))
    clock = ManualClock()
    with pytest.raises(ValueError, match="timezone-aware"):
        clock.set(datetime(2030, 1, 1))
    with pytest.raises(TypeError, match="takes a timedelta"):
        clock.advance(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a datetime"):
        ManualClock("2030-01-01")  # type: ignore[arg-type]


def test_manual_clock_is_safe_across_threads() -> None:
    """Concurrent advances all land: the clock moves by their sum."""
    clock = ManualClock()
    start = clock.now()

    def tick() -> None:
        for _ in range(1000):
            clock.advance(timedelta(microseconds=1))

    threads = [threading.Thread(target=tick) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.now() - start == timedelta(microseconds=4000)
