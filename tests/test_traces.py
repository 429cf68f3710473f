"""Trace files and replay: a shrunk failure as JSON, replayed on the board and on others."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import Board, Lease, ManualClock, State, Task
from taskboard._profiles import CI
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import TakeoverKeepsFence
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.model import Allowed, Call, Op, Outcome, Step
from taskboard.stateful import (
    SCHEMA_VERSION,
    TRACE_DIR_ENV,
    BoardMachine,
    ContractViolation,
    Trace,
    TraceFileError,
    Verdict,
    load_trace,
    parse_trace,
    render_regression_test,
    replay_trace,
    trace_to_json,
    write_trace,
)
from taskboard.stateful._trace import FORGERIES, forge, resolve_token, token_ref

#: The default test profile: derandomized, so every run finds the same shrunk failure.
SETTINGS = settings.get_profile(CI)
MUTANT_TARGET = "taskboard.hosts.mutants:TakeoverKeepsFence"
START = datetime(2026, 1, 1, tzinfo=UTC)
MS = timedelta(milliseconds=1)


class TakeoverMachine(BoardMachine):
    """The machine on a board whose takeovers keep the old holder's fence (caught quickly)."""

    def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> Board:
        return TakeoverKeepsFence(tasks, clock)


class MemoryMachine(BoardMachine):
    """The machine on the in-memory reference host."""

    def make_board(self, tasks: Sequence[Task], clock: ManualClock) -> Board:
        return MemoryBoard(tasks, clock)


def run_mutant() -> ContractViolation:
    """Run TakeoverMachine under the CI profile and return the shrunk violation it raises."""
    with pytest.raises(ContractViolation) as caught:
        run_state_machine_as_test(TakeoverMachine, settings=SETTINGS)
    return caught.value


def outline(steps: Sequence[Step]) -> list[tuple[Any, ...]]:
    """What a step did, without the board's tokens: comparable across record and file."""
    return [
        (
            s.index,
            s.at,
            s.advance,
            None if s.call is None else (s.call.op, s.call.task_id, s.call.agent, s.call.ttl),
            s.token_ref,
            None if s.outcome is None else s.outcome.error,
        )
        for s in steps
    ]


@dataclass(frozen=True)
class Recorded:
    """One failing run of TakeoverMachine with both a trace_dir attribute and the env var set."""

    violation: ContractViolation
    directory: Path
    env_directory: Path

    @property
    def file(self) -> Path:
        assert self.violation.trace_file is not None
        return Path(self.violation.trace_file)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """The mutant's shrunk failure, its trace written by the class attribute ``trace_dir``."""
    directory = tmp_path_factory.mktemp("traces")
    env_directory = tmp_path_factory.mktemp("env-traces")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TakeoverMachine, "trace_dir", str(directory))
        patch.setenv(TRACE_DIR_ENV, str(env_directory))
        violation = run_mutant()
    return Recorded(violation, directory, env_directory)


@pytest.fixture
def trace(recorded: Recorded) -> Trace:
    """The recorded trace file, loaded."""
    return load_trace(recorded.file)


def sample_trace(verdict: Verdict | None = None) -> Trace:
    """A hand-made trace with every kind of step and token reference, and awkward text."""
    lease = Lease("tok-1", 1, START + 5 * MS)
    claimed = Task("t1", "task t1", state=State.CLAIMED, owner="ü-agent", lease=lease, seq=1)
    forever = dataclasses.replace(claimed, lease=Lease("tok-1", 1, None))
    lost = Allowed("LeaseLostError", "SPEC 3.2", "a token that is not the lease's")
    return Trace(
        start=START,
        resolution=MS,
        policy="either",
        tasks=(Task("t1", "task t1"), Task("t2", "task t2", deps=("t1",))),
        steps=(
            Step(
                1,
                START,
                Call(Op.CLAIM, "t1", agent="ü-agent", ttl=5 * MS),
                Outcome(task=claimed),
                (Allowed(None, "SPEC 3.1", "task 't1' is open"),),
            ),
            Step(2, START, advance=2 * MS, note="to one tick before L1's until"),
            Step(
                3,
                START + 2 * MS,
                Call(Op.RELEASE, "t1"),
                Outcome(error="LeaseLostError", message="it's '''quoted''' with a \\ and \"x\""),
                (lost,),
                token_ref="L1:one char longer",
            ),
            Step(
                4,
                START + 2 * MS,
                Call(Op.COMPLETE, "t2", token="raw-token"),
                Outcome(error="LeaseLostError", message="not claimed"),
                (lost,),
                token_ref="=raw-token",
            ),
            Step(
                5,
                START + 2 * MS,
                Call(Op.RENEW, "t1", ttl=timedelta(0)),
                Outcome(task=forever),
                (Allowed(None, "SPEC 3.5", "live lease"),),
                token_ref="L1",
            ),
            Step(6, START + 2 * MS, advance=timedelta(0)),
        ),
        verdict=verdict,
        target="taskboard.hosts.memory:MemoryBoard",
        created="2026-01-01T00:00:00+00:00",
    )


# -- writing: where and when a trace file appears --------------------------------------------------


def test_trace_dir_attribute_writes_one_file_for_the_final_failure(recorded: Recorded) -> None:
    """The trace_dir attribute gets exactly one trace file, and it wins over the env var."""
    assert sorted(recorded.directory.iterdir()) == [recorded.file]
    assert re.fullmatch(r"trace-spec-[0-9a-z-]+-[0-9a-f]{10}\.json", recorded.file.name)
    assert list(recorded.env_directory.iterdir()) == []


def test_violation_carries_its_trace_and_file(recorded: Recorded, trace: Trace) -> None:
    """The ContractViolation has .trace ending at .step, and .trace_file holds that shrunk run."""
    violation = recorded.violation
    assert violation.step is not None
    assert violation.trace
    assert violation.trace[-1] == violation.step
    assert trace.verdict is not None
    assert trace.verdict.step == violation.step.index
    assert trace.verdict.clause == violation.clause
    assert outline(trace.steps) == outline(violation.trace)
    assert trace.target.endswith(":TakeoverMachine")
    assert str(violation).startswith(trace.verdict.report)
    assert f"trace written to {recorded.file}" in str(violation)
    assert f"taskboard replay {recorded.file}" in str(violation)


def test_env_var_names_the_trace_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With no trace_dir attribute, TASKBOARD_TRACE_DIR gets the one trace file."""
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path / "from-env"))
    violation = run_mutant()
    assert violation.trace_file is not None
    assert list((tmp_path / "from-env").iterdir()) == [Path(violation.trace_file)]
    assert load_trace(violation.trace_file).verdict is not None


def test_no_trace_dir_writes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without a trace_dir attribute or TASKBOARD_TRACE_DIR, no trace file is written anywhere."""
    monkeypatch.delenv(TRACE_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    violation = run_mutant()
    assert violation.trace_file is None
    assert violation.trace  # the trace is still reported, only not written
    assert "trace written to" not in str(violation)
    assert list(tmp_path.rglob("*")) == []


def test_same_failure_found_twice_is_one_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding the same shrunk failure twice into one trace dir leaves one file."""
    monkeypatch.setattr(TakeoverMachine, "trace_dir", str(tmp_path))
    first, second = run_mutant(), run_mutant()
    assert outline(first.trace) == outline(second.trace)  # the same failure, twice
    assert len(list(tmp_path.iterdir())) == 1


def test_write_trace_names_the_file_by_clause(tmp_path: Path) -> None:
    """write_trace creates the directory and names the file after the clause and a digest."""
    written = write_trace(sample_trace(Verdict(4, "SPEC 3.3", "e", "o", "r")), tmp_path / "new")
    assert written.parent == tmp_path / "new"
    assert re.fullmatch(r"trace-spec-3-3-[0-9a-f]{10}\.json", written.name)
    passing = write_trace(sample_trace(), tmp_path / "new")
    assert passing.name.startswith("trace-passing-")


# -- round trip ------------------------------------------------------------------------------------


def test_recorded_file_round_trips(recorded: Recorded, trace: Trace) -> None:
    """parse_trace(trace_to_json(t)) == t for the recorded file, and the JSON text is the file's."""
    assert parse_trace(trace_to_json(trace)) == trace
    assert trace_to_json(trace) == recorded.file.read_text(encoding="utf-8")
    document = json.loads(recorded.file.read_text(encoding="utf-8"))
    assert (document["schema"], document["version"]) == ("taskboard-trace", SCHEMA_VERSION)


@pytest.mark.parametrize("verdict", [None, Verdict(None, "SPEC 3.7", "a", "b", "report\n''' \\")])
def test_every_kind_of_step_round_trips(verdict: Verdict | None, tmp_path: Path) -> None:
    """Clock steps with notes, label/forgery/literal refs, no-expiry leases and verdicts survive."""
    sample = sample_trace(verdict)
    assert parse_trace(trace_to_json(sample)) == sample
    assert load_trace(write_trace(sample, tmp_path)) == sample


# -- replay ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("board", [TakeoverKeepsFence, TakeoverMachine], ids=["factory", "machine"])
def test_replay_fails_again_on_the_mutant(trace: Trace, board: Any) -> None:
    """Replaying the file on the mutant (as a factory or its machine) fails at the same step."""
    result = replay_trace(trace, board)
    assert not result.passed
    assert trace.verdict is not None
    assert result.violation is not None
    assert result.violation.step is not None
    assert result.violation.step.index == trace.verdict.step
    assert result.violation.clause == trace.verdict.clause
    assert result.steps_run == trace.verdict.step
    assert result.report == str(result.violation)


@pytest.mark.parametrize("board", [MemoryBoard, SQLiteBoard])
def test_replay_passes_on_a_correct_board(trace: Trace, board: Any) -> None:
    """A trace recorded on the mutant replays on the reference hosts, and passes there."""
    result = replay_trace(trace, board)
    assert result.passed, result.report
    assert result.violation is None
    assert result.steps_run == len(trace.steps)
    assert result.report == f"the trace passes: {len(trace.steps)} steps keep the contract"


def test_replay_maps_tokens_by_lease() -> None:
    """Stale, forged, other-task and literal tokens recorded on one board mean the same on another.

    (Replayed on a board that mints other tokens, every outcome is as recorded.)
    """
    machine = MemoryMachine()
    machine.start(deps={"t1": (), "t2": (), "t3": ()}, start_ticks=0)
    first = machine.claim("t1", "a1", 1)
    machine.advance_clock(1)
    machine.claim("t1", "a2", 5)  # a takeover at exactly until
    machine.act_with_lease("complete", first, 1)  # stale
    machine.act_with_wrong_token("release", "t1", "one char shorter")
    machine.claim("t2", "a1", 0)
    machine.act_with_wrong_token("release", "t1", "another task's")
    machine.misuse("complete", "t1", False)  # a literal empty token
    machine.renew("t1", 5, "latest")
    machine.complete("t1", "latest")
    machine.teardown()
    recorded = parse_trace(trace_to_json(machine.to_trace()))
    refs = [s.token_ref for s in recorded.steps if s.call is not None and s.call.op is not Op.CLAIM]
    assert refs == ["L1", "L2:one char shorter", "L3", "=", "L2", "L2"]
    for board in (MemoryBoard, SQLiteBoard):
        result = replay_trace(recorded, board)
        assert result.passed, result.report
        assert result.differences == (), board  # every outcome as recorded: tokens mapped


def test_replay_notes_differences_from_the_recording(trace: Trace) -> None:
    """A recorded outcome the board no longer gives is noted; the board's own outcome is judged."""
    step = next(s for s in trace.steps if s.call is not None and s.call.op is Op.CLAIM)
    assert step.outcome is not None
    assert step.outcome.error is None
    changed = dataclasses.replace(step, outcome=Outcome(error="TakenError"))
    steps = tuple(changed if s is step else s for s in trace.steps)
    result = replay_trace(dataclasses.replace(trace, steps=steps), MemoryBoard)
    assert result.passed, result.report
    assert f"step {step.index}: recorded TakenError, now success (allowed)" in result.differences


# -- the regression test it renders ----------------------------------------------------------------


def test_rendered_regression_test_is_valid_python(trace: Trace) -> None:
    """render_regression_test returns a module that parses, named after the clause or as asked."""
    assert trace.verdict is not None
    source = render_regression_test(trace, MUTANT_TARGET)
    tree = ast.parse(source)
    tests = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    slug = re.sub(r"[^a-z0-9]+", "_", trace.verdict.clause.lower()).strip("_")
    assert tests == [f"test_replays_{slug}"]
    named = ast.parse(render_regression_test(trace, MUTANT_TARGET, name="test_my_bug"))
    assert [n.name for n in named.body if isinstance(n, ast.FunctionDef)] == ["test_my_bug"]


@pytest.mark.parametrize("verdict", [None, Verdict(3, "SPEC 3.2", "a", "b", "r ''' \\")])
def test_rendered_trace_literal_is_the_trace(verdict: Verdict | None) -> None:
    """The TRACE literal in the rendered module (raw or repr'd) parses back to the trace."""
    sample = sample_trace(verdict)
    namespace: dict[str, Any] = {}
    exec(compile(render_regression_test(sample, sample.target), "<rendered>", "exec"), namespace)
    assert parse_trace(namespace["TRACE"]) == sample


def test_rendered_regression_test_runs_under_pytest(
    trace: Trace, pytester: pytest.Pytester
) -> None:
    """The rendered test fails under pytest for the mutant and passes for MemoryBoard."""
    pytester.makepyfile(
        test_mutant_regression=render_regression_test(trace, MUTANT_TARGET),
        test_memory_regression=render_regression_test(trace, "taskboard.hosts.memory:MemoryBoard"),
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: contract violation at step *"])
    assert "FAILED test_mutant_regression.py::test_replays_" in result.stdout.str()


def test_rendered_regression_test_for_a_nested_attribute(
    trace: Trace, pytester: pytest.Pytester
) -> None:
    """A board target with a dotted attribute (module:Outer.Board) renders a runnable test."""
    pytester.makepyfile(
        nested_boards="from taskboard.hosts.memory import MemoryBoard\n\n\n"
        "class Boards:\n    Memory = MemoryBoard\n",
    )
    pytester.makepyfile(test_nested=render_regression_test(trace, "nested_boards:Boards.Memory"))
    pytester.syspathinsert()
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


# -- loading errors --------------------------------------------------------------------------------


def _set(path: Sequence[str | int], value: object) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        target: Any = document
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(path: Sequence[str | int]) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        target: Any = document
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


BAD_FIELDS = [
    pytest.param(_set(["schema"], "other"), "schema: expected 'taskboard-trace'", id="schema"),
    pytest.param(
        _set(["version"], SCHEMA_VERSION + 1),
        f"version: trace schema version {SCHEMA_VERSION + 1} is newer than this taskboard reads",
        id="newer-version",
    ),
    pytest.param(_set(["version"], True), "version: expected int, got bool", id="bool-version"),
    pytest.param(_set(["steps", 0, "op"], 5), "steps[0].op: expected str, got int", id="op-type"),
    pytest.param(_set(["steps", 0, "op"], "steal"), "steps[0].op: 'steal' is not one of", id="op"),
    pytest.param(_delete(["steps", 0, "agent"]), "steps[0].agent: missing", id="missing"),
    pytest.param(
        _set(["steps", 0, "outcome", "task", "lease", "fence"], "1"),
        "steps[0].outcome.task.lease.fence: expected int, got str",
        id="nested-type",
    ),
    pytest.param(
        _set(["steps", 0, "ttl_us"], -1), "steps[0].ttl_us: must be non-negative", id="neg-ttl"
    ),
    pytest.param(
        _set(["steps", 1, "advance_us"], -5),
        "steps[1].advance_us: must be non-negative",
        id="neg-advance",
    ),
    pytest.param(_set(["steps", 1, "index"], 7), "steps[1].index: expected 2, got 7", id="index"),
    pytest.param(
        _set(["tasks", 1, "deps", 0], 3), "tasks[1].deps[0]: expected str, got int", id="dep"
    ),
    pytest.param(
        _set(["start"], "2026-01-01T00:00:00"), "start: needs a UTC offset", id="naive-time"
    ),
    pytest.param(_set(["resolution_us"], 0), "resolution_us: must be positive", id="resolution"),
    pytest.param(
        _set(["steps", 0, "ttl_us"], 10**30),
        "steps[0].ttl_us",
        id="huge-ttl",
    ),
    pytest.param(
        _set(["declared_ops"], ["renew", 3]),
        "declared_ops: expected a list of op names",
        id="declared-ops",
    ),
]


def test_declared_ops_round_trip_and_a_trace_without_them_reads_as_none() -> None:
    """A board command's declared ops are written and read back; a trace from before
    version 5 (no ``declared_ops``) reads with none."""
    trace = dataclasses.replace(sample_trace(), declared_ops=("renew", "connect"))
    assert parse_trace(trace_to_json(trace)).declared_ops == ("renew", "connect")
    document = json.loads(trace_to_json(sample_trace()))
    del document["declared_ops"]
    document["version"] = 4
    assert parse_trace(json.dumps(document)).declared_ops is None


@pytest.mark.parametrize(("mutate", "message"), BAD_FIELDS)
def test_bad_field_is_named_by_its_path(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    """A field of the wrong kind or value is a TraceFileError naming the file and JSON path."""
    document = json.loads(trace_to_json(sample_trace()))
    mutate(document)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(TraceFileError) as caught:
        load_trace(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param(None, "cannot read the trace", id="missing"),
        pytest.param(b'{"schema": ', "not JSON", id="not-json"),
        pytest.param(b"\xff\xfe not utf-8", "cannot read the trace", id="not-utf8"),
        pytest.param(b"[]", "top level: expected an object, got list", id="not-an-object"),
        pytest.param(b"{}", "schema: missing", id="empty-object"),
    ],
)
def test_unreadable_file_is_a_trace_file_error(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    """A missing, non-JSON or non-object file is a TraceFileError (a ValueError) naming it."""
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(message)) as caught:
        load_trace(path)
    assert isinstance(caught.value, TraceFileError)
    assert str(caught.value).startswith(str(path))


# -- token references ------------------------------------------------------------------------------


def test_token_ref_names_the_lease_a_forgery_or_a_literal() -> None:
    """token_ref gives a known token's label, label:forgery for a forgery, else =literal."""
    labels = {"tok-a": "L1", "tok-b": "L2"}
    assert token_ref("tok-b", labels) == "L2"
    assert token_ref("tok-b", labels, forgery="other case", of="tok-b") == "L2:other case"
    assert token_ref("never-seen", labels) == "=never-seen"
    assert token_ref("", labels) == "="
    assert token_ref("L1", labels) == "=L1"  # a literal that looks like a label stays literal


def test_resolve_token_maps_labels_to_this_boards_tokens() -> None:
    """resolve_token reads L-labels, forgeries of them and literals against this board's tokens."""
    tokens = {"L1": "Abc123", "L2": "zz9"}
    assert resolve_token("L2", tokens) == "zz9"
    assert resolve_token("L1:one char longer", tokens) == "Abc1230"
    assert resolve_token("L1:other case", tokens) == "aBC123"
    assert resolve_token("=L1", tokens) == "L1"
    assert resolve_token("==x:y", tokens) == "=x:y"
    assert resolve_token("=", tokens) == ""


def test_unminted_label_resolves_to_a_token_no_claim_returned() -> None:
    """A label this board never minted resolves to a token that is none of its tokens."""
    tokens = {"L1": "tok-1"}
    unminted = resolve_token("L5", tokens)
    assert unminted not in tokens.values()
    assert unminted
    assert resolve_token("L5", tokens) == unminted  # the same label, the same token
    assert resolve_token("L5:empty", tokens) == ""


@pytest.mark.parametrize("how", FORGERIES)
def test_forgeries_round_trip_through_references(how: str) -> None:
    """A forgery recorded as a reference resolves to the same forgery of the new board's token."""
    recorded = token_ref(
        "recorded-token", {"recorded-token": "L3"}, forgery=how, of="recorded-token"
    )
    assert resolve_token(recorded, {"L3": "Replay-Token"}) == forge("Replay-Token", how)


@pytest.mark.parametrize("token", ["Abc123", "abc", "123", "X"])
@pytest.mark.parametrize("how", FORGERIES)
def test_forge_never_returns_the_token(token: str, how: str) -> None:
    """Every forgery of a token differs from it (even a token with no letters to swap)."""
    assert forge(token, how) != token


def test_forge_makes_close_misses() -> None:
    """Each forgery is the close miss it is named for; an unknown kind is a ValueError."""
    assert forge("Abc1", "never issued") == "forged-token-0000"
    assert forge("Abc1", "empty") == ""
    assert forge("Abc1", "one char longer") == "Abc10"
    assert forge("Abc1", "one char shorter") == "Abc"
    assert forge("Abc1", "other case") == "aBC1"
    assert forge("123", "other case") == "123X"
    with pytest.raises(ValueError, match="unknown forgery 'typo'"):
        forge("Abc1", "typo")
