"""The benchmark scripts still run (figures are printed, never asserted on)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        ("bench_machine.py", ["--examples", "3"], "checking costs"),
        ("bench_reach.py", ["--examples", "3", "--seeds", "1"], "on a live current lease"),
        ("bench_linearizability.py", ["--sizes", "100"], "partition"),
        ("bench_faults.py", ["--examples", "3", "--timeout", "0.2"], "reported after"),
        ("bench_protocol.py", ["--examples", "2", "--rounds", "1"], "Python child"),
        pytest.param(
            "bench_races.py",
            ["--seeds", "1", "--max-examples", "10", "--replays", "1", "--controls", "2"],
            "false alarms",
            marks=pytest.mark.slow,  # four catches, each shrunk: about a minute
        ),
        (
            "bench_power.py",
            ["--seeds", "1", "--max-examples", "30", "--only", "WallClock,NonAtomicClaim"],
            "median seconds to catch",
        ),
    ],
)
def test_benchmark_script_runs(script: str, args: list[str], expected: str) -> None:
    """Each benchmark script runs on a tiny workload and prints its figures."""
    result = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
