"""The corpus's own bookkeeping, without running it: every entry runs in virtual mode or
says why it stays in wall mode (``docs/real-bugs.md``)."""

from __future__ import annotations

from pathlib import Path

from tests.realworld.corpus import CORPUS, REPO_ROOT


def test_every_entry_runs_in_virtual_mode_or_says_why_not() -> None:
    """An entry has virtual-mode examples, or a reason to stay in wall mode, never both."""
    for entry in CORPUS:
        assert bool(entry.virtual_examples) != bool(entry.wall_only), entry.name


def test_every_virtual_target_is_a_module_of_the_corpus() -> None:
    """Each virtual-mode entry's module defines ``virtual`` (read, not imported: importing
    it needs the library installed)."""
    for entry in CORPUS:
        if entry.virtual_examples:
            module = entry.target.split(":")[0].replace(".", "/") + ".py"
            source = Path(REPO_ROOT, module).read_text()
            assert "\nvirtual = " in source, entry.name
