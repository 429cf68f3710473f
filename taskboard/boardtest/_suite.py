"""BoardContract: the whole contract suite as one pytest class a host subclasses.

It stacks the state-machine run and the concurrency criteria on the per-clause examples
(:mod:`taskboard.boardtest._examples`), which stand on the harness of attributes, hooks,
fixtures and helpers (:mod:`taskboard.boardtest._harness`).
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from taskboard._contract import Task
from taskboard._criteria import concurrent_claim, duplicate_token_submit
from taskboard.boardtest._examples import SpecExamples
from taskboard.boardtest._harness import ContractHarness, OpenBoard
from taskboard.stateful import AnswersVaried, BoardMachine, run_parallel_state_machine
from taskboard.stateful._hypothesis import without_explain, without_speed_check
from taskboard.stateful._reports import failures_reported
from taskboard.stateful._session_options import session_run
from taskboard.stateful._settings import SETTINGS
from taskboard.stateful._trace import NEMESIS_HOOKS

__all__ = ["BoardContract"]


class BoardContract(SpecExamples):
    """Subclass this in your test suite and define :meth:`make_board`; pytest does the rest.

    ::

        from taskboard.boardtest import BoardContract

        class TestMyBoard(BoardContract):
            def make_board(self, tasks, clock):
                return MyBoard(tasks, clock)

    The class brings every check taskboard has: an example test per SPEC
    clause (each docstring names its clause), the :class:`~taskboard.stateful.BoardMachine`
    run, and both concurrency criteria over several rounds. A board that is
    not a :class:`~taskboard.RenewingBoard` *fails* (renew is part of the
    contract this suite verifies; a skip would pass "not tested" off as
    "passed"). The fail-path tests run on a :class:`~taskboard.FailingBoard` and
    are skipped, with the reason, on a board without ``fail``.

    Class attributes to set:

    * ``clock_resolution``, ``clock_mode``, ``clock_skew``, ``client_clock_skew``,
      ``shortest_lease``, ``keep_alive_interval``, ``expired_lease_policy``,
      ``call_timeout``, ``tolerate_faults``, ``parallel_processes``, ``durable``,
      ``nemesis`` and ``trace_dir``: as on ``BoardMachine``, whose run here takes them
      (its traces name this class to replay against). With ``clock_mode = "wall"``
      (SPEC 7) the boards get a :class:`~taskboard.SystemClock`, the example tests'
      tick is the machine's wall-clock TTL unit, their ``clock.advance(delta)``
      sleeps (at most :data:`~taskboard.boardtest._harness.WALL_LONGEST_SLEEP` ticks)
      to just past the target, and the criteria's clients race in real time (a
      command's processes, too, keep their own time). With ``clock_mode = "virtual"`` set
      ``server`` too (``server = taskboard.servers.Redis()``, and ``make_board`` connects
      to ``self.server.url``): every test's clock, the machine's included, moves the
      server's, on a server emptied first, and each board call reads that clock as this
      process's time (``time.time()``, ``datetime.now()``). The server starts on first use,
      once for the class, and stops after its last test; ``taskboard.servers.NoServer()``
      starts none, for a board on this process's own clock.
    * ``machine_settings``: Hypothesis settings for the state-machine run;
      ``None`` (default) follows the loaded profile, so ``--hypothesis-profile``
      or ``settings.load_profile`` set the depth.
    * ``parallel_settings``: the same for the parallel mode (each program runs
      three times on fresh boards, so ``None``, the default, takes the loaded
      profile with at most 50 examples).
    * ``criteria_rounds`` and ``criteria_participants``: how many races each
      criterion runs, and how many threads race in each.
    """

    # -- the machine and the criteria ----------------------------------------------------------

    def _machine_class(self, suffix: str, trace_target: str | None = None) -> type[BoardMachine]:
        """A BoardMachine on this class's hooks and settings, named after the class; its
        traces name this class (``module:Name``), which ``taskboard replay`` accepts."""
        cls = type(self)
        if trace_target is None:
            importable = "<" not in cls.__qualname__
            trace_target = f"{cls.__module__}:{cls.__qualname__}" if importable else ""
        clients: dict[str, Any] = {}
        if self.has_clients:
            clients = {"open_client": self.open_client, "close_client": self.close_client}
        for hook in NEMESIS_HOOKS.values():
            if getattr(cls, hook) is not getattr(ContractHarness, hook):
                clients[hook] = getattr(self, hook)
        settings = {s.name: getattr(self, s.name) for s in SETTINGS if s.contract}
        if self.server is not None:
            clients["server"] = self.server
        machine = BoardMachine.for_board(
            self.make_board,
            close=self.close_board,
            **clients,
            **settings,
            trace_target=trace_target,
        )
        machine.__name__ = machine.__qualname__ = f"{type(self).__name__}{suffix}"
        return machine

    def test_state_machine(self) -> None:
        """SPEC 6: BoardMachine finds no divergence from the model (depth from the profile)."""
        machine = self._machine_class("Machine")
        given = self.machine_settings or settings()
        run_settings = without_speed_check(without_explain(given))
        try:
            _run_sequential(machine, run_settings)
        except AnswersVaried:  # a choice SPEC leaves the board, made anew on a replay
            machine.answers_vary = True
            _run_sequential(machine, run_settings)

    def test_parallel_histories_are_linearizable(self) -> None:
        """SPEC 3 and 5: calls from several threads at once behave as some order of single calls."""
        machine = self._machine_class("ParallelMachine")
        profile = settings()
        given = self.parallel_settings or settings(
            profile, max_examples=min(50, profile.max_examples)
        )
        with session_run(machine, without_speed_check(given)) as chosen:
            run_parallel_state_machine(machine, settings=chosen)

    def test_concurrent_claims_have_exactly_one_winner(self, open_board: OpenBoard) -> None:
        """SPEC 5: agents (names repeating) race to claim one task: exactly one wins, each round."""
        agents = ["a1", "a2"] * (self.criteria_participants // 2) or ["a1"]
        for round_ in range(self.criteria_rounds):
            board = open_board(Task("race"))
            clients = self.clients_of(board, len(agents))
            winners = concurrent_claim(board, "race", agents, clients=clients)
            self._close_clients()
            assert winners == 1, f"round {round_ + 1}: {winners} agents won the same claim"

    def test_duplicate_token_submit_has_exactly_one_success(self, open_board: OpenBoard) -> None:
        """SPEC 5: workers completing with one token at once: exactly one succeeds, each round."""
        for round_ in range(self.criteria_rounds):
            board = open_board(Task("race"))
            clients = self.clients_of(board, self.criteria_participants)
            successes = duplicate_token_submit(
                board, "race", self.criteria_participants, clients=clients
            )
            self._close_clients()
            assert successes == 1, f"round {round_ + 1}: {successes} completes with one token"


def _run_sequential(machine: type[BoardMachine], given: settings) -> None:
    with session_run(machine, given) as chosen, failures_reported(machine):
        run_state_machine_as_test(machine, settings=chosen)
