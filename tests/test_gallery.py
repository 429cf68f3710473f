"""The bug gallery against the checker: every mutant board must be caught."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test

from taskboard import ManualClock, Task, concurrent_claim, duplicate_token_submit
from taskboard._profiles import CI
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import MUTANTS, CheckThenWriteComplete, NonAtomicClaim, _HookedBoard
from taskboard.stateful import BoardMachine, ContractViolation, violations_in

#: The default test profile, exactly: the unmutated base must pass at the depth users get.
SETTINGS = settings.get_profile(CI)
#: Each mutant must be caught within three times that many examples. Most are caught in
#: under 15; FirstDepOnly needs a fan-in graph with its first dependency done and is caught
#: in 4 of 5 seeds within 100 (docs/power.md), so one derandomized run of 200 can miss it.
CATCH_SETTINGS = settings(SETTINGS, max_examples=3 * SETTINGS.max_examples)
SEQUENTIAL = [m for m in MUTANTS if not m.concurrent]  # type: ignore[attr-defined]
CONCURRENT = [m for m in MUTANTS if m.concurrent]  # type: ignore[attr-defined]
ROUNDS = 5  # races per concurrent mutant; one is normally enough
RACERS = ["a", "b", "a", "c", "a", "b", "c", "a"]
#: The criterion that must see each concurrent mutant's bug: it returns the winner count.
CRITERIA: dict[type[MemoryBoard], Callable[[MemoryBoard], int]] = {
    NonAtomicClaim: lambda board: concurrent_claim(board, "t1", RACERS),
    CheckThenWriteComplete: lambda board: duplicate_token_submit(board, "t1", len(RACERS)),
}


def machine_for(board_class: type[MemoryBoard]) -> type[BoardMachine]:
    """A BoardMachine whose boards are ``board_class``."""
    return BoardMachine.for_board(board_class)


def fresh(board_class: type[MemoryBoard]) -> MemoryBoard:
    """One open task ``t1`` with no dependencies."""
    return board_class([Task(id="t1")], ManualClock())


def test_registry() -> None:
    """MUTANTS has at least 15 uniquely named, documented classes, two of them concurrent."""
    names = [m.__name__ for m in MUTANTS]
    assert len(MUTANTS) >= 15
    assert len(set(names)) == len(names)
    assert all((m.__doc__ or "").strip() for m in MUTANTS)
    assert all(isinstance(m.concurrent, bool) for m in MUTANTS)  # type: ignore[attr-defined]
    assert set(CONCURRENT) == set(CRITERIA)


def test_hooked_base_passes() -> None:
    """The unmutated hook base passes the machine, so every catch below is the mutant's bug."""
    run_state_machine_as_test(machine_for(_HookedBoard), settings=SETTINGS)


#: Caught, but in minutes on a loaded machine (its heartbeat races the wall clock): deep only.
SLOW_TO_CATCH = {"HeartbeatSlowerThanLease"}


@pytest.mark.slow
@pytest.mark.parametrize(
    "mutant",
    [
        pytest.param(m, marks=pytest.mark.deep) if m.__name__ in SLOW_TO_CATCH else m
        for m in SEQUENTIAL
    ],
    ids=lambda m: m.__name__,
)
def test_machine_catches(mutant: type[MemoryBoard]) -> None:
    """BoardMachine finds a contract violation in the sequential mutant within three times
    the CI profile's examples."""
    # A mutant whose bug depends on its own random tokens (TruncatedTokenCompare) can make
    # Hypothesis's final replay diverge: then a Flaky error carries the violation.
    with pytest.raises((ContractViolation, Flaky)) as caught:
        run_state_machine_as_test(machine_for(mutant), settings=CATCH_SETTINGS)
    assert violations_in(caught.value), f"{mutant.__name__}: {caught.value!r} holds no violation"


@pytest.mark.parametrize("mutant", CONCURRENT, ids=lambda m: m.__name__)
def test_criterion_catches(mutant: type[MemoryBoard]) -> None:
    """The concurrency criterion sees more than one winner within a few rounds."""
    counts = []
    for _ in range(ROUNDS):
        counts.append(CRITERIA[mutant](fresh(mutant)))
        if counts[-1] > 1:
            break
    assert max(counts) > 1, f"{mutant.__name__}: winners per round {counts}"


#: BoardContract runs on the manual clock unless told otherwise; the wall-clock mutants need
#: their class's declarations (client_clock_skew, keep_alive_interval), which are the machine's.
MANUAL_CLOCK_MUTANTS = [m for m in MUTANTS if getattr(m, "clock_mode", "manual") == "manual"]


@pytest.mark.slow
@pytest.mark.parametrize("mutant", MANUAL_CLOCK_MUTANTS, ids=lambda m: m.__name__)
def test_board_contract_catches(mutant: type[MemoryBoard], pytester: pytest.Pytester) -> None:
    """BoardContract, subclassed for the mutant, reports at least one failure."""
    pytester.makeconftest(
        "from hypothesis import settings\n"
        "from taskboard._profiles import CI, register_profiles\n"
        "register_profiles()\n"
        "settings.load_profile(CI)\n"
    )
    pytester.makepyfile(
        f"""
        from taskboard.boardtest import BoardContract
        from taskboard.hosts.mutants import {mutant.__name__}

        class TestMutant(BoardContract):
            def make_board(self, tasks, clock):
                return {mutant.__name__}(tasks, clock)
        """
    )
    result = pytester.runpytest("-x", "-q", "-p", "no:cacheprovider")
    assert result.parseoutcomes().get("failed", 0) >= 1, result.stdout.str()
