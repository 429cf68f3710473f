"""Real bugs in released lock libraries, caught by the checker with the library unmodified.

For each entry of :data:`tests.realworld.corpus.CORPUS`, both releases are installed as
published (``pip install --no-deps --target``, cached across runs) and fuzzed in wall mode
by ``python -m taskboard fuzz`` in a subprocess, with that release first on
``PYTHONPATH``; and in virtual mode, unless the entry says why it stays in wall mode. The
buggy release must be caught (exit 1, a contract violation, a trace
written); the fixed one must pass (exit 0) over its examples. See ``docs/real-bugs.md``.

Slow (each run sleeps through real leases). The wall-mode runs of an entry that also runs
in virtual mode are deep (``pytest -m deep tests/realworld``): CI runs the virtual ones.
The Redis entries need ``TASKBOARD_REDIS_URL`` like every server test (CI fails rather than
skips without it), and installing needs pip to reach PyPI (an install failure is a skip,
and a failure where CI requires servers).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import unavailable
from tests.realworld.corpus import (
    CORPUS,
    Entry,
    FuzzResult,
    InstallError,
    default_cache,
    fuzz,
    install,
    replays,
)

pytestmark = pytest.mark.slow


def _params() -> list[object]:
    """Each entry's wall-mode runs: deep where the entry is, and where its virtual-mode runs
    (which CI runs) check the same release; CI's wall-mode runs are the entries that stay in
    wall mode."""
    return [
        pytest.param(
            entry,
            id=entry.name,
            marks=[pytest.mark.deep] if entry.deep or entry.virtual_examples else [],
        )
        for entry in CORPUS
        if not entry.virtual_only
    ]


@pytest.fixture(scope="session")
def lib_cache(pytestconfig: pytest.Config) -> Path:
    """Where the releases are installed: ``$TASKBOARD_REALWORLD_CACHE``, else the pytest
    cache (else, with the cache plugin off, the system's temp directory)."""
    cache = getattr(pytestconfig, "cache", None)
    if os.environ.get("TASKBOARD_REALWORLD_CACHE") or cache is None:
        return default_cache()
    return cache.mkdir("realworld-libs")


def _installed(entry: Entry, version: str, cache: Path) -> Path:
    dist = entry.dist_of(version)
    try:
        return install(dist, version, entry.pins, cache)
    except InstallError as exc:
        unavailable(f"cannot install {dist}=={version}: {exc}")


def _env(entry: Entry, request: pytest.FixtureRequest) -> dict[str, str]:
    """The servers the entry needs: ``TASKBOARD_REDIS_URL`` (a skip, or in CI a failure,
    without it)."""
    if entry.redis:
        return {"TASKBOARD_REDIS_URL": request.getfixturevalue("redis_server_url")}
    return {}


def _fuzz_virtually(entry: Entry, libdir: Path, tmp_path: Path) -> FuzzResult:
    """The entry's virtual-mode run, the release installed in ``libdir`` first on the path."""
    return fuzz(
        entry.virtual_target,
        libdir,
        tmp_path,
        seed=entry.seed,
        max_examples=entry.virtual_examples,
        shrink_budget=entry.shrink_budget,
        options=entry.options,
        clock="virtual",
        timeout=120,
    )


def _described(result: FuzzResult) -> str:
    return f"exit {result.returncode} after {result.seconds:.1f} s:\n{result.output[-4000:]}"


@pytest.mark.parametrize("entry", _params())
def test_buggy_release_is_caught(
    entry: Entry, lib_cache: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The buggy release, unmodified: a contract violation, exit 1, a trace written."""
    env = _env(entry, request)
    result = fuzz(
        entry.target,
        _installed(entry, entry.buggy, lib_cache),
        tmp_path,
        seed=entry.seed,
        max_examples=entry.catch_examples,
        shrink_budget=entry.shrink_budget,
        options=entry.options,
        env=env,
    )
    assert result.violation, _described(result)
    assert result.trace_file is not None, _described(result)
    assert result.shrunk_steps, _described(result)


@pytest.mark.parametrize("entry", _params())
def test_fixed_release_passes(
    entry: Entry, lib_cache: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The release that fixed it, on the same seed: no violation over its examples."""
    env = _env(entry, request)
    result = fuzz(
        entry.target,
        _installed(entry, entry.fixed, lib_cache),
        tmp_path,
        seed=entry.seed,
        max_examples=entry.pass_examples,
        options=entry.options,
        env=env,
    )
    assert result.returncode == 0, _described(result)
    assert "no violation found" in result.output, _described(result)
    assert result.examples == entry.pass_examples, _described(result)


def _virtual_params() -> list[object]:
    return [pytest.param(entry, id=entry.name) for entry in CORPUS if entry.virtual_examples]


@pytest.mark.parametrize("entry", _virtual_params())
@pytest.mark.parametrize("release", ["buggy", "fixed"])
def test_virtual_mode_catches_the_buggy_release_and_passes_the_fixed(
    entry: Entry, release: str, lib_cache: Path, tmp_path: Path
) -> None:
    """In virtual mode (the library's driver on a redis-server of its own on the machine's
    clock, or, for a library that keeps time in this process, no server), the buggy release
    is caught and the fixed one passes its examples."""
    if entry.redis and shutil.which("redis-server") is None:
        unavailable("redis-server is not on PATH: no server to put on the virtual clock")
    version = entry.buggy if release == "buggy" else entry.fixed
    result = _fuzz_virtually(entry, _installed(entry, version, lib_cache), tmp_path)
    if release == "buggy":
        assert result.violation, _described(result)
        assert result.shrunk_steps, _described(result)
    else:
        assert result.returncode == 0, _described(result)
        ran = result.program_runs if entry.races else result.examples
        assert ran == entry.virtual_examples, _described(result)


def _race_params() -> list[object]:
    return [pytest.param(entry, id=entry.name) for entry in CORPUS if entry.race_program]


@pytest.mark.deep
@pytest.mark.parametrize("entry", _race_params())
def test_a_race_entry_shrinks_to_two_agents_and_replays_exactly(
    entry: Entry, lib_cache: Path, tmp_path: Path
) -> None:
    """A race entry's buggy release, caught under controlled scheduling on the virtual clock,
    shrinks to two threads and its trace fails 10 replays of 10; the race as its bug report
    tells it (a hand-written program) fails 10 runs of 10 on the buggy release and none on
    the fixed one."""
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not on PATH: no server to put on the virtual clock")
    buggy = _installed(entry, entry.buggy, lib_cache)
    result = _fuzz_virtually(entry, buggy, tmp_path)
    assert result.violation, _described(result)
    assert result.trace_file is not None
    assert result.shrunk_threads == 2, _described(result)
    assert replays(entry.virtual_target, buggy, result.trace_file) == 10
    assert replays(entry.virtual_target, buggy, entry.race_program) == 10
    fixed = _installed(entry, entry.fixed, lib_cache)
    assert replays(entry.virtual_target, fixed, entry.race_program) == 0
