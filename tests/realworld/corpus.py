"""The corpus of real lock-library bugs: which releases, how to install them, how to fuzz them.

Each :class:`Entry` names a library's buggy release and the release that fixed it. Both
are installed as released (``pip install --no-deps --target``, one directory per version,
reused when present) and fuzzed by ``python -m taskboard fuzz`` in a subprocess whose
``PYTHONPATH`` puts that directory first: two versions of a library never meet in one
interpreter, and neither meets the project's own redis-py.

Run the whole corpus by hand (it prints the table of ``docs/real-bugs.md``)::

    TASKBOARD_REDIS_URL=redis://127.0.0.1:6379/0 python -m tests.realworld.corpus [--deep]
    python -m tests.realworld.corpus --virtual   # every entry in virtual mode (no server URL)

A *race* entry (``options`` with ``--parallel``) runs parallel programs under controlled
scheduling: its trace holds the program, and :mod:`tests.realworld.replays` replays it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "CORPUS",
    "REPO_ROOT",
    "Entry",
    "FuzzResult",
    "InstallError",
    "default_cache",
    "fuzz",
    "install",
    "replays",
]

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Entry:
    """A buggy release and its fix, and how the checker catches the one and passes the other."""

    #: A short id: the test's parameter id.
    name: str
    #: ``module:Name`` of the board factory, under ``tests.realworld``.
    target: str
    #: The distribution on PyPI, and the two releases.
    dist: str
    buggy: str
    fixed: str
    #: Other distributions pinned next to it (``redis==3.5.3`` for python-redis-lock, Django
    #: and its two dependencies for django-db-mutex, aioredis 1.3.1 and its own two for
    #: aioredlock, ``redis==4.6.0`` for sherlock).
    pins: tuple[str, ...] = ()
    #: Whether the target needs ``TASKBOARD_REDIS_URL``.
    redis: bool = False
    #: The seed that catches the buggy release, and the examples each release gets.
    seed: int = 0
    catch_examples: int = 200
    pass_examples: int = 100
    #: How long Hypothesis may shrink the failure found (the trace is the smallest by then).
    shrink_budget: str = "20s"
    #: Slow enough to stay out of CI (``pytest -m deep``).
    deep: bool = False
    #: Extra ``taskboard fuzz`` options (in wall and virtual mode).
    options: tuple[str, ...] = field(default=())
    #: The distribution of the fixed release when the project was renamed in between
    #: (superagentic → fleetwright); empty: ``dist``.
    fixed_dist: str = ""
    #: Examples of each release in virtual mode (``MODULE:virtual``, the driver on a
    #: redis-server of its own on the machine's clock); 0: not run in virtual mode.
    virtual_examples: int = 0
    #: Run in virtual mode only: the wall-mode catch and pass tests (and ``main``) skip it.
    virtual_only: bool = False
    #: Why the entry stays in wall mode (``virtual_examples`` 0); empty for every entry
    #: that runs in virtual mode.
    wall_only: str = ""
    #: A race entry's hand-written program (a name in :mod:`tests.realworld.replays`): the
    #: race as the bug report tells it, which the buggy release fails on every run.
    race_program: str = ""

    @property
    def races(self) -> bool:
        """A race entry: parallel programs only (``--parallel`` among its options)."""
        return "--parallel" in self.options

    @property
    def virtual_target(self) -> str:
        """The entry's virtual-mode machine: the module's ``virtual``."""
        return self.target.rsplit(":", 1)[0] + ":virtual"

    def dist_of(self, version: str) -> str:
        """The distribution that ``version`` of this entry is published under."""
        return self.fixed_dist if self.fixed_dist and version == self.fixed else self.dist


CORPUS: tuple[Entry, ...] = (
    Entry(
        "redis-py-oldlock-stale-release",
        "tests.realworld.redis_py:board",
        "redis",
        buggy="2.9.1",
        fixed="2.10.0",
        redis=True,
        seed=2,
        virtual_examples=60,
    ),
    Entry(
        "filelock-soft-stale-release",
        "tests.realworld.filelock_soft:board",
        "filelock",
        buggy="3.29.5",
        fixed="3.30.0",
        seed=2,
        shrink_budget="40s",
        wall_only=(
            "filelock judges a lease's age by the lock file's st_mtime, which the kernel "
            "stamps on its own clock: no clock in the checker's process moves it"
        ),
    ),
    Entry(
        "python-redis-lock-stale-release",
        "tests.realworld.python_redis_lock:board",
        "python-redis-lock",
        buggy="2.3.0",
        fixed="3.0.0",
        pins=("redis==3.5.3",),
        redis=True,
        seed=2,
        catch_examples=60,
        pass_examples=15,
        shrink_budget="30s",
        deep=True,
        virtual_examples=30,
    ),
    Entry(
        "redis-py-pipeline-lock-decoded-release",
        "tests.realworld.redis_py_decoded:board",
        "redis",
        buggy="2.10.6",
        fixed="3.0.0",
        redis=True,
        seed=2,
        virtual_examples=60,
    ),
    Entry(
        "django-db-mutex-naive-utcnow",
        "tests.realworld.django_db_mutex:board",
        "django-db-mutex",
        buggy="0.2.2",
        fixed="0.2.3",
        pins=("django==4.2.17", "asgiref==3.8.1", "sqlparse==0.5.3"),
        seed=2,
        virtual_examples=60,
    ),
    Entry(
        "redis-py-oldlock-client-clocks",
        "tests.realworld.redis_py:board",
        "redis",
        buggy="2.9.1",
        fixed="2.10.0",
        redis=True,
        seed=2,
        options=("--client-clock-skew", "20"),
        wall_only=(
            "client clocks that disagree (--client-clock-skew) are a wall-mode setting; the "
            "same releases run in virtual mode as redis-py-oldlock-stale-release"
        ),
    ),
    Entry(
        "aioredlock-decoded-script-sha",
        "tests.realworld.aioredlock_decoded:board",
        "aioredlock",
        buggy="0.7.0",
        fixed="0.7.1",
        pins=("aioredis==1.3.1", "async-timeout==4.0.3", "attrs==23.2.0"),
        redis=True,
        seed=2,
        pass_examples=60,
        # Its wall-mode runs take minutes (50 ms leases) and a loaded CI machine made one
        # false alarm: CI runs it in virtual mode, the deep run in wall mode too.
        deep=True,
        virtual_examples=60,
    ),
    Entry(
        "sherlock-redis-renew-releases",
        "tests.realworld.sherlock_redis:board",
        "sherlock",
        buggy="0.4.0",
        fixed="0.4.1",
        pins=("redis==4.6.0",),
        redis=True,
        seed=2,
        catch_examples=60,
        pass_examples=15,
        deep=True,
        virtual_examples=60,
    ),
    Entry(
        "fleetwright-release-without-owner",
        "tests.realworld.fleetwright_leases:board",
        "superagentic",
        buggy="0.20.0",
        fixed="0.21.0",
        fixed_dist="fleetwright",
        seed=2,
        shrink_budget="40s",
        virtual_examples=100,
    ),
    Entry(
        "redis-py-pipeline-lock-release-race",
        "tests.realworld.redis_py_watch:board",
        "redis",
        buggy="2.10.6",
        fixed="3.0.0",
        redis=True,
        seed=1,
        options=("--parallel", "--race-scheduling", "controlled"),
        virtual_examples=150,
        race_program="RELEASE_ACROSS_EXPIRY",
        # The lock must expire between two commands of a release: the virtual clock moves
        # there as a turn of the race; on the wall clock only luck would put it there.
        virtual_only=True,
    ),
    Entry(
        "python-redis-lock-extend-zero",
        "tests.realworld.python_redis_lock_extend:board",
        "python-redis-lock",
        buggy="3.5.0",
        fixed="3.6.0",
        pins=("redis==3.5.3",),
        redis=True,
        seed=2,
        pass_examples=15,
        shrink_budget="30s",
        # Whole-second leases: minutes in wall mode (about 7 s an example), so deep there;
        # CI runs it in virtual mode.
        deep=True,
        virtual_examples=100,
    ),
    Entry(
        "portalocker-tempfile-stale-release",
        "tests.realworld.portalocker_tempfile:board",
        "portalocker",
        buggy="3.2.0",
        fixed="4.0.0",
        seed=2,
        pass_examples=60,
        # Its lock never expires: every claim with a TTL is answered unsupported, and the run
        # learns to ask for leases without expiry only. Wall mode is ~30 s (60 examples to
        # pass): CI runs it in virtual mode, the deep run in wall mode too.
        deep=True,
        virtual_examples=60,
    ),
)


class InstallError(Exception):
    """pip could not install a release (no network, no such version)."""


def default_cache() -> Path:
    """``$TASKBOARD_REALWORLD_CACHE``, or ``realworld-libs`` in the system's temp directory."""
    chosen = os.environ.get("TASKBOARD_REALWORLD_CACHE")
    return Path(chosen) if chosen else Path(tempfile.gettempdir()) / "taskboard-realworld-libs"


def install(dist: str, version: str, pins: Sequence[str] = (), cache: Path | None = None) -> Path:
    """``dist==version`` (and ``pins``) installed with ``pip install --no-deps --target`` into
    ``<cache>/<dist>-<version>``, or that directory as it is when a previous call completed it.

    Installs into a temporary directory and renames it into place, so parallel test
    workers never see half an installation.

    Raises:
        InstallError: pip failed; its output is in the message.
    """
    cache = cache or default_cache()
    target = cache / f"{dist}-{version}"
    if (target / ".complete").exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dist}-{version}-", dir=cache))
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--no-compile",
        "--target",
        str(staging),
        f"{dist}=={version}",
        *pins,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise InstallError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    (staging / ".complete").write_text(f"{dist}=={version} {' '.join(pins)}\n")
    try:
        staging.rename(target)
    except OSError:  # another worker got there first
        shutil.rmtree(staging, ignore_errors=True)
    return target


@dataclass(frozen=True)
class FuzzResult:
    """What one ``taskboard fuzz`` subprocess did."""

    returncode: int
    output: str
    seconds: float
    trace_file: Path | None

    @property
    def violation(self) -> bool:
        return self.returncode == 1 and "contract violation" in self.output

    @property
    def shrunk_steps(self) -> int | None:
        """Steps in the trace file written (a parallel program's calls, its prefix's steps
        included), or ``None`` if there is none."""
        if self.trace_file is None:
            return None
        trace = json.loads(self.trace_file.read_text())
        program = trace.get("program")
        if program:
            return len(program["prefix"]) + sum(map(len, program["threads"]))
        return len(trace["steps"])

    @property
    def shrunk_threads(self) -> int | None:
        """The threads of the parallel program in the trace file; ``None`` without one."""
        if self.trace_file is None:
            return None
        program = json.loads(self.trace_file.read_text()).get("program")
        return len(program["threads"]) if program else None

    @property
    def examples(self) -> int | None:
        found = re.search(r"(\d[\d,]*) examples?", self.output)
        return None if found is None else int(found.group(1).replace(",", ""))

    @property
    def program_runs(self) -> int | None:
        """Runs of parallel programs (what ``--max-examples`` counts with ``--parallel``)."""
        found = re.search(r"(\d[\d,]*) parallel program runs?", self.output)
        return None if found is None else int(found.group(1).replace(",", ""))


def fuzz(
    target: str,
    libdir: Path,
    workdir: Path,
    *,
    seed: int,
    max_examples: int,
    budget: str = "10m",
    shrink_budget: str = "20s",
    options: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
    clock: str = "wall",
) -> FuzzResult:
    """Run ``python -m taskboard fuzz TARGET --clock CLOCK --mode sequential`` in a subprocess
    whose ``PYTHONPATH`` is ``libdir`` then the repository; the example database and the
    traces go under ``workdir`` (fresh per run, so nothing is replayed from an earlier one);
    ``env`` adds variables (``TASKBOARD_REDIS_URL``) to this process's environment."""
    workdir.mkdir(parents=True, exist_ok=True)
    traces = workdir / "traces"
    command = [
        sys.executable,
        "-m",
        "taskboard",
        "fuzz",
        target,
        "--clock",
        clock,
        "--mode",
        "sequential",
        "--seed",
        str(seed),
        "--max-examples",
        str(max_examples),
        "--budget",
        budget,
        "--shrink-budget",
        shrink_budget,
        "--database",
        str(workdir / "examples"),
        "--trace-dir",
        str(traces),
        "--quiet",
        *options,
    ]
    child_env = {**os.environ, **(env or {})}
    child_env["PYTHONPATH"] = os.pathsep.join([str(libdir), str(REPO_ROOT)])
    child_env.pop("PYTHONSAFEPATH", None)
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    seconds = time.monotonic() - started
    written = sorted(traces.glob("*.json")) if traces.exists() else []
    return FuzzResult(
        done.returncode, done.stdout + done.stderr, seconds, written[-1] if written else None
    )


def replays(target: str, libdir: Path, what: str | Path, runs: int = 10) -> int:
    """How many of ``runs`` runs fail, in one subprocess with ``libdir`` first on its path:
    replays of the trace file ``what``, or runs of the program of that name in
    :mod:`tests.realworld.replays`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(libdir), str(REPO_ROOT)])}
    env.pop("PYTHONSAFEPATH", None)
    command = [sys.executable, "-m", "tests.realworld.replays", target, str(what), str(runs)]
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=True
    )
    found = re.search(r"failed (\d+) of", done.stdout)
    assert found is not None, done.stdout + done.stderr
    return int(found.group(1))


def _row(entry: Entry, caught: FuzzResult, passed: FuzzResult) -> str:
    verdict = "caught" if caught.violation and passed.returncode == 0 else "NOT REPRODUCED"
    return (
        f"| {entry.dist} | {entry.buggy} → {entry.dist_of(entry.fixed)} {entry.fixed} | "
        f"{verdict} | "
        f"{caught.examples} examples, {caught.seconds:.1f} s | {caught.shrunk_steps} | "
        f"{passed.returncode} ({passed.examples} examples, {passed.seconds:.1f} s) |"
    )


def _print_virtual_row(entry: Entry, workdir: Path, seed: int) -> None:
    """Run ``entry``'s two releases in virtual mode and print its row."""
    if entry.wall_only:
        print(
            f"| {entry.dist} | {entry.buggy} → {entry.fixed} | wall mode only: {entry.wall_only} |"
        )
        return
    results = [
        fuzz(
            entry.virtual_target,
            install(entry.dist_of(version), version, entry.pins),
            workdir / f"{entry.name}-{version}-{seed}-virtual",
            seed=seed,
            max_examples=entry.virtual_examples,
            shrink_budget=entry.shrink_budget,
            options=entry.options,
            clock="virtual",
        )
        for version in (entry.buggy, entry.fixed)
    ]
    print(_row(entry, *results), flush=True)


#: What the reach table allows each buggy release: a nightly user's example count.
REACH_EXAMPLES = 200


def _print_reach_row(entry: Entry, workdir: Path, seeds: Sequence[int], clock: str) -> None:
    """Fuzz ``entry``'s buggy release once per seed, up to :data:`REACH_EXAMPLES`, without
    shrinking, and print the examples each seed took to catch it (``-``: not caught)."""
    if clock == "virtual" and entry.wall_only:
        print(f"| {entry.dist} | {entry.buggy} | wall mode only: {entry.wall_only} |")
        return
    libdir = install(entry.dist_of(entry.buggy), entry.buggy, entry.pins)
    caught = []
    for seed in seeds:
        result = fuzz(
            entry.virtual_target if clock == "virtual" else entry.target,
            libdir,
            workdir / f"reach-{entry.name}-{seed}-{clock}",
            seed=seed,
            max_examples=REACH_EXAMPLES,
            shrink_budget="1ms",
            options=entry.options,
            clock=clock,
        )
        runs = result.program_runs if entry.races else result.examples
        caught.append(str(runs) if result.violation else "-")
    hits = sum(c != "-" for c in caught)
    print(
        f"| {entry.dist} | {entry.buggy} | {hits} of {len(seeds)} | {', '.join(caught)} |",
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deep", action="store_true", help="also the slow (whole-second) entries")
    parser.add_argument("--only", help="run only the entry with this name")
    parser.add_argument("--seed", type=int, help="override each entry's seed")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.mkdtemp(prefix="corpus-")))
    parser.add_argument(
        "--virtual",
        action="store_true",
        help="run the entries in virtual mode (MODULE:virtual, each with its virtual_examples)",
    )
    parser.add_argument(
        "--reach",
        type=int,
        nargs="+",
        metavar="SEED",
        help=f"only the buggy releases, once per SEED, up to {REACH_EXAMPLES} examples each "
        "and no shrinking: print how many examples each seed took to catch the bug "
        "(with --virtual, in virtual mode; --deep adds the slow wall-mode entries)",
    )
    args = parser.parse_args(argv)
    if args.reach:
        clock = "virtual" if args.virtual else "wall"
        print(f"| library | buggy | caught within {REACH_EXAMPLES} | examples per seed |")
        print("| --- | --- | --- | --- |")
        for entry in CORPUS:
            wanted = args.only in (None, entry.name)
            slow = clock == "wall" and entry.deep and not args.deep
            if clock == "wall" and entry.virtual_only:
                continue
            if wanted and not (slow and args.only is None):
                _print_reach_row(entry, args.workdir, args.reach, clock)
        return 0
    print("| library | buggy → fixed | verdict | caught in | shrunk steps | fixed: exit |")
    print("| --- | --- | --- | --- | --- | --- |")
    for entry in CORPUS:
        if args.virtual:  # every entry, the whole-second ones too: nothing sleeps
            if args.only in (None, entry.name):
                seed = entry.seed if args.seed is None else args.seed
                _print_virtual_row(entry, args.workdir, seed)
            continue
        if entry.virtual_only:
            continue
        if (entry.deep and not args.deep and args.only is None) or args.only not in (
            None,
            entry.name,
        ):
            continue
        seed = entry.seed if args.seed is None else args.seed
        results = []
        for version, examples in ((entry.buggy, entry.catch_examples), (entry.fixed, None)):
            libdir = install(entry.dist_of(version), version, entry.pins)
            results.append(
                fuzz(
                    entry.target,
                    libdir,
                    args.workdir / f"{entry.name}-{version}-{seed}",
                    seed=seed,
                    max_examples=examples or entry.pass_examples,
                    shrink_budget=entry.shrink_budget,
                    options=entry.options,
                )
            )
        print(_row(entry, *results), flush=True)
        for result in results:
            if result.returncode not in (0, 1) or (result.returncode == 1 and not result.violation):
                print(result.output[-3000:], file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
