"""Campaigns (``fuzz --campaign NAME --database redis://…``, ``taskboard campaign NAME``):
workers publish progress, coverage and finds to one Redis, and one view merges them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskboard._fuzz import fleet, fleet_view
from taskboard._fuzz.fleet import CampaignView, Find, Publisher, read_campaign
from taskboard._fuzz.fleet_html import campaign_html
from taskboard.stateful._session import ExampleStats
from tests.test_timeline import chromium

MEMORY = "taskboard.hosts.memory:MemoryBoard"
#: Caught within a few examples: renew accepts any token (SPEC 3.5).
MUTANT = "taskboard.hosts.mutants:RenewWithoutTokenCheck"


def taskboard(cwd: Path, *args: str) -> subprocess.Popen[str]:
    """``python -m taskboard ARGS``, started in ``cwd``; stdout and stderr together."""
    return subprocess.Popen(
        [sys.executable, "-m", "taskboard", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def show(campaign: str, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``taskboard campaign CAMPAIGN --database URL EXTRA``, run to its end."""
    return subprocess.run(
        [sys.executable, "-m", "taskboard", "campaign", campaign, "--database", url, *extra],
        capture_output=True,
        text=True,
        check=False,
    )


def finished(process: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = process.communicate(timeout=240)
    return process.returncode, out


@pytest.fixture
def campaign(redis_server_url: str) -> Iterator[str]:
    """A fresh campaign name; its keys are deleted afterwards."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    client = redis.Redis.from_url(redis_server_url)
    keys = list(client.scan_iter(f"taskboard:campaign:{name}:*"))
    if keys:
        client.delete(*keys)


def test_two_workers_one_on_a_mutant_show_in_one_view_and_the_find_replays(
    tmp_path: Path, redis_server_url: str, campaign: str
) -> None:
    """Two workers on one campaign, one on a mutant: the view shows both workers, the merged
    totals and the find (exit 1), and the find's trace replays the bug."""
    common = ("--campaign", campaign, "--database", redis_server_url, "--quiet")
    correct = taskboard(tmp_path, "fuzz", MEMORY, "--max-examples", "60", "--seed", "1", *common)
    buggy = taskboard(tmp_path, "fuzz", MUTANT, "--seed", "2", "--trace-dir", "mine", *common)
    (correct_code, correct_out), (buggy_code, buggy_out) = finished(correct), finished(buggy)
    assert correct_code == 0, correct_out
    assert buggy_code == 1, buggy_out

    view = read_campaign(redis_server_url, campaign)
    assert len(view.workers) == 2
    assert {about["target"] for about in view.workers.values()} == {MEMORY, MUTANT}
    assert not view.alive  # both finished
    assert view.totals["examples"] + view.totals.get("programs", 0) >= 60
    assert view.totals["finds"] == 1
    assert sum(view.coverage.values()) > 0
    [find] = view.finds
    assert (find.kind, find.clause) == ("violation", "SPEC 3.5")
    assert '"verdict"' in find.trace

    shown = show(campaign, redis_server_url, "--traces", str(tmp_path / "found"))
    assert shown.returncode == 1, shown.stdout + shown.stderr
    assert "0 worker(s) alive, 2 seen" in shown.stdout
    assert "1 violation(s)" in shown.stdout
    assert "violation (SPEC 3.5)" in shown.stdout
    [trace] = (tmp_path / "found").glob("trace-*.json")
    replayed = subprocess.run(
        [sys.executable, "-m", "taskboard", "replay", str(trace), "--board", MUTANT],
        capture_output=True,
        text=True,
        check=False,
    )
    assert replayed.returncode == 1, replayed.stdout + replayed.stderr
    assert "FAIL: contract violation" in replayed.stdout


def test_a_campaign_with_nothing_found_exits_0(
    tmp_path: Path, redis_server_url: str, campaign: str
) -> None:
    """taskboard campaign exits 0 when no worker found anything."""
    worker = taskboard(
        tmp_path, "fuzz", MEMORY, "--max-examples", "20", "--seed", "1", "--quiet",
        "--campaign", campaign, "--database", redis_server_url,
    )  # fmt: skip
    assert finished(worker)[0] == 0
    shown = show(campaign, redis_server_url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "finds: 0" in shown.stdout


def test_an_unknown_campaign_is_a_usage_error(redis_server_url: str, campaign: str) -> None:
    """A campaign no worker published to: exit 2, one line, no traceback."""
    shown = show(campaign, redis_server_url)
    assert shown.returncode == 2
    assert f"no campaign '{campaign}'" in shown.stderr
    assert "Traceback" not in shown.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--campaign", "nightly"], "give the campaign's --database redis://"),
        (["--campaign", "nightly", "--database", "examples"], "--database redis://"),
        (["--campaign", "bad name!", "--database", "redis://127.0.0.1:1/0"], "a campaign name"),
    ],
)
def test_a_campaign_needs_a_good_name_and_a_redis_database(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """--campaign without a redis:// database, or with a bad name: exit 2 before the run."""
    done = subprocess.run(
        [sys.executable, "-m", "taskboard", "fuzz", MEMORY, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_campaign_is_bounded_and_expires(
    redis_server_url: str, campaign: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeline is trimmed to its length, and every key of the campaign expires."""
    monkeypatch.setattr(fleet, "TIMELINE_LENGTH", 10)
    monkeypatch.setattr(fleet, "PUBLISH_EVERY", 0.0)
    publisher = Publisher(redis_server_url, campaign, MEMORY)
    example = ExampleStats(False, (), {}, Counter({("open", "claim", "ok"): 1}), Counter(), None)
    for _ in range(300):
        publisher.heard(example)
    publisher.finish(None, fault=False, clause=None, trace_file=None)
    client = redis.Redis.from_url(redis_server_url)
    prefix = f"taskboard:campaign:{campaign}:"
    assert client.xlen(prefix + "timeline") < 200  # trimmed (approximately, as Redis does)
    for key in ("totals", "coverage", "workers", "timeline"):
        assert 0 < client.ttl(prefix + key) <= fleet.KEEP_SECONDS
    view = read_campaign(redis_server_url, campaign)
    assert view.totals["examples"] == 300
    assert view.coverage == {"open | claim | ok": 300}


def a_view() -> CampaignView:
    """A campaign view of two workers, three timeline points and a find whose report holds
    markup, as read_campaign would return it."""
    return CampaignView(
        name="nightly",
        totals={"examples": 120, "steps": 9000, "finds": 1},
        coverage={"open | claim | ok": 40, "claimed, live | claim | TakenError": 7},
        workers={
            "a:1": {"target": MEMORY, "started": 1_800_000_000.0},
            "b:2": {"target": MUTANT, "started": 1_800_000_001.0},
        },
        alive=frozenset({"a:1"}),
        timeline=(
            (1_800_000_000.0, 0, 0, 0, 0),
            (1_800_000_010.0, 60, 4000, 30, 0),
            (1_800_000_020.0, 120, 9000, 41, 1),
        ),
        finds=(Find("violation", 1_800_000_020.0, "b:2", "SPEC 3.5", "<script>x</script>", "{}"),),
    )


def test_the_html_page_has_the_plot_tables_and_escaped_reports() -> None:
    """The page holds the plot (a line of coverage and one of finds, a point per timeline
    entry), the workers, the coverage and the finds, with the board's text escaped."""
    page = campaign_html(a_view(), "redis://h/0")
    assert page.count("<polyline") == 2
    assert page.count(",") >= 6  # three x,y points per line
    assert '<td class="alive">alive</td>' in page
    assert '<td class="gone">gone</td>' in page
    assert "open | claim | ok" in page
    assert "<script>" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page


@pytest.mark.browser
def test_chromium_renders_the_campaign_page(tmp_path: Path) -> None:
    """Headless Chromium parses the page: its title, the plot's two lines, a row per worker
    and per transition, and the find's report as text."""
    page = tmp_path / "campaign.html"
    page.write_text(campaign_html(a_view(), "redis://h/0"), encoding="utf-8")
    done = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr
    dom = done.stdout
    assert "<title>taskboard campaign nightly</title>" in dom
    assert dom.count("<polyline") == 2
    assert dom.count("<tr>") == 1 + 2 + 1 + 2  # headers and rows of both tables
    assert "&lt;script&gt;x&lt;/script&gt;" in dom
    shot = tmp_path / "campaign.png"
    drawn = chromium(tmp_path, "--window-size=1000,800", f"--screenshot={shot}", page.as_uri())
    assert drawn.returncode == 0, drawn.stderr
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_watch_shows_the_view_again_until_ctrl_c(
    tmp_path: Path, redis_server_url: str, campaign: str
) -> None:
    """--watch prints the view every SECONDS and rewrites --html; Ctrl-C ends it with the
    campaign's exit code (0: nothing found)."""
    worker = taskboard(
        tmp_path, "fuzz", MEMORY, "--max-examples", "5", "--seed", "1", "--quiet",
        "--campaign", campaign, "--database", redis_server_url,
    )  # fmt: skip
    assert finished(worker)[0] == 0
    watching = taskboard(
        tmp_path, "campaign", campaign, "--database", redis_server_url, "--watch", "0.2",
        "--html", "page.html",
    )  # fmt: skip
    # Ctrl-C once the first view is out (the page is written with it), not while a loaded
    # machine is still starting the process, then once it has refreshed at least once more.
    page = tmp_path / "page.html"
    deadline = time.monotonic() + 60
    while not page.exists() and time.monotonic() < deadline and watching.poll() is None:
        time.sleep(0.05)
    time.sleep(1)
    watching.send_signal(signal.SIGINT)
    code, out = finished(watching)
    assert code == 0, out
    assert out.count(f"campaign {campaign} at") >= 2
    assert (tmp_path / "page.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert not list(tmp_path.glob(".page.html.*"))  # no temporary file left behind


@pytest.mark.parametrize("seconds", ["0", "-1"])
def test_watch_needs_a_positive_interval(seconds: str, redis_server_url: str) -> None:
    """--watch 0 or a negative interval: exit 2 before anything is read."""
    shown = show("any-name", redis_server_url, "--watch", seconds)
    assert shown.returncode == 2
    assert "--watch must be a positive number of seconds" in shown.stderr


def test_ctrl_c_while_a_watch_reads_again_ends_it_with_the_shown_views_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C that lands while --watch reads the next view (not in its sleep) still ends the
    watch with the shown view's exit code (1: it has a find); before any view is shown it is
    an interruption."""
    reads = iter([a_view()])

    def read_once_then_ctrl_c(url: str, name: str) -> CampaignView:
        view = next(reads, None)
        if view is None:
            raise KeyboardInterrupt
        return view

    monkeypatch.setattr(fleet_view, "read_campaign", read_once_then_ctrl_c)
    monkeypatch.setattr(fleet_view.time, "sleep", lambda seconds: None)
    assert fleet_view.show_campaign("nightly", "redis://unused/0", watch=0.5) == 1
    assert "nightly" in capsys.readouterr().out
    with pytest.raises(KeyboardInterrupt):
        fleet_view.show_campaign("nightly", "redis://unused/0", watch=0.5)
