"""fuzz --shrink-budget: a failure is shrunk for at most that long, then reported."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from taskboard._cli import main
from taskboard.hosts.mutants import RenewWithoutTokenCheck


class SlowToOpen(RenewWithoutTokenCheck):
    """A buggy board that takes 0.1 s to open, as a real store's connection does: shrinking
    its failure to two steps takes about 350 runs, over half a minute."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        time.sleep(0.1)
        super().__init__(*args, **kwargs)


def fuzz(tmp_path: Path, *options: str) -> int:
    target = f"{__name__}:SlowToOpen"
    where = ["--database", str(tmp_path / "db"), "--trace-dir", str(tmp_path)]
    return main(["fuzz", target, "--seed", "1", "--mode", "sequential", *where, *options])


def test_shrinking_stops_at_the_shrink_budget_with_the_trace_so_far(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --shrink-budget 1s the violation is reported after a few shrink runs, with its
    trace, and the summary says shrinking was cut short; Hypothesis's own warning is left out."""
    assert fuzz(tmp_path, "--shrink-budget", "1s", "--quiet") == 1
    out = capsys.readouterr().out
    assert "shrinking stopped at the shrink budget" in out
    assert "contract violation at step" in out
    assert "five minutes" not in out
    runs = int(out.split("s to shrink it: ", 1)[1].split(" Hypothesis run", 1)[0])
    assert runs < 30  # about 10 of 0.1 s each fit in 1 s; unbounded it takes about 350
    assert list(tmp_path.glob("*.json"))


def test_a_bad_shrink_budget_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """--shrink-budget that is no positive duration: exit 2, one line, no traceback."""
    assert main(["fuzz", "--shrink-budget", "-5s", "--budget", "1s"]) == 2
    err = capsys.readouterr().err
    assert "must be a positive duration" in err
    assert "Traceback" not in err
