"""Clients (SPEC 8): the open_client/close_client hooks, threads on clients of their own in
the parallel mode, the criteria's clients=, BoardContract, and fuzz's concurrency by default."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import settings

from taskboard import (
    Board,
    ClaimRequest,
    Clock,
    ManualClock,
    Task,
    concurrent_claim,
    duplicate_token_submit,
)
from taskboard._profiles import CI
from taskboard.boardtest import BoardContract
from taskboard.hosts.client_mutants import CLIENT_MUTANTS, ClientLockedClaim
from taskboard.hosts.memory import MemoryBoard
from taskboard.hosts.sqlite import SQLiteBoard
from taskboard.model import Call, LinearizabilityResult, Op, Operation, Outcome
from taskboard.stateful import (
    TRACE_DIR_ENV,
    BoardMachine,
    ContractViolation,
    InfrastructureFault,
    run_parallel_state_machine,
    timeline_html,
)

FEW = settings(settings.get_profile(CI), max_examples=10)


class ClientView:
    """A client of one shared MemoryBoard: every call is recorded with this client's number."""

    def __init__(self, store: MemoryBoard, number: int, log: list[tuple[int, str]]) -> None:
        self.store, self.number, self.log = store, number, log
        self.closed = False

    def _record(self, op: str) -> None:
        assert not self.closed, f"client {self.number} used after close"
        self.log.append((self.number, op))

    def list_tasks(self) -> list[Task]:
        self._record("list")
        return self.store.list_tasks()

    def claim(self, task_id: str, agent: str, request: ClaimRequest) -> Task:
        self._record("claim")
        return self.store.claim(task_id, agent, request)

    def renew(self, task_id: str, token: str, request: ClaimRequest) -> Task:
        self._record("renew")
        return self.store.renew(task_id, token, request)

    def release(self, task_id: str, token: str) -> None:
        self._record("release")
        self.store.release(task_id, token)

    def complete(self, task_id: str, token: str) -> None:
        self._record("complete")
        self.store.complete(task_id, token)

    def close(self) -> None:
        self.closed = True


class RecordingStore(ClientView):
    """The board as made: client 0; ``open_client()`` hands out views numbered 1, 2, ..."""

    opened: ClassVar[list[ClientView]] = []
    log: ClassVar[list[tuple[int, str]]] = []

    def __init__(self, tasks: Sequence[Task], clock: Clock) -> None:
        super().__init__(MemoryBoard(tasks, clock), 0, RecordingStore.log)

    def open_client(self) -> ClientView:
        client = ClientView(self.store, len(RecordingStore.opened) + 1, self.log)
        RecordingStore.opened.append(client)
        return client


@pytest.fixture(autouse=True)
def _fresh_recording() -> None:
    RecordingStore.opened.clear()
    RecordingStore.log.clear()


def test_for_board_uses_the_factorys_own_open_client() -> None:
    """A factory with an open_client method makes a machine with clients; one without does not."""
    assert BoardMachine.for_board(RecordingStore).has_clients()
    assert not BoardMachine.for_board(MemoryBoard).has_clients()
    assert BoardMachine.for_board(MemoryBoard, open_client=lambda board: board).has_clients()


def test_parallel_threads_each_call_a_client_of_their_own() -> None:
    """In the parallel mode the prefix runs on the board and every thread on its own client,
    and every client is closed afterwards."""
    run_parallel_state_machine(BoardMachine.for_board(RecordingStore), settings=FEW)
    assert RecordingStore.opened
    assert all(client.closed for client in RecordingStore.opened)
    calls_by_client: dict[int, set[str]] = {}
    for number, op in RecordingStore.log:
        calls_by_client.setdefault(number, set()).add(op)
    assert any(number > 0 and ops - {"list"} for number, ops in calls_by_client.items())
    client_numbers = {number for number, op in RecordingStore.log if op != "list" and number}
    assert len(client_numbers) >= 2


def test_without_open_client_threads_share_the_board() -> None:
    """A machine without open_client runs every thread on the board itself."""
    machine = BoardMachine.for_board(lambda tasks, clock: RecordingStore(tasks, clock))
    assert not machine.has_clients()
    run_parallel_state_machine(machine, settings=FEW)
    assert {number for number, _ in RecordingStore.log} == {0}


def test_a_failing_open_client_is_an_infrastructure_fault() -> None:
    """open_client raising is reported as an infrastructure fault at open_client(board)."""

    def broken(board: object) -> object:
        raise ConnectionError("no second connection")

    machine = BoardMachine.for_board(MemoryBoard, open_client=broken, trace_target="")
    with pytest.raises(InfrastructureFault, match=r"open_client\(board\)"):
        run_parallel_state_machine(machine, settings=FEW)


def test_open_client_must_return_a_board() -> None:
    """open_client returning something that is no Board is a TypeError saying so."""
    machine = BoardMachine.for_board(MemoryBoard, open_client=lambda board: object())
    with pytest.raises(TypeError, match="open_client returned"):
        run_parallel_state_machine(machine, settings=FEW)


def test_concurrent_claim_races_one_client_per_agent() -> None:
    """concurrent_claim(clients=) has agent i claim through clients[i]."""
    board = RecordingStore([Task("t1")], ManualClock())
    clients = [board.open_client() for _ in range(4)]
    assert concurrent_claim(board, "t1", ["a", "b", "a", "c"], clients=clients) == 1
    claims = sorted(number for number, op in RecordingStore.log if op == "claim")
    assert claims == [1, 2, 3, 4]


def test_duplicate_token_submit_completes_through_each_client() -> None:
    """duplicate_token_submit(clients=) claims on the board, then worker i completes via
    clients[i]."""
    board = RecordingStore([Task("t1")], ManualClock())
    clients = [board.open_client() for _ in range(3)]
    assert duplicate_token_submit(board, "t1", 3, clients=clients) == 1
    assert [n for n, op in RecordingStore.log if op == "claim"] == [0]
    assert sorted(n for n, op in RecordingStore.log if op == "complete") == [1, 2, 3]


@pytest.mark.parametrize(
    ("clients", "error", "message"),
    [
        ([], ValueError, "one client per agent"),
        ("clients", TypeError, "sequence of boards"),
        ([object(), object()], TypeError, r"claim\(\) method"),
    ],
)
def test_criteria_reject_bad_clients(clients: Any, error: type[Exception], message: str) -> None:
    """A clients list of the wrong length, or of things that are no boards, is rejected before
    any thread starts."""
    board = MemoryBoard([Task("t1")], ManualClock())
    with pytest.raises(error, match=message):
        concurrent_claim(board, "t1", ["a", "b"], clients=clients)
    assert board.list_tasks()[0].lease is None


def test_timeline_and_report_name_each_calls_client() -> None:
    """With clients, the HTML timeline labels each lane with its thread and client."""
    history = [
        Operation(0, 0, Call(Op.CLAIM, "t1", agent="a"), Outcome(error="TakenError"), 0.0, 1.0),
        Operation(1, 1, Call(Op.CLAIM, "t1", agent="b"), Outcome(error="TakenError"), 0.0, 1.0),
    ]
    result = LinearizabilityResult("not linearizable", (), (1,), ("why",))
    page = timeline_html(history, result, clients=True)
    assert "thread 0 (client 0)" in page
    assert "thread 1 (client 1)" in page
    assert "(client" not in timeline_html(history, result)


class TestRecordingContract(BoardContract):
    """The contract suite on a host with clients: its criteria race through them."""

    criteria_rounds = 2
    machine_settings = FEW
    parallel_settings = FEW

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return RecordingStore(tasks, clock)  # type: ignore[return-value]

    def open_client(self, board: Any) -> Any:
        return board.open_client()

    def test_concurrent_claims_have_exactly_one_winner(self, open_board: Any) -> None:
        """SPEC 5 and 8: with open_client defined, every agent claims through its own client."""
        super().test_concurrent_claims_have_exactly_one_winner(open_board)
        claims = [n for n, op in RecordingStore.log if op == "claim"]
        assert 0 not in claims
        assert len(set(claims)) == self.criteria_rounds * self.criteria_participants

    def test_duplicate_token_submit_has_exactly_one_success(self, open_board: Any) -> None:
        """SPEC 5 and 8: with open_client defined, every worker completes through its client."""
        super().test_duplicate_token_submit_has_exactly_one_success(open_board)
        completes = [n for n, op in RecordingStore.log if op == "complete"]
        assert 0 not in completes
        assert len(set(completes)) == self.criteria_rounds * self.criteria_participants


# -- fuzz: concurrency by default ----------------------------------------------------------------


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m taskboard ARGS`` in ``tmp_path``, with no trace dir or profile inherited."""
    env = {k: v for k, v in os.environ.items() if k not in (TRACE_DIR_ENV, "HYPOTHESIS_PROFILE")}
    return subprocess.run(
        [sys.executable, "-m", "taskboard", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_fuzz_mixes_sequential_and_parallel_programs_by_default(tmp_path: Path) -> None:
    """A plain fuzz run counts both sequential examples and parallel programs, with the
    programs' rate and the coverage of their racing calls."""
    result = cli(
        tmp_path, "fuzz", "taskboard.hosts.memory:MemoryBoard", "--max-examples", "80",
        "--seed", "1", "--quiet", "--verbose",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    first, second = result.stdout.splitlines()[:2]
    assert re.match(r"[1-9]\d* examples", first), first
    assert re.match(
        r"[1-9]\d* parallel programs \(\d+ parallel program runs, [\d.]+ programs/s\)", second
    )
    coverage = result.stdout.partition("parallel coverage")[2]
    assert re.search(r"^\s+claim\s+-> ok\s+[1-9]", coverage, re.MULTILINE), result.stdout
    assert "races were not checked" not in result.stdout


def test_a_sequential_only_run_says_races_were_not_checked(tmp_path: Path) -> None:
    """fuzz --mode sequential passes, and says that races were not checked."""
    result = cli(
        tmp_path, "fuzz", "taskboard.hosts.memory:MemoryBoard", "--mode", "sequential",
        "--max-examples", "20", "--seed", "1", "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "races were not checked" in result.stdout
    assert "parallel program runs" not in result.stdout


def test_plain_fuzz_finds_a_non_atomic_claim(tmp_path: Path) -> None:
    """A plain fuzz run (no --parallel) on a board whose claim is not atomic exits 1 with the
    race in its report."""
    result = cli(
        tmp_path, "fuzz", "taskboard.hosts.mutants:NonAtomicClaim", "--budget", "60s",
        "--seed", "1", "--quiet",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "contract violation in a concurrent history" in result.stdout


def test_fuzz_rejects_an_unknown_mode(tmp_path: Path) -> None:
    """--mode takes mixed, sequential or parallel; anything else is a usage error, exit 2."""
    result = cli(tmp_path, "fuzz", "--mode", "threads", "--max-examples", "1")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr


# -- client-race mutants and processes -----------------------------------------------------------


def _file_factory(board_class: Any, directory: Path) -> Any:
    """A factory of ``board_class`` boards, each on a fresh SQLite file in ``directory``."""
    directory.mkdir(exist_ok=True)
    count = iter(range(10**6))

    def make(tasks: Sequence[Task], clock: Clock) -> Any:
        return board_class(tasks, clock, str(directory / f"board-{next(count)}.db"))

    make.open_client = lambda board: board.open_client()  # type: ignore[attr-defined]
    return make


@pytest.mark.parametrize("mutant", CLIENT_MUTANTS, ids=lambda m: m.__name__)
def test_client_race_mutant_caught_only_with_clients(mutant: Any, tmp_path: Path) -> None:
    """Each client-race mutant passes the parallel mode with one shared client and is caught
    when every thread has a client of its own: the hook is what catches it."""
    files = _file_factory(mutant, tmp_path)
    shared = BoardMachine.for_board(lambda tasks, clock: files(tasks, clock))
    run_parallel_state_machine(shared, settings=settings(FEW, max_examples=30))
    with_clients = BoardMachine.for_board(_file_factory(mutant, tmp_path / "clients"))
    assert with_clients.has_clients()
    with pytest.raises(ContractViolation, match="each on a client of its own"):
        run_parallel_state_machine(with_clients, settings=settings(FEW, max_examples=100))


def test_processes_run_each_thread_in_its_own_process(tmp_path: Path) -> None:
    """With parallel_processes a file-backed SQLiteBoard passes, and a claim whose atomicity
    lives in the client object is caught across processes."""
    good = BoardMachine.for_board(
        _file_factory(SQLiteBoard, tmp_path / "good"), parallel_processes=True
    )
    run_parallel_state_machine(good, settings=settings(FEW, max_examples=5))
    bad = BoardMachine.for_board(
        _file_factory(ClientLockedClaim, tmp_path / "bad"), parallel_processes=True
    )
    with pytest.raises(ContractViolation, match="each in a process of its own"):
        run_parallel_state_machine(bad, settings=settings(FEW, max_examples=60))


def test_processes_need_a_board_that_pickles(tmp_path: Path) -> None:
    """fuzz --processes on a board with no address (in-memory) is a one-line usage error."""
    result = cli(
        tmp_path, "fuzz", "taskboard.hosts.sqlite:SQLiteBoard", "--processes", "--max-examples", "1"
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pickle" in result.stderr
    assert "Traceback" not in result.stderr
