"""What ``taskboard fuzz`` says about a run: the verdict first, the settings in force with where
each came from, the coverage behind --verbose, the --json summary, --expired-lease-policy."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from taskboard import Board, Clock, Task
from taskboard._cli import _summary, main
from taskboard._fuzz import FuzzOptions, Target, UsageError, fuzz
from taskboard._fuzz.report import settings_of_run
from taskboard.hosts.memory import MemoryBoard
from taskboard.stateful import BoardMachine
from taskboard.stateful._settings import SETTINGS

MUTANT = "taskboard.hosts.mutants:RenewWithoutTokenCheck"


class WallMachine(BoardMachine):
    """A machine that sets the wall clock on its class, as a server-clock board's does."""

    clock_mode = "wall"

    def make_board(self, tasks: Sequence[Task], clock: Clock) -> Board:
        return MemoryBoard(tasks, clock)


def quiet(tmp_path: Path, **changes: object) -> FuzzOptions:
    return FuzzOptions(
        seed=1, database=str(tmp_path / "db"), trace_dir=str(tmp_path / "traces")
    ).replace(**changes)


def test_the_header_names_every_setting_and_where_it_came_from() -> None:
    """The settings in force are every row of the table, in its order: the wall clock set on
    the class, --client-clock-skew from the command line, the rest by default."""
    target = Target("tests.test_fuzz_summary:WallMachine", WallMachine)
    rows = settings_of_run(target, FuzzOptions(client_clock_skew=40.0))
    assert [row.name for row in rows] == [setting.name for setting in SETTINGS]
    by_name = {row.name: row for row in rows}
    assert (by_name["clock_mode"].value, by_name["clock_mode"].source) == (
        "'wall'",
        "set on WallMachine",
    )
    skew = by_name["client_clock_skew"]
    assert (skew.value, skew.source, skew.json) == ("40ms", "--client-clock-skew", 40_000)
    assert by_name["call_timeout"].source == "default"


def test_the_header_is_printed_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fuzz prints the settings in force on stderr, a line each, with their sources."""
    code = main(
        ["fuzz", "tests.test_fuzz_summary:WallMachine", "--max-examples", "2", "--seed", "1",
         "--quiet", "--client-clock-skew", "3", "--trace-dir", str(tmp_path / "traces"),
         "--database", str(tmp_path / "db"), "--mode", "sequential"]
    )  # fmt: skip
    assert code == 0
    err = capsys.readouterr().err.splitlines()
    assert err[1] == "settings in force:"
    assert any("clock_mode" in line and "(set on WallMachine)" in line for line in err)
    assert any("client_clock_skew" in line and "(--client-clock-skew)" in line for line in err)
    assert err[-1].startswith("  hypothesis: up to ")


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, object]]:
    """A failing run of a mutant through the command line: its stdout and --json document."""
    where = tmp_path_factory.mktemp("failed")
    out = where / "summary" / "run.json"
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(io.StringIO()):
        code = main(
            ["fuzz", MUTANT, "--max-examples", "50", "--seed", "1", "--quiet",
             "--trace-dir", str(where / "traces"), "--database", str(where / "db"),
             "--mode", "sequential", "--shrink-budget", "1s", "--json", str(out),
             "--expired-lease-policy", "accept"]
        )  # fmt: skip
    assert code == 1
    return stdout.getvalue(), json.loads(out.read_text(encoding="utf-8"))


def test_the_verdict_and_the_report_come_before_the_coverage(
    failed: tuple[str, dict[str, object]],
) -> None:
    """A failing run prints its verdict on the first line, then the report, then the key
    transitions; every transition's coverage only with --verbose."""
    text, _ = failed
    assert "FAILED: a contract violation" in text.splitlines()[0]
    assert text.index("contract violation at step") < text.index("key transitions:")
    assert "transition coverage (task state" not in text
    assert "(--verbose also lists every transition" in text


def test_the_json_summary_holds_the_figures(failed: tuple[str, dict[str, object]]) -> None:
    """--json writes the verdict, the clause, the counts, the seed, each setting with its
    source and value, and the transitions."""
    _, document = failed
    assert document["schema"] == 1
    assert (document["verdict"], document["exit_code"], document["clause"]) == (
        "violation",
        1,
        "SPEC 3.5",
    )
    assert document["seed"] == 1
    assert isinstance(document["examples"], int)
    assert document["examples"] > 0
    assert isinstance(document["trace_file"], str)
    assert Path(document["trace_file"]).exists()
    settings = document["settings"]
    assert isinstance(settings, dict)
    assert list(settings) == [setting.name for setting in SETTINGS]
    assert settings["expired_lease_policy"] == {
        "value": "accept",
        "shown": "'accept'",
        "source": "--expired-lease-policy",
    }
    assert settings["clock_resolution"]["value"] == 1000  # microseconds
    transitions = document["transitions"]
    assert isinstance(transitions, list)
    claims = [t for t in transitions if (t["state"], t["operation"], t["outcome"]) == (
        "open", "claim", "ok")]  # fmt: skip
    assert len(claims) == 1
    assert claims[0]["count"] > 0
    key_block = failed[0].split("\nkey transitions:\n", 1)[1].split("\n\n", 1)[0]
    assert document["key_transitions_missing"] == sum(
        1 for line in key_block.splitlines() if line.startswith("  !! ")
    )


def test_verbose_adds_every_transition(tmp_path: Path) -> None:
    """The summary lists every transition and parallel call only when verbose."""
    report = fuzz(MUTANT, quiet(tmp_path, max_examples=3, mode="sequential"), progress=None)
    assert "transition coverage (task state" in _summary(report, verbose=True)
    assert "transition coverage (task state" not in _summary(report, verbose=False)


def test_an_expired_lease_policy_it_does_not_take_is_a_usage_error(tmp_path: Path) -> None:
    """--expired-lease-policy takes either, accept or reject; anything else is refused before
    the run (tests/test_settings.py pins that the option sets the machine's)."""
    with pytest.raises(UsageError, match="--expired-lease-policy must be"):
        fuzz(MUTANT, quiet(tmp_path, expired_lease_policy="sometimes"), progress=None)
    with pytest.raises(SystemExit) as exited:
        main(["fuzz", "--expired-lease-policy", "sometimes"])
    assert exited.value.code == 2


def test_an_unwritable_json_path_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--json naming a directory is refused before the run, exit 2, in one line."""
    assert main(["fuzz", "--json", str(tmp_path), "--max-examples", "1"]) == 2
    assert "--json" in capsys.readouterr().err
