"""The HTML timeline of a concurrent history: lanes, time axis, outcomes, the failing call."""

from __future__ import annotations

import hashlib
import math
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from taskboard import Lease, State, Task
from taskboard.model import Call, LinearizabilityResult, Op, Operation, Outcome
from taskboard.stateful import timeline_html
from tests.conftest import unavailable

SVG = "{http://www.w3.org/2000/svg}"
#: Seconds on the monotonic clock where the example history starts: the page counts from it.
T0 = 500.0
REASON = "SPEC 3.1 step 4: expected TakenError; the board returned 't1' claimed"


def claimed(task_id: str, agent: str, fence: int) -> Outcome:
    lease = Lease(f"token-{fence}", fence)
    return Outcome(task=Task(task_id, state=State.CLAIMED, owner=agent, lease=lease))


def race() -> tuple[list[Operation], LinearizabilityResult]:
    """Three threads: two claims of t1 that both succeed, and a release refused with an error."""
    history = [
        Operation(0, 0, Call(Op.CLAIM, "t1", agent="a1"), claimed("t1", "a1", 1), T0, T0 + 1e-3),
        Operation(1, 1, Call(Op.CLAIM, "t1", agent="a2"), claimed("t1", "a2", 2), T0 + 2e-4,
                  T0 + 9e-4),
        Operation(2, 2, Call(Op.RELEASE, "t2", token="nope"),
                  Outcome(error="LeaseLostError", message="not claimed"), T0 + 1e-4, T0 + 3e-4),
        Operation(3, 2, Call(Op.CLAIM, "t2", agent="a3"), Outcome(error="TakenError"),
                  T0 + 4e-4, T0 + 1.2e-3),
    ]  # fmt: skip
    return history, LinearizabilityResult("not linearizable", (0, 2), (1,), (REASON,))


def svg_of(page: str) -> ET.Element:
    """The page's inline SVG, parsed as XML (so it must be well-formed)."""
    match = re.search(r"<svg .*</svg>", page, re.DOTALL)
    assert match is not None, "no inline SVG in the page"
    return ET.fromstring(match.group(0))


def groups(svg: ET.Element, kind: str) -> list[ET.Element]:
    return [g for g in svg.iter(f"{SVG}g") if g.get("class", "").split()[:1] == [kind]]


def calls_by_id(svg: ET.Element) -> dict[int, ET.Element]:
    return {int(g.get("data-op", "-1")): g for g in groups(svg, "call")}


def text(element: ET.Element) -> str:
    return " ".join(t.text or "" for t in element.iter(f"{SVG}text"))


def bar(call: ET.Element) -> tuple[float, float, str]:
    rect = call.find(f"{SVG}rect")
    assert rect is not None
    return float(rect.get("x", "nan")), float(rect.get("width", "nan")), rect.get("fill", "")


def test_one_lane_per_thread_labelled_with_its_client() -> None:
    """Each thread gets one lane, named by thread (and client with clients), holding its calls."""
    history, result = race()
    svg = svg_of(timeline_html(history, result, clients=True))
    lanes = groups(svg, "lane")
    assert [lane.get("data-thread") for lane in lanes] == ["0", "1", "2"]
    names = [lane.find(f"{SVG}text[@class='lane-name']") for lane in lanes]
    assert [n.text for n in names if n is not None] == [
        "thread 0 (client 0)",
        "thread 1 (client 1)",
        "thread 2 (client 2)",
    ]
    assert sorted(int(g.get("data-op", "-1")) for g in groups(lanes[2], "call")) == [2, 3]
    assert "(client" not in timeline_html(history, result)


def test_time_axis_ticks_count_from_the_first_invocation() -> None:
    """The axis has round ticks from 0 past the last response, in µs for a short history."""
    history, result = race()
    svg = svg_of(timeline_html(history, result))
    ticks = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "tick"]
    values = [float(t.split()[0]) for t in ticks if t and t.endswith(" µs")]
    assert values[0] == 0
    assert len(values) >= 5
    assert values == sorted(values)
    assert values[-1] >= 1200  # the last response, 1.2 ms after the first invocation


def test_a_longer_history_gets_its_axis_in_milliseconds() -> None:
    """A history of tens of milliseconds is labelled in ms, not in thousands of µs."""
    history = [
        Operation(0, 0, Call(Op.CLAIM, "t1", agent="a"), claimed("t1", "a", 1), 0.0, 0.04),
        Operation(1, 1, Call(Op.CLAIM, "t1", agent="b"), claimed("t1", "b", 2), 0.01, 0.03),
    ]
    page = timeline_html(history, LinearizabilityResult("not linearizable", (0,), (1,), ("x",)))
    ticks = [t.text or "" for t in svg_of(page).iter(f"{SVG}text") if t.get("class") == "tick"]
    assert "40 ms" in ticks
    assert not any(t.endswith("µs") for t in ticks)


def test_bars_run_from_invocation_to_response() -> None:
    """A bar starts where its call was invoked and is as long as the call took."""
    history, result = race()
    calls = calls_by_id(svg_of(timeline_html(history, result)))
    (x0, w0, _), (x1, w1, _), (x2, w2, _) = (bar(calls[i]) for i in (0, 1, 2))
    assert x0 < x2 < x1  # invoked at 0, 100 and 200 µs
    assert w0 == pytest.approx(1000 / 700 * w1, rel=0.02)  # 1000 µs against 700 µs
    assert w2 == pytest.approx(200 / 700 * w1, rel=0.02)


def test_each_call_shows_its_operation_outcome_and_fence() -> None:
    """Every call's label names its operation and task, and its outcome with any fence."""
    history, result = race()
    page = timeline_html(history, result)
    calls = calls_by_id(svg_of(page))
    assert "claim('t1', agent='a1'" in text(calls[0])
    assert "ok: claimed, fence 1" in text(calls[0])
    assert "ok: claimed, fence 2" in text(calls[1])
    assert "release('t2'" in text(calls[2])
    assert "LeaseLostError" in text(calls[2])
    assert "fence" not in text(calls[2])
    assert "TakenError" in text(calls[3])
    assert "not claimed" in page  # the error's message, in the table of calls


def test_the_failing_call_is_red_and_carries_the_reason() -> None:
    """The call the checker could not place is drawn red, labelled with the reason in words."""
    history, result = race()
    page = timeline_html(history, result)
    calls = calls_by_id(svg_of(page))
    assert calls[1].get("class") == "call stuck"
    assert bar(calls[1])[2] == "#d33"
    label = " ".join(text(calls[1]).split())
    assert "cannot come next" in label
    assert "expected TakenError" in label
    assert all("cannot come next" not in text(calls[i]) for i in (0, 2, 3))
    assert {bar(calls[i])[2] for i in (0, 2, 3)}.isdisjoint({"#d33"})
    why = page[page.index("Why it fails") : page.index("Timeline")]
    assert "#0 → #2" in why  # the longest order found
    assert "#1 claim(&#x27;t1&#x27;, agent=&#x27;a2&#x27;" in why
    assert "expected TakenError" in why


def test_a_reason_with_no_stuck_call_is_still_shown() -> None:
    """A final snapshot no order reaches fails the history with no stuck call: it is said."""
    history, _ = race()
    result = LinearizabilityResult("not linearizable", (0, 2, 1, 3), (), ("the final snapshot: X",))
    page = timeline_html(history, result)
    assert "Every call could be placed, but" in page
    assert "the final snapshot: X" in page
    assert not [g for g in groups(svg_of(page), "call") if "stuck" in g.get("class", "")]


def test_a_call_with_no_response_runs_to_the_end_of_the_axis() -> None:
    """An ambiguous call (infrastructure fault) is drawn grey and open-ended, not dropped."""
    history, result = race()
    history.append(Operation(4, 1, Call(Op.CLAIM, "t3", agent="a"), None, T0 + 1e-3))
    calls = calls_by_id(svg_of(timeline_html(history, result)))
    x, width, fill = bar(calls[4])
    ends = [a + b for a, b, _ in (bar(calls[i]) for i in range(4))]
    assert fill == "#888"
    assert math.isfinite(width)
    assert x + width > max(ends)
    assert "no response" in text(calls[4])


def test_board_strings_are_escaped() -> None:
    """Task ids, agent names, error messages and reasons from the board cannot inject markup."""
    evil = "<script>alert(1)</script>"
    history = [
        Operation(0, 0, Call(Op.CLAIM, evil, agent='"><img src=x>'), claimed(evil, "x", 1),
                  0.0, 1e-3),
        Operation(1, 1, Call(Op.COMPLETE, evil, token="<t>"),
                  Outcome(error="LeaseLostError", message="<b>boom</b>"), 0.0, 1e-3),
    ]  # fmt: skip
    result = LinearizabilityResult("not linearizable", (0,), (1,), (f"task {evil} & co",))
    page = timeline_html(history, result)
    for raw in ("<script", "<img", "<b>boom", "<t>", "& co"):
        assert raw not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;boom&lt;/b&gt;" in page
    svg_of(page)  # still well-formed XML


def test_an_empty_or_linearizable_history_still_makes_a_page() -> None:
    """No history and a passing one render without error and without a failure box."""
    assert "Why it fails" not in timeline_html([], LinearizabilityResult("linearizable"))
    history, _ = race()
    page = timeline_html(history, LinearizabilityResult("linearizable", (0, 2, 1, 3)))
    assert "Why it fails" not in page
    assert len(groups(svg_of(page), "call")) == 4


# -- the page, byte for byte -------------------------------------------------------------------


def crowded() -> tuple[list[Operation], LinearizabilityResult]:
    """Seconds long, one thread's calls overlapping (their labels take tiers), a task id too
    long for a label line, a reason that wraps, no order found, a stuck id the history lacks
    and a reason of no stuck call."""
    long_id = "t-" + "x" * 200
    history = [
        Operation(n, 0, Call(Op.CLAIM, long_id if n == 2 else f"t{n}", agent=f"a{n}"),
                  claimed(f"t{n}", f"a{n}", n + 1), n * 0.5, n * 0.5 + 3.0)
        for n in range(5)
    ] + [
        Operation(5, 1, Call(Op.COMPLETE, "t1", token="a-token-longer-than-twelve"),
                  Outcome(error="LeaseLostError", message="gone"), 1.0, 7.5),
    ]  # fmt: skip
    reason = "SPEC 3.2: " + " ".join(["the lease had ended before the call began"] * 4)
    result = LinearizabilityResult(
        "not linearizable", (), (5, 9), (reason, "no such call", "the final snapshot: Y")
    )
    return history, result


def pinned_pages() -> dict[str, str]:
    """Pages of fixed histories that between them take every branch of the page's code."""
    history, result = race()
    ambiguous = [*history, Operation(4, 1, Call(Op.CLAIM, "t3", agent="a"), None, T0 + 1e-3)]
    evil = "<script>alert(1)</script>"
    escaped = [
        Operation(0, 0, Call(Op.CLAIM, evil, agent='"><img src=x>'), claimed(evil, "x", 1),
                  0.0, 1e-3),
        Operation(1, 1, Call(Op.COMPLETE, evil, token="<t>"),
                  Outcome(error="LeaseLostError", message="<b>boom</b>"), 0.0, 1e-3),
    ]  # fmt: skip
    slower = [
        Operation(0, 0, Call(Op.CLAIM, "t1", agent="a"), claimed("t1", "a", 1), 0.0, 0.04),
        Operation(1, 1, Call(Op.CLAIM, "t1", agent="b"), claimed("t1", "b", 2), 0.01, 0.03),
    ]
    failing = LinearizabilityResult("not linearizable", (0,), (1,), ("x",))
    return {
        "race": timeline_html(history, result),
        "race on clients": timeline_html(history, result, clients=True),
        "final snapshot": timeline_html(
            history, LinearizabilityResult("not linearizable", (0, 2, 1, 3), (), ("X",))
        ),
        "ambiguous": timeline_html(ambiguous, result),
        "milliseconds": timeline_html(slower, failing),
        "crowded": timeline_html(*crowded()),
        "escaped": timeline_html(escaped, LinearizabilityResult("not linearizable", (0,), (1,),
                                                                (f"task {evil} & co",))),
        "empty": timeline_html([], LinearizabilityResult("linearizable")),
        "linearizable": timeline_html(history, LinearizabilityResult("linearizable", (0, 2, 1, 3))),
        "unknown": timeline_html(history, LinearizabilityResult("unknown")),
    }  # fmt: skip


#: The SHA-256 of each pinned page, as the code made it when they were pinned.
PINNED = {
    "race": "db2c19e00d9a9bb8c260eefa926fb810a4361c2fd650cfcc42e8a8a03b07f627",
    "race on clients": "e5e7bd5d488f01a0ea4cfd038fed4f146c7f6c94dd7e6452144c6daa9fe1c9db",
    "final snapshot": "87bfdd4819be1904329259e1047d3f709cabe8558c7bae204d49fa772823f4ab",
    "ambiguous": "f1cfc942d230ff242091309cb5b24f43c84cac724cb88924b1e20f904e5496a9",
    "milliseconds": "1958ec37c97721193065dade5fc0b75c8fc022daa567ec0feb639c2dd00cc804",
    "crowded": "fa9e5e4fa1d7aad39560019c51b2759f44d35c2f529a4aab79f13f548a0c0bd3",
    "escaped": "33f154c58ac34a1884038207da56e998d25f3bed8fd1c48cc7783d88a8f6361a",
    "empty": "41656903fcb51a643bf012dfc7cf34cabcad1f86e0ba5f713e72e9049bee7f12",
    "linearizable": "d8c12fd15423a5c5a4c842408631ee2192942b726badbbfdc543cc228da24ab5",
    "unknown": "a72fa9cb1f0cfe146630fdd259affccd44a823fca0984ce39767bc18431f450d",
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_page_of_a_fixed_history_is_pinned_byte_for_byte(name: str, tmp_path: Path) -> None:
    """A fixed history's page does not change, to the byte, unless its digest here does."""
    page = pinned_pages()[name]
    digest = hashlib.sha256(page.encode("utf-8")).hexdigest()
    written = tmp_path / "page.html"
    written.write_text(page, encoding="utf-8")
    assert digest == PINNED[name], f"the page changed; it is in {written}"


# -- in a real browser -------------------------------------------------------------------------


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium on this machine with no network, profile or sandbox."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        unavailable("chromium is not on PATH")
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'profile'}",
         *args],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def escaping_race(tmp_path: Path) -> Path:
    history, result = race()
    history.append(
        Operation(4, 2, Call(Op.CLAIM, "<script>document.title='pwned'</script>", agent="a"),
                  Outcome(error="NotFoundError"), T0 + 1.3e-3, T0 + 1.4e-3)
    )  # fmt: skip
    page = tmp_path / "timeline.html"
    page.write_text(timeline_html(history, result, clients=True), encoding="utf-8")
    return page


@pytest.mark.browser
def test_chromium_renders_the_lanes_and_runs_no_board_markup(tmp_path: Path) -> None:
    """Headless Chromium parses the page into one lane per thread, the failing call marked,
    and a task id that looks like a script stays text."""
    page = escaping_race(tmp_path)
    done = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert done.returncode == 0, done.stderr
    dom = done.stdout
    assert dom.count('<g class="lane"') == 3
    assert dom.count('<g class="call ') == 5
    assert dom.count('<g class="call stuck"') == 1
    assert "thread 2 (client 2)" in dom
    assert "<script" not in dom
    assert "&lt;script&gt;document.title" in dom
    assert "<title>taskboard: concurrent history, not linearizable</title>" in dom


@pytest.mark.browser
def test_chromium_takes_a_screenshot_of_the_page(tmp_path: Path) -> None:
    """Headless Chromium renders the page to a PNG of the window's size."""
    page = escaping_race(tmp_path)
    shot = tmp_path / "timeline.png"
    done = chromium(tmp_path, "--window-size=1300,900", f"--screenshot={shot}", page.as_uri())
    assert done.returncode == 0, done.stderr
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (1300, 900)


def test_a_controlled_race_lists_its_interleaving_in_order_escaped() -> None:
    """With an interleaving, the page lists each turn in order, HTML-escaped; without one it
    has no such section."""
    history, result = race()
    turns = ["thread 0 #0: start", "thread 1 #1: SELECT v FROM t WHERE k < 3"]
    page = timeline_html(history, result, interleaving=turns)
    assert "<h2>Interleaving</h2>" in page
    assert page.index("thread 0 #0: start") < page.index("SELECT v FROM t WHERE k &lt; 3")
    assert page.endswith("</ol></body></html>\n")
    assert "Interleaving" not in timeline_html(history, result)
