"""The board protocol's price: steps/s of a board served by a child process (SPEC 10), as a
ratio of the in-process MemoryBoard, through the same BoardMachine on the same examples.

- MemoryBoard in-process: the anchor.
- MemoryBoard served by a Python child (tests/protocol_boards.py): the protocol's own cost.
Each machine is ``BoardMachine.for_command``, as a user's: a spare process of the command,
started while the previous example ran, serves the next example.
- The Go reference board (go/cmd/fileboard, built here; skipped without Go): a file
  read-modify-write under flock per call, behind the Go adapter.

    python benchmarks/bench_protocol.py [--examples 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from run_all import best_interleaved, machine_rate

from taskboard.hosts.memory import MemoryBoard
from taskboard.stateful import BoardMachine

ROOT = Path(__file__).resolve().parent.parent


def go_fileboard(directory: str) -> list[str] | None:
    """The Go reference board built into ``directory``; ``None`` without Go."""
    go = shutil.which("go")
    if go is None:
        return None
    built = os.path.join(directory, "fileboard")
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOPROXY": "off"}
    subprocess.run(
        [go, "build", "-o", built, "./cmd/fileboard"], cwd=ROOT / "go", env=env, check=True
    )
    return [built]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100, help="examples per machine run")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best kept)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        machines = {
            "MemoryBoard in-process": BoardMachine.for_board(MemoryBoard),
            "MemoryBoard, Python child": BoardMachine.for_command(
                [sys.executable, str(ROOT / "tests" / "protocol_boards.py"), "memory"]
            ),
        }
        go = go_fileboard(directory)
        if go is not None:
            machines["Go file board, Go child"] = BoardMachine.for_command(go)
        runs = {
            name: functools.partial(machine_rate, machine, args.examples)
            for name, machine in machines.items()
        }
        print(f"board protocol, manual clock ({args.examples} examples, best of {args.rounds})")
        best = best_interleaved(runs, args.rounds)
    anchor = best["MemoryBoard in-process"]
    for name, rate in best.items():
        print(f"  {name:<28} {rate:8,.0f} steps/s  x{rate / anchor:.2f}")
    if go is None:
        print("  (no Go: the Go board was not measured)")


if __name__ == "__main__":
    main()
