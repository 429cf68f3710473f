"""The kinds of step (taskboard/stateful/_steps): one registry that the machine's rules,
parallel programs, trace files, replay and reports all read."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RULE_MARKER, rule

from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import NonAtomicClaim, OffByOneExpiry
from taskboard.stateful import (
    BoardMachine,
    _steps,
    load_trace,
    parse_trace,
    replay_trace,
    trace_to_json,
)
from taskboard.stateful._fields import Reader, TraceFileError
from taskboard.stateful._parallel import run_program
from taskboard.stateful._steps import (
    STEP_KINDS,
    ActStep,
    AdvanceStep,
    ClaimStep,
    ExpiryStep,
    NemesisStep,
    ParallelProgram,
    ProgramDraw,
    ProgramStep,
    StepKind,
    kind_of,
    machine_rules,
    program_ops,
    program_steps,
    read_program_step,
    read_step,
    write_step,
)
from taskboard.strategies import TASK_IDS

DEPS: dict[str, tuple[str, ...]] = dict.fromkeys(TASK_IDS, ())


def rule_names(machine: type[BoardMachine]) -> set[str]:
    """The names of the rules Hypothesis finds on ``machine`` (its methods marked as rules)."""
    return {
        name
        for name in dir(machine)
        if getattr(getattr(machine, name, None), RULE_MARKER, None) is not None
    }


def test_every_rule_of_the_machine_comes_from_a_kind_of_step() -> None:
    """The machine's rules are exactly the registered kinds' rules (no nemesis hooks)."""
    assert rule_names(BoardMachine.for_board(MemoryBoard)) == set(machine_rules(()))


def test_nemesis_rules_join_only_a_machine_that_defines_the_hooks() -> None:
    """A machine with restart_storage gets the kinds' restart rule, and no drop rule."""
    machine = BoardMachine.for_board(MemoryBoard, restart_storage=lambda board: None)
    assert rule_names(machine) == set(machine_rules(("restart",)))
    assert "restart" in rule_names(machine)
    assert "drop" not in rule_names(machine)


def test_each_name_belongs_to_one_kind() -> None:
    """No two kinds answer to the same name, so a trace's step finds one kind."""
    names = [name for kind in STEP_KINDS for name in kind.names]
    assert len(names) == len(set(names))
    assert set(program_ops()) == set(names)


@settings(max_examples=200, deadline=None)
@given(
    st.booleans().flatmap(
        lambda in_prefix: program_steps(
            ProgramDraw(st.sampled_from(TASK_IDS), in_prefix, ("restart", "drop"))
        )
    )
)
def test_every_program_step_round_trips_through_its_json(step: Any) -> None:
    """A drawn program step of any kind reads back equal from what it wrote."""
    text = json.dumps(step.to_json())
    assert read_program_step(Reader("<test>", "step", json.loads(text))) == step


def test_program_steps_render_as_a_report_shows_them() -> None:
    """Each program step reads as a call, a clock move or a hook, without placeholders."""
    assert str(ClaimStep("t1", "a2", 5)) == "claim('t1', agent='a2', ttl=5)"
    assert str(ActStep("renew", "t1", "mine")) == "renew('t1', token=mine)"
    assert str(AdvanceStep(3)) == "advance(3 ticks)"
    assert str(ExpiryStep("t2", 1)) == "expiry('t2', lead=1)"
    assert str(NemesisStep("restart")) == "restart_storage(board)"
    assert NemesisStep("drop").to_json() == {"op": "drop"}


def test_a_schema_3_program_reads_into_typed_steps() -> None:
    """A program written before version 4 (every op with task, agent, token and ttl_ticks,
    an expiry's lead and an advance's count in ttl_ticks) still reads."""

    def op(name: str, **fields: Any) -> dict[str, Any]:
        return {"op": name, "task": "t1", "agent": "a1", "token": "latest", "ttl_ticks": 0} | fields

    old = [
        op("claim", agent="a2", ttl_ticks=5),
        op("renew", token="previous", ttl_ticks=1),
        op("advance", ttl_ticks=3),
        op("expiry", ttl_ticks=1),
        op("restart"),
    ]
    read = [read_program_step(Reader("<test>", f"prefix[{i}]", o)) for i, o in enumerate(old)]
    assert read == [
        ClaimStep("t1", "a2", 5),
        ActStep("renew", "t1", "previous", 1),
        AdvanceStep(3),
        ExpiryStep("t1", 1),
        NemesisStep("restart"),
    ]


def test_a_parallel_trace_writes_and_reads_its_program() -> None:
    """A trace's program round-trips through the trace file, step kinds and all."""
    machine = BoardMachine.for_board(MemoryBoard)()
    machine.start(deps=DEPS, start_ticks=0)
    try:
        program = ParallelProgram(
            DEPS,
            (ClaimStep("t1", "a1", 1), ExpiryStep("t1", 0), NemesisStep("drop")),
            ((ActStep("complete", "t1"),), (ClaimStep("t1", "a2", 5), AdvanceStep(1))),
        )
        trace = dataclasses.replace(machine.to_trace(), program=program)
    finally:
        machine.teardown()
    assert parse_trace(trace_to_json(trace)).program == program


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("op", "clam", "'clam' is not one of claim"),
        ("token", "yours", "'yours' is not one of mine, latest, previous"),
        ("ttl_ticks", -1, "must be non-negative, got -1"),
    ],
)
def test_a_bad_program_step_is_named_by_its_field(field: str, value: object, problem: str) -> None:
    """A program step with a bad field is a TraceFileError naming the field and the fault."""
    fields = ActStep("renew", "t1").to_json() | {field: value}
    with pytest.raises(TraceFileError, match=f"threads\\[0\\]\\[1\\]\\.{field}: {problem}"):
        read_program_step(Reader("t.json", "threads[0][1]", fields))


def test_every_recorded_step_of_a_run_round_trips_through_its_kind() -> None:
    """The steps a machine run recorded (calls, clock moves) read back as written, each
    through the kind that wrote it, tokens named by their lease's label."""
    machine = BoardMachine.for_board(MemoryBoard)()
    machine.start(deps=DEPS, start_ticks=0)
    try:
        lease = machine.claim(task="t1", agent="a1", ttl_ticks=2)
        machine.renew(task="t1", ttl_ticks=1, holder="latest")
        machine.at_expiry(which=0, early=False, then="claim", agent="a2", ttl_ticks=1)
        machine.act_with_lease(op="complete", lease=lease, ttl_ticks=0)
        machine.advance_clock(ticks=2)
        steps = machine.trace
    finally:
        machine.teardown()
    names = [str(step.call.op) if step.call else "advance" for step in steps]
    assert set(names) == {"claim", "renew", "advance", "complete"}
    for name, step in zip(names, steps, strict=True):
        assert name in kind_of(step).names
        record = json.loads(json.dumps(write_step(step)))
        read = read_step(Reader("<test>", "steps[0]", record), step.index)
        # A token is written as the label of its lease (L1), which replay maps to its own.
        assert write_step(read) == record
        assert dataclasses.replace(read, call=step.call) == step


@dataclasses.dataclass(frozen=True)
class WaitStep(ProgramStep):
    """A program step of a kind the package does not have: the clock moved a few units."""

    units: int

    @property
    def op(self) -> str:
        return "wait"

    def run(self, session: Any) -> None:
        session.move_clock(session.clock.now() + self.units * session.config.ttl_unit, "waited")

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "units": self.units}


@rule(units=st.integers(1, 3))
def wait(self: Any, units: int) -> None:
    """Move the clock a few units, as a new kind's rule."""
    WaitStep(units).run(self._session)


class WaitKind(StepKind):
    """A new kind of step, defined outside the package, as a host might add one."""

    names = ("wait",)

    def rules(self, nemesis: tuple[str, ...]) -> dict[str, Any]:
        return {"wait": wait}

    def program_strategies(self, draw: ProgramDraw) -> tuple[Any, ...]:
        return (st.builds(WaitStep, st.integers(1, 3)),) if draw.in_prefix else ()

    def read_program_step(self, op: str, reader: Reader) -> ProgramStep:
        return WaitStep(reader.get("units", int))


def test_a_new_kind_of_step_plugs_in_through_the_registry_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A kind added to STEP_KINDS, and nothing else, is a rule of a machine, a step that
    programs draw, and a program step that trace files read and the parallel mode runs."""
    monkeypatch.setattr(_steps, "STEP_KINDS", (*STEP_KINDS, WaitKind()))
    machine = BoardMachine.for_board(MemoryBoard)
    assert "wait" in rule_names(machine)
    draw = ProgramDraw(st.sampled_from(TASK_IDS), in_prefix=True)
    assert WaitStep(2) in collected(program_steps(draw))
    assert read_program_step(Reader("<test>", "prefix[0]", {"op": "wait", "units": 2})) == WaitStep(
        2
    )
    program = ParallelProgram(
        DEPS, (ClaimStep("t1", "a1", 1), WaitStep(2)), ((ActStep("complete", "t1"),),)
    )
    run_program(machine, program)  # the new step ran in the prefix, every check after it
    state = machine()
    state.start(deps=DEPS, start_ticks=0)
    try:
        state.wait(units=3)
        assert state.trace[-1].advance == 3 * state.config.ttl_unit
    finally:
        state.teardown()


def collected(strategy: Any) -> list[Any]:
    """Values ``strategy`` draws over a few hundred examples (to see which kinds it draws)."""
    values: list[Any] = []

    @settings(max_examples=300, database=None)
    @given(strategy)
    def draw(value: Any) -> None:
        values.append(value)

    draw()
    return values


#: Trace files written by the release before trace schema 4 (recorded with it).
OLD_TRACES = Path(__file__).parent / "traces"


def test_a_schema_3_sequential_trace_replays_to_its_violation() -> None:
    """A trace file of schema 3 loads and replays to the violation it recorded."""
    trace = load_trace(OLD_TRACES / "v3-off-by-one-expiry.json")
    assert trace.verdict is not None
    result = replay_trace(trace, OffByOneExpiry)
    assert not result.passed
    assert result.violation is not None
    assert result.violation.clause == trace.verdict.clause


def test_a_schema_3_parallel_trace_reads_its_program_and_replays_the_race() -> None:
    """A parallel trace of schema 3 (a clock move and an expiry landing in the prefix, in the
    old shape) loads into typed steps and its race fails again on the board it was found on."""
    trace = load_trace(OLD_TRACES / "v3-parallel-non-atomic-claim.json")
    assert trace.program is not None
    assert trace.program.prefix == (AdvanceStep(2), ExpiryStep("t1", 0))
    assert trace.program.threads == ((ClaimStep("t1", "a1", 0),), (ClaimStep("t1", "a1", 0),))
    assert not replay_trace(trace, NonAtomicClaim).passed
