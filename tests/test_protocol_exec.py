"""Boards checked as child processes over the board protocol (SPEC 10)."""

from __future__ import annotations

import io
import json
import py_compile
import runpy
import shlex
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard import (
    ClaimRequest,
    ManualClock,
    RenewingBoard,
    SystemClock,
    TakenError,
    Task,
    concurrent_claim,
)
from taskboard._cli import main
from taskboard._protocol import spares as _spares
from taskboard._protocol.codec import encode_task
from taskboard.boardtest import BoardContract
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.mutants import RenewWithoutTokenCheck
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.model import Call, ContractViolation, Op
from taskboard.protocol import ExecStartError, ProtocolError, end_spares, exec_board, serve
from taskboard.stateful import BoardMachine, load_trace, write_trace
from taskboard.stateful._session import Session, end_example

TICK = timedelta(milliseconds=1)
SCRIPT = Path(__file__).with_name("protocol_boards.py")
# Each example starts a process (about 0.3 s for a Python child), so runs are short.
QUICK = settings(max_examples=10, database=None, derandomize=True, deadline=None)


def command(name: str) -> list[str]:
    return [sys.executable, str(SCRIPT), name]


@pytest.fixture
def opened() -> Iterator[list[Any]]:
    """Boards a test started; every one is closed afterwards, whatever the test did."""
    boards: list[Any] = []
    yield boards
    for board in boards:
        board.close()


def start(opened: list[Any], name: str, *tasks: Task, timeout: float = 10.0) -> Any:
    board = exec_board(command(name), tasks or (Task("t1"),), ManualClock(), timeout=timeout)
    opened.append(board)
    return board


def exec_machine(name: str) -> type[BoardMachine]:
    return BoardMachine.for_command(command(name))


def test_a_correct_board_over_the_protocol_passes_the_machine() -> None:
    """MemoryBoard served as a child process: BoardMachine finds no divergence."""
    run_state_machine_as_test(exec_machine("memory"), settings=QUICK)


def test_a_buggy_board_over_the_protocol_is_caught() -> None:
    """A renew without an ownership check, served as a child process, is a violation."""
    with pytest.raises(ContractViolation, match=r"SPEC 3\.5"):
        run_state_machine_as_test(
            exec_machine("RenewWithoutTokenCheck"),
            # Only the catch is pinned here: shrinking would start a process per attempt. The
            # run stops at the first violation; the room up to 200 examples is for a run whose
            # draws differ (one clean-clone CI run on a loaded machine missed it in 50).
            settings=settings(QUICK, max_examples=200, phases=[Phase.generate]),
        )


def test_for_command_takes_clients_nemesis_and_durability_from_hello() -> None:
    """BoardMachine.for_command and BoardContract.for_command: clients are processes only
    when the child declares connect, and durable is the child's own."""
    with_clients = BoardMachine.for_command(command("sqlite"))
    without = BoardMachine.for_command(command("memory"))
    assert with_clients.open_client is not BoardMachine.open_client
    assert without.open_client is BoardMachine.open_client
    contract = BoardContract.for_command(shlex.join(command("sqlite")))
    assert issubclass(contract, BoardContract)
    assert contract().has_clients
    assert not BoardContract.for_command(command("memory"))().has_clients
    assert contract.durable is True


def test_for_command_takes_the_expired_lease_policy_from_hello() -> None:
    """SPEC 3.4: a child's hello may declare its expired_lease_policy, which the machine then
    checks; one given to for_command wins, and a child that declares none gets 'either'."""
    assert BoardMachine.for_command(command("memory")).expired_lease_policy == "accept"
    assert BoardMachine.for_command(command("sqlite")).expired_lease_policy == "reject"
    undeclared = BoardMachine.for_command(command("memory-undeclared"))
    assert undeclared.expired_lease_policy == "either"
    chosen = BoardMachine.for_command(command("memory"), expired_lease_policy="reject")
    assert chosen.expired_lease_policy == "reject"


def test_serve_declares_the_boards_expired_lease_policy_in_hello() -> None:
    """serve() answers hello with the board class's expired_lease_policy when it has one."""

    class Undeclared(MemoryBoard):
        expired_lease_policy = None  # type: ignore[assignment]

    for board, declared in ((SQLiteBoard, "reject"), (MemoryBoard, "accept"), (Undeclared, None)):
        written = io.BytesIO()
        serve(board, stdin=io.BytesIO(b'{"id": 1, "op": "hello", "protocol": 1}\n'), stdout=written)
        assert json.loads(written.getvalue()).get("expired_lease_policy") == declared


def test_a_hello_with_an_unknown_expired_lease_policy_is_a_protocol_error() -> None:
    """A policy in hello other than either, accept or reject is refused, naming the field."""
    answer = {"protocol": 1, "name": "x", "ops": [], "durable": True}
    with pytest.raises(ProtocolError, match="expired_lease_policy"):
        _spares.Hello({**answer, "expired_lease_policy": "sometimes"})
    assert _spares.Hello({**answer, "expired_lease_policy": "reject"}).expired_lease_policy == (
        "reject"
    )


def test_for_command_of_a_child_that_exits_is_exec_start_error() -> None:
    """A command that dies before hello cannot become a machine or a contract class."""
    with pytest.raises(ExecStartError, match="permission denied"):
        BoardMachine.for_command(command("exit"))
    with pytest.raises(ExecStartError, match="permission denied"):
        BoardContract.for_command(command("exit"))


def test_the_board_has_exactly_the_optional_ops_the_child_declared(opened: list[Any]) -> None:
    """A child that declares renew and fail is a RenewingBoard with fail."""
    board = start(opened, "memory")
    assert isinstance(board, RenewingBoard)
    assert callable(getattr(board, "fail", None))


def test_manual_time_reaches_the_child(opened: list[Any]) -> None:
    """The child's clock is the checker's: a lease expires when the manual clock says so."""
    clock = ManualClock()
    board = exec_board(command("memory"), [Task("t1")], clock)
    opened.append(board)
    board.claim("t1", "a1", ClaimRequest(ttl=TICK * 10))
    with pytest.raises(TakenError):
        board.claim("t1", "a2", ClaimRequest(ttl=TICK))
    clock.advance(TICK * 10)
    assert board.claim("t1", "a2", ClaimRequest(ttl=TICK)).owner == "a2"


def test_clients_are_processes_of_one_storage(opened: list[Any]) -> None:
    """open_client starts another process that connects to the storage init named; racing
    clients of a correct SQLite board have exactly one winner."""
    board = start(opened, "sqlite", Task("race"))
    clients = [board.open_client() for _ in range(4)]
    opened.extend(clients)
    assert len({c.child.process.pid for c in clients}) == 4
    assert concurrent_claim(board, "race", ["a1", "a2"] * 2, clients=clients) == 1


def test_a_client_process_keeps_the_checkers_manual_time(opened: list[Any]) -> None:
    """A client process that connected hears the manual clock before its first call: the
    lease it grants ends one ttl after the checker's now, not the wall clock's."""
    clock = ManualClock()
    board = exec_board(command("sqlite"), [Task("t1")], clock)
    opened.append(board)
    client = board.open_client()
    opened.append(client)
    got = client.claim("t1", "a1", ClaimRequest(ttl=TICK * 5))
    assert got.lease is not None
    assert got.lease.until == clock.now() + TICK * 5


def test_every_open_process_hears_the_time_before_any_gets_a_request(
    opened: list[Any], tmp_path: Path
) -> None:
    """In manual mode, once the clock moved, a call on one process first sends set_time to
    the board's every open process (SPEC 10), the clients that get no call included."""
    # Each process copies what it reads on stdin into a log of its own.
    spy = [
        "sh",
        "-c",
        f'tee "{tmp_path}/$$.log" | {shlex.join(command("sqlite"))}',
    ]
    clock = ManualClock()
    board = exec_board(spy, [Task("t1")], clock)
    opened.append(board)
    clients = [board.open_client(), board.open_client()]
    opened.extend(clients)
    clock.advance(TICK * 7)
    board.list_tasks()
    for process in (*clients, board):  # set_time is not waited for: let every log be whole
        process.close()
    end_spares()
    expected = int(clock.now().timestamp()) * 1_000_000 + clock.now().microsecond
    heard = [
        [json.loads(line) for line in log.read_text().splitlines()]
        for log in tmp_path.glob("*.log")
    ]
    in_use = [
        requests for requests in heard if any(r["op"] in ("init", "connect") for r in requests)
    ]
    assert len(in_use) == 3
    for requests in in_use:
        assert {"op": "set_time", "now": expected} in [
            {k: v for k, v in r.items() if k != "id"} for r in requests
        ]


def spied(tmp_path: Path, name: str) -> list[str]:
    """The command of protocol board ``name``, each of its processes copying what it reads on
    stdin into a log of its own in ``tmp_path``."""
    return ["sh", "-c", f'tee "{tmp_path}/$$.log" | {shlex.join(command(name))}']


def requests_heard(tmp_path: Path) -> list[list[str]]:
    """The ops each spied process read, in order."""
    return [
        [json.loads(line)["op"] for line in log.read_text().splitlines()]
        for log in sorted(tmp_path.glob("*.log"))
        if "init" in log.read_text() or "connect" in log.read_text()
    ]


def test_a_call_and_the_list_behind_it_go_out_together(opened: list[Any], tmp_path: Path) -> None:
    """On the manual clock a board's only process gets the list the checker reads after a
    call in the same write as the call, and list_tasks answers from it: one round trip."""
    board = exec_board(spied(tmp_path, "sqlite"), [Task("t1")], ManualClock())
    opened.append(board)
    lease = board.claim("t1", "a1", ClaimRequest(ttl=TICK)).lease
    (task,) = board.list_tasks()
    assert task.lease == lease
    board.close()
    end_spares()  # the closed process has exited, and its log is whole
    assert requests_heard(tmp_path) == [["hello", "init", "claim", "list", "close"]]


def test_a_list_sent_ahead_is_not_taken_after_another_request(
    opened: list[Any], tmp_path: Path
) -> None:
    """A list sent behind a call answers only the next list_tasks with nothing in between:
    after a second call the board is listed anew, and shows that call's write."""
    board = exec_board(spied(tmp_path, "sqlite"), [Task("t1")], ManualClock())
    opened.append(board)
    lease = board.claim("t1", "a1", ClaimRequest(ttl=TICK)).lease
    assert lease is not None
    board.release("t1", lease.token)
    (task,) = board.list_tasks()
    assert task.lease is None
    board.close()
    end_spares()
    heard = ["hello", "init", "claim", "list", "release", "list", "close"]
    assert requests_heard(tmp_path) == [heard]


def test_no_list_goes_ahead_once_a_client_shares_the_storage(
    opened: list[Any], tmp_path: Path
) -> None:
    """A list sent ahead before a client joined is not taken: the list shows the client's
    write, and calls made while clients are open send no list ahead."""
    board = exec_board(spied(tmp_path, "sqlite"), [Task("t1"), Task("t2")], ManualClock())
    opened.append(board)
    board.claim("t1", "a1", ClaimRequest(ttl=TICK))
    client = board.open_client()
    opened.append(client)
    client.claim("t2", "a2", ClaimRequest(ttl=TICK))
    assert {t.id: t.owner for t in board.list_tasks()} == {"t1": "a1", "t2": "a2"}
    (first,) = [heard for heard in requests_heard(tmp_path) if "init" in heard]
    (second,) = [heard for heard in requests_heard(tmp_path) if "connect" in heard]
    assert first.count("list") == 2  # the one sent ahead, read and dropped; then a fresh one
    assert second == ["hello", "connect", "set_time", "claim"]


def test_set_time_goes_out_without_a_round_trip_and_its_error_comes_with_the_next_answer(
    opened: list[Any], tmp_path: Path
) -> None:
    """set_time is written and its answer read before the next request's: a board that
    answers set_time with an unknown code is a fault at that next request, naming set_time."""
    script = tmp_path / "bad_time.py"
    script.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    r = json.loads(line)\n"
        "    a = {'id': r['id'], 'ok': True}\n"
        "    if r['op'] == 'hello':\n"
        "        a.update(protocol=1, name='bad time', ops=[], durable=False)\n"
        "    elif r['op'] == 'init':\n"
        "        a['storage'] = 'none'\n"
        "    elif r['op'] == 'set_time':\n"
        "        a.update(ok=False, error='clock_broken', message='no')\n"
        "    elif r['op'] == 'list':\n"
        "        a['tasks'] = []\n"
        "    print(json.dumps(a), flush=True)\n"
    )
    clock = ManualClock()
    board = exec_board([sys.executable, str(script)], [Task("t1")], clock)
    opened.append(board)
    clock.advance(TICK)
    board._processes.keep_time()  # the time goes out; nothing is read yet
    with pytest.raises(ProtocolError, match=r"set_time.*clock_broken"):
        board.list_tasks()


def test_a_spare_process_waits_for_the_next_board_and_end_spares_ends_it(
    opened: list[Any],
) -> None:
    """A board's process is taken from a spare that had answered hello, and taking it starts
    the next; end_spares ends every spare nobody took."""
    start(opened, "memory")
    second = start(opened, "memory")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        waiting = [c for c in _spares._SPARES._untaken if c.argv == second.child.argv]
        if waiting:
            break
        time.sleep(0.05)
    assert waiting, "no spare was started for the next board"
    assert second.child not in waiting
    end_spares()
    assert all(child.exit_code is not None for child in waiting)
    assert not _spares._SPARES._untaken


def test_a_child_that_exits_at_once_is_a_usage_error_with_its_stderr() -> None:
    """A command that dies before hello: ExecStartError showing what it wrote on stderr."""
    with pytest.raises(ExecStartError, match="permission denied"):
        exec_board(command("exit"), [Task("t1")], ManualClock(), timeout=5)


def test_a_child_that_never_answers_hello_is_a_usage_error_and_is_ended() -> None:
    """No answer to hello within the timeout: ExecStartError, and no process is left."""
    with pytest.raises(ExecStartError, match=r"no answer within 0.5 s") as caught:
        exec_board(command("silent"), [Task("t1")], ManualClock(), timeout=0.5)
    assert "never comes" in str(caught.value)


def test_a_malformed_answer_is_a_protocol_fault_and_ends_the_child(opened: list[Any]) -> None:
    """A claim answered with a line that is not JSON: a ProtocolError naming the op and the
    line; the process is ended and later calls fail at once."""
    board = start(opened, "garbage")
    with pytest.raises(ProtocolError, match=r"'claim'.*not JSON.*this is not json"):
        board.claim("t1", "a1", ClaimRequest())
    assert board.child.exit_code is not None
    with pytest.raises(ProtocolError, match="broke earlier"):
        board.list_tasks()


def test_close_ends_the_process(opened: list[Any]) -> None:
    """close() asks the child to close, and the process exits with status 0 by the time
    end_spares returns (it exits in the background: the next example does not wait)."""
    board = start(opened, "memory")
    board.close()
    end_spares()
    assert board.child.exit_code == 0


@pytest.mark.parametrize("bad", ["", "'unclosed"])
def test_a_command_that_does_not_split_is_a_usage_error(bad: str) -> None:
    """An empty command, or one with an open quote, is refused before anything starts."""
    with pytest.raises(ExecStartError, match="board command"):
        exec_board(bad, [Task("t1")], ManualClock())


def test_a_command_that_does_not_exist_is_a_usage_error() -> None:
    """A command that cannot be started is an ExecStartError naming it."""
    with pytest.raises(ExecStartError, match="cannot start the board command"):
        exec_board("/nonexistent/board --flag", [Task("t1")], ManualClock())


# -- taskboard fuzz --exec and replay --exec -------------------------------------------------------


def exec_option(name: str) -> str:
    return shlex.join(command(name))


def test_fuzz_exec_passes_a_correct_board(capsys: pytest.CaptureFixture[str]) -> None:
    """taskboard fuzz --exec on a correct child: exit 0, and the summary names the command."""
    code = main(["fuzz", "--exec", exec_option("memory"), "--max-examples", "5", "--quiet"])
    assert code == 0
    captured = capsys.readouterr()
    assert "no violation found" in captured.out
    assert "exec:" in captured.err


def test_fuzz_exec_of_a_child_that_exits_at_once_is_exit_2_with_its_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A command that dies before hello: exit 2, its stderr shown once, no traceback."""
    assert main(["fuzz", "--exec", exec_option("exit"), "--budget", "5s", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("permission denied") == 1
    assert "Traceback" not in err


def test_fuzz_with_a_target_and_exec_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """A target and --exec together: exit 2 saying to pass one."""
    assert main(["fuzz", "taskboard.hosts.memory:MemoryBoard", "--exec", "x"]) == 2
    assert "not both" in capsys.readouterr().err


def test_replay_exec_replays_a_trace_on_a_child(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A trace of a Python mutant replays on the same mutant served as a child: exit 1."""
    machine = BoardMachine.for_board(RenewWithoutTokenCheck, trace_dir=str(tmp_path))
    with pytest.raises(ContractViolation):
        run_state_machine_as_test(machine, settings=settings(QUICK, max_examples=100))
    (trace,) = tmp_path.glob("*.json")
    capsys.readouterr()
    code = main(["replay", str(trace), "--exec", exec_option("RenewWithoutTokenCheck")])
    assert code == 1
    assert "SPEC 3.5" in capsys.readouterr().out
    assert main(["replay", str(trace), "--exec", exec_option("memory")]) == 0


def test_the_python_server_answers_an_exchange_as_the_protocol_says() -> None:
    """serve() answers hello, init, claim, a taken claim, set_time, a lost lease and close,
    one line each, in order."""
    requests = [
        {"id": 1, "op": "hello", "protocol": 1},
        {"id": 2, "op": "init", "tasks": [encode_task(Task("t1"))], "clock": "manual", "now": 0},
        {"id": 3, "op": "claim", "task": "t1", "agent": "a1", "ttl": 5000},
        {"id": 4, "op": "claim", "task": "t1", "agent": "a2", "ttl": 5000},
        {"id": 5, "op": "set_time", "now": 5000},
        {"id": 6, "op": "claim", "task": "t1", "agent": "a2", "ttl": 0},
        {"id": 7, "op": "release", "task": "t1", "token": "nope"},
        {"id": 8, "op": "close"},
    ]
    written = io.BytesIO()
    lines = b"".join(json.dumps(r).encode() + b"\n" for r in requests)
    serve(MemoryBoard, stdin=io.BytesIO(lines), stdout=written)
    answers = [json.loads(line) for line in written.getvalue().splitlines()]
    assert [a["id"] for a in answers] == list(range(1, 9))
    assert answers[0]["ops"] == ["renew", "fail"]
    assert answers[2]["task"]["lease"]["until"] == 5000
    assert answers[3]["error"] == "taken"
    assert answers[5]["task"]["owner"] == "a2"
    assert answers[6]["error"] == "lease_lost"
    assert answers[7] == {"id": 8, "ok": True}


@pytest.mark.parametrize(
    ("board", "options", "said"),
    [
        ("memory", ["--clock", "wall"], "wall clock"),
        ("sqlite", ["--parallel"], "each thread on a client of its own"),
    ],
)
def test_fuzz_exec_runs_in_wall_mode_and_races_client_processes(
    board: str, options: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--exec in wall mode (the child keeps its own time), and in parallel mode with a
    process per client of a child that declares connect: a correct board passes."""
    code = main(["fuzz", "--exec", exec_option(board), "--max-examples", "3", "--quiet", *options])
    captured = capsys.readouterr()
    assert code == 0, captured.out
    assert said in captured.out + captured.err


@pytest.mark.parametrize("mode", ["manual", "wall"])
def test_a_client_process_hears_the_clock_mode_when_it_connects(
    opened: list[Any], tmp_path: Path, mode: str
) -> None:
    """SPEC 10: connect carries the run's clock mode and the checker's time, as init does, so
    a client process never guesses whether the checker sets its time."""
    clock = ManualClock() if mode == "manual" else SystemClock()
    board = exec_board(spied(tmp_path, "sqlite"), [Task("t1")], clock, clock_mode=mode)
    opened.append(board)
    client = board.open_client()
    opened.append(client)
    client.list_tasks()
    for process in (client, board):
        process.close()
    end_spares()
    heard = [
        json.loads(line) for log in tmp_path.glob("*.log") for line in log.read_text().splitlines()
    ]
    (init,) = [r for r in heard if r["op"] == "init"]
    (connect,) = [r for r in heard if r["op"] == "connect"]
    assert connect["clock"] == init["clock"] == mode
    assert isinstance(connect["now"], int)
    assert connect["now"] >= init["now"]


# -- traces of a board command: replay as printed, and its regression test ----------------------


def exec_trace(tmp_path: Path, name: str) -> Path:
    """The trace of a renew with a never-issued token on the board command ``name``, written
    where a failing run writes it."""
    machine = BoardMachine.for_command(command(name))
    session = Session(machine(), [Task("t1")], datetime(2026, 1, 1, tzinfo=UTC))
    try:
        session.perform(Call(Op.CLAIM, "t1", agent="a1", ttl=5 * TICK))
        with pytest.raises(ContractViolation) as caught:
            session.perform(Call(Op.RENEW, "t1", token="never-issued", ttl=5 * TICK))
    finally:
        end_example(session)
    recording = caught.value.recording
    assert recording is not None
    return write_trace(recording, tmp_path)


def test_an_exec_trace_names_its_command_and_declared_ops(tmp_path: Path) -> None:
    """A board command's trace names it as its target, quoted as a shell would, with the
    clock mode and the ops its hello declared."""
    trace = load_trace(exec_trace(tmp_path, "RenewWithoutTokenCheck"))
    assert trace.target == "exec:" + shlex.join(command("RenewWithoutTokenCheck"))
    assert set(trace.declared_ops or ()) == {"renew", "fail"}
    assert trace.clock_mode == "manual"


def test_the_printed_replay_of_an_exec_trace_works_verbatim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``taskboard replay FILE`` of an --exec trace, with nothing else, runs the command it
    names and fails again: exit 1."""
    path = exec_trace(tmp_path, "RenewWithoutTokenCheck")
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out
    assert "SPEC 3.5" in out


def test_emit_test_of_an_exec_trace_compiles_fails_on_the_bug_and_passes_when_fixed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--emit-test of an --exec trace writes a module that compiles, with the command as a
    quoted string; its test fails on the buggy command and passes on a fixed one."""
    path = exec_trace(tmp_path, "RenewWithoutTokenCheck")
    emitted = tmp_path / "test_regression.py"
    assert main(["replay", str(path), "--emit-test", str(emitted)]) == 1
    py_compile.compile(str(emitted), doraise=True)
    source = emitted.read_text(encoding="utf-8")
    assert f"COMMAND = {shlex.join(command('RenewWithoutTokenCheck'))!r}" in source
    buggy = runpy.run_path(str(emitted))
    with pytest.raises(AssertionError, match=r"SPEC 3\.5"):
        buggy["test_replays_spec_3_5"]()
    fixed = tmp_path / "test_fixed.py"
    fixed.write_text(source.replace("RenewWithoutTokenCheck", "memory"), encoding="utf-8")
    runpy.run_path(str(fixed))["test_replays_spec_3_5"]()


@pytest.mark.slow
@pytest.mark.parametrize("clock", ["manual", "wall"])
def test_fuzz_exec_shrinks_a_failure_by_replay(
    clock: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fuzz --exec shrinks a buggy command's failure by replay to a few steps, on the manual
    and the wall clock, and its printed replay command works as printed."""
    trace_dir = ["--trace-dir", str(tmp_path), "--database", str(tmp_path / "db")]
    budgets = ["--budget", "60s", "--shrink-budget", "60s", "--seed", "3", "--quiet"]
    run = ["fuzz", "--exec", exec_option("RenewWithoutTokenCheck"), "--clock", clock]
    assert main([*run, *budgets, *trace_dir]) == 1
    out = capsys.readouterr().out
    assert "shrunk by replay from" in out
    printed = out.rsplit("replay it with: taskboard ", 1)[1].splitlines()[0].split()
    assert len(load_trace(printed[1]).steps) <= 5
    assert main(printed) == 1
