"""Every reach into Hypothesis's internals (taskboard/stateful/_hypothesis.py): each works on
the installed Hypothesis, and each falls back to the public path when what it reaches for is
gone. A Hypothesis upgrade that moves one shows up here, not as a quiet slowdown."""

from __future__ import annotations

import ast
import re
import unittest
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, reproduce_failure, seed, settings
from hypothesis import strategies as st
from hypothesis.internal.reflection import function_digest
from hypothesis.stateful import RuleStrategy, run_state_machine_as_test

from taskboard import Board, Clock, Task
from taskboard.boardtest import BoardContract
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import AgentAsIdentity
from taskboard.model import ContractViolation
from taskboard.stateful import BoardMachine, run_parallel_state_machine
from taskboard.stateful import _hypothesis as reach
from tests.test_machine import QUICK, MemoryMachine


def test_the_rule_draws_are_in_use_on_this_hypothesis() -> None:
    """On the installed Hypothesis a machine draws through RuleDraws, with Choice arguments."""
    machine = MemoryMachine()
    assert isinstance(machine._rules_strategy, reach.RuleDraws)
    assert isinstance(reach.choice((1, 2)), reach.Choice)


def test_without_feature_flags_a_machine_keeps_hypothesis_draws(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where Hypothesis's swarm strategy is gone, the stock rule strategy stays, and runs."""
    monkeypatch.setattr(reach, "_SWARM", None)
    machine = MemoryMachine()
    assert type(machine._rules_strategy) is RuleStrategy
    machine.teardown()
    run_state_machine_as_test(MemoryMachine, settings=settings(QUICK, max_examples=3))


def test_without_the_strategy_internals_a_choice_is_a_plain_sampled_from(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where SearchStrategy cannot be subclassed as Choice does, choice() is sampled_from."""
    monkeypatch.setattr(reach, "_CHOICES", False)
    drawn = reach.choice(("a", "b"))
    assert not isinstance(drawn, reach.Choice)
    assert repr(drawn) == "sampled_from(('a', 'b'))"


def test_in_final_replay_is_false_outside_a_test_and_without_the_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outside a Hypothesis test, and with a build context that no longer says, not final."""
    assert reach.in_final_replay() is False

    class Context:  # a build context without is_final
        pass

    monkeypatch.setattr(reach, "current_build_context", Context)
    assert reach.in_final_replay() is False


def test_in_final_replay_is_true_only_in_the_last_replay_of_a_failure() -> None:
    """Inside a failing test, the final replay (and only it) says it is final."""
    seen: list[bool] = []

    @settings(database=None, max_examples=20, phases=[Phase.generate, Phase.shrink])
    @given(st.integers(0, 10))
    def failing(n: int) -> None:
        seen.append(reach.in_final_replay())
        assert n < 5

    with pytest.raises(AssertionError):
        failing()
    assert seen[-1] is True
    assert not any(seen[:-1])


def test_the_database_key_is_hypothesis_own_and_mixes_in_our_digest() -> None:
    """database_key is function_digest; key_database_by tells two classes of one source apart."""
    first = BoardMachine.for_board(MemoryBoard)
    second = BoardMachine.for_board(MemoryBoard)
    assert reach.database_key(first) == function_digest(first)
    reach.key_database_by(second, b"another")
    assert reach.database_key(first) != reach.database_key(second)


def test_without_function_digest_the_database_key_still_tells_machines_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fallback key depends on the class name and our own digest."""
    monkeypatch.setattr(reach, "function_digest", None)
    first = BoardMachine.for_board(MemoryBoard)
    second = BoardMachine.for_board(MemoryBoard)
    reach.key_database_by(second, b"another")
    assert reach.database_key(first) != reach.database_key(second)


def test_applied_settings_are_the_decorators_and_only_the_changed_ones_count() -> None:
    """@settings on a machine class is found; changed_settings names what differs from default."""

    @settings(stateful_step_count=7, deadline=timedelta(seconds=3))
    class Decorated(MemoryMachine):
        pass

    chosen = reach.applied_settings(Decorated)
    assert chosen is not None
    assert reach.changed_settings(chosen) == {
        "stateful_step_count": 7,
        "deadline": timedelta(seconds=3),
    }
    assert reach.applied_settings(MemoryMachine) is None


def test_setting_names_match_the_public_list() -> None:
    """Hypothesis's own list of settings holds every public name the fallback knows."""
    names = reach.setting_names()
    assert "stateful_step_count" in names
    assert set(reach._PUBLIC_SETTINGS) <= set(names)


def test_the_test_case_has_no_explain_phase_and_reports_failures() -> None:
    """A machine's TestCase runs without the explain phase, once wrapped (idempotent)."""
    case = MemoryMachine.TestCase
    assert Phase.explain not in case.settings.phases
    assert MemoryMachine.TestCase is case
    assert case._taskboard_machine is MemoryMachine


def test_the_parallel_mode_runs_without_the_explain_phase(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_parallel_state_machine drops the explain phase from settings that ask for it (as
    Hypothesis's default profile does), so no explanation points at taskboard's own code."""
    from taskboard.stateful import _parallel

    applied: list[settings] = []

    def recorded(chosen: settings) -> settings:
        applied.append(reach.without_explain(chosen))
        return applied[-1]

    monkeypatch.setattr(_parallel, "without_explain", recorded)
    every_phase = settings(max_examples=1, phases=tuple(Phase), database=None)
    run_parallel_state_machine(MemoryMachine, settings=every_phase)
    assert applied
    assert Phase.explain not in applied[0].phases
    assert Phase.shrink in applied[0].phases


def test_a_board_contract_runs_its_machines_without_the_slow_generation_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """BoardContract's machine runs leave out the too_slow health check, which a loaded
    machine or a board in a process of its own trips on a correct board, and keep the rest."""
    from taskboard.boardtest import _suite

    applied: list[settings] = []

    def recorded(chosen: settings) -> settings:
        applied.append(reach.without_speed_check(chosen))
        return applied[-1]

    monkeypatch.setattr(_suite, "without_speed_check", recorded)

    class Contract(BoardContract):
        def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
            return MemoryBoard(tasks, clock)

    contract = Contract()
    contract.machine_settings = contract.parallel_settings = settings(max_examples=1)
    contract.test_state_machine()
    contract.test_parallel_histories_are_linearizable()
    assert len(applied) == 2
    for chosen in applied:
        assert HealthCheck.too_slow in chosen.suppress_health_check
        assert HealthCheck.data_too_large not in chosen.suppress_health_check


def test_a_seed_on_the_machine_class_is_carried_to_another_test() -> None:
    """carry_seed_and_reproduction applies @seed through the public decorator."""

    @seed(1234)
    class Seeded(MemoryMachine):
        pass

    test = reach.carry_seed_and_reproduction(Seeded, given(st.integers())(lambda n: None))
    assert reach.seed_of(test) == 1234
    assert reach.seed_of(MemoryMachine) is None


def _blob_of(error: BaseException) -> tuple[str, bytes]:
    notes = "\n".join(getattr(error, "__notes__", ()))
    found = re.search(r"@reproduce_failure\('([^']+)', (b'[^']*')\)", notes)
    assert found is not None, notes
    return found.group(1), ast.literal_eval(found.group(2))


def test_reproduce_failure_on_the_machine_replays_in_parallel_mode() -> None:
    """@reproduce_failure on a machine class reruns that very program in parallel mode, even
    where the settings would run nothing at all."""
    machine = BoardMachine.for_board(AgentAsIdentity)
    with pytest.raises(ContractViolation) as caught:
        run_parallel_state_machine(machine, settings=settings(QUICK, print_blob=True))
    version, blob = _blob_of(caught.value)
    nothing: Any = settings(QUICK, phases=[Phase.explicit], print_blob=False)
    with pytest.raises(unittest.SkipTest, match="no test cases"):
        run_parallel_state_machine(BoardMachine.for_board(AgentAsIdentity), settings=nothing)
    reproduced = reproduce_failure(version, blob)(BoardMachine.for_board(AgentAsIdentity))
    try:
        with pytest.raises(ContractViolation) as again:
            run_parallel_state_machine(reproduced, settings=nothing)
    except unittest.SkipTest:
        pytest.fail("@reproduce_failure on the machine class was ignored in parallel mode")
    assert again.value.recording.program == caught.value.recording.program


def test_without_the_parent_changed_settings_compare_with_the_default_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where a settings object no longer keeps its parent, the default profile is the base."""
    chosen = settings(settings.get_profile("default"), stateful_step_count=9)
    monkeypatch.setattr(chosen, "_fallback", None, raising=False)
    assert reach.changed_settings(chosen) == {"stateful_step_count": 9}


def test_shrinking_for_at_most_bounds_the_engine_and_restores_it() -> None:
    """The engine's shrinking limit is reached on this Hypothesis, set within the block and
    restored after it."""
    from hypothesis.internal.conjecture import engine

    before = engine.MAX_SHRINKING_SECONDS
    with reach.shrinking_for_at_most(2.5) as bounded:
        assert bounded
        assert engine.MAX_SHRINKING_SECONDS == 2.5
    assert before == engine.MAX_SHRINKING_SECONDS
