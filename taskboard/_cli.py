"""The ``taskboard`` command: fuzz a board, replay a trace, check a snapshot.

Exit codes: 0 when all is well, 1 when a contract violation or a snapshot problem was
found, 2 for a usage mistake (a bad target, file, budget or database), which is reported
in one line without a traceback, and 3 when ``fuzz`` or ``replay`` stopped on an
infrastructure fault (the storage failed or a call hung: no verdict on the contract).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from taskboard._check import check
from taskboard._clock import CLOCK_MODES, as_utc
from taskboard._contract import Lease, State, Task
from taskboard._fuzz import (
    DEFAULT_TARGET,
    MODES,
    WHAT_TO_PASS,
    FuzzOptions,
    FuzzReport,
    UsageError,
    check_writable_file,
    fuzz,
    machine_of,
    parse_budget,
)
from taskboard._fuzz import resolve_target as _resolve_target
from taskboard._fuzz.fleet_view import show_campaign
from taskboard._fuzz.junit import JUnitRun, check_junit_path, remove_old_junit, write_junit_xml
from taskboard._fuzz.report import RunHeader, lease_limit_lines, renew_ttl_lines, run_notes
from taskboard._fuzz.serving import process_server, serving
from taskboard._fuzz.summary_json import summary_json, write_summary_json
from taskboard._fuzz.targets import exec_target
from taskboard._operations import OPERATIONS, OPTIONAL_OPERATIONS
from taskboard._protocol.spares import end_spares
from taskboard.model._model import EXPIRED_LEASE_POLICIES
from taskboard.stateful._command import EXEC_PREFIX
from taskboard.stateful._machine import BoardMachine
from taskboard.stateful._replay import missing_nemesis, replay_trace
from taskboard.stateful._reports import InfrastructureFault, refused_allowed_claim
from taskboard.stateful._settings import MOST_PCT_DEPTH, RACE_EXPLORATION, RACE_SCHEDULING
from taskboard.stateful._tracefile import (
    TRACE_DIR_ENV,
    TraceFileError,
    load_trace,
    render_regression_test,
)

__all__ = ["main"]

OK, FOUND, USAGE, FAULT = 0, 1, 2, 3
#: The shell's code for a run stopped by Ctrl-C (128 + SIGINT).
INTERRUPTED = 130
#: The shell's code for a command whose reader went away (128 + SIGPIPE).
BROKEN_PIPE = 141

#: Transitions worth seeing reached, as (state, operation, outcome), with what they mean.
KEY_TRANSITIONS = (
    (("open", "claim", "ok"), "claim of an open task"),
    (("open", "claim", "BlockedError"), "claim blocked by a dependency"),
    (("claimed, live", "claim", "TakenError"), "claim of a live lease"),
    (("claimed, at until", "claim", "ok"), "takeover at exactly until"),
    (("claimed, expired", "claim", "ok"), "takeover after expiry"),
    (("claimed, live", "renew (current token)", "ok"), "renew of a live lease"),
    (("claimed, at until", "renew (current token)", "LeaseLostError"), "renew at the boundary"),
    (("claimed, expired", "renew (current token)", "LeaseLostError"), "renew after expiry"),
    (("claimed, live", "renew (stale token)", "LeaseLostError"), "stale renew after takeover"),
    (("claimed, live", "complete (stale token)", "LeaseLostError"), "stale complete"),
    (("claimed, live", "release (other task's token)", "LeaseLostError"), "another task's token"),
    (("claimed, live", "complete (forged token)", "LeaseLostError"), "forged token"),
    (("claimed, expired", "release (current token)", "*"), "SPEC 3.4: expired, not taken over"),
    (("done", "claim", "TerminalError"), "claim of a done task"),
    (("failed", "claim", "ok"), "claim of a failed task"),
    (("open", "claim (empty agent)", "ValueError"), "claim with an empty agent"),
    (("unknown id", "claim", "NotFoundError"), "unknown id"),
)


class _Parser(argparse.ArgumentParser):
    """argparse, with usage mistakes as one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="taskboard",
        description="Prove that a storage backend keeps the taskboard coordination contract.",
        epilog="Exit codes: 0 all well, 1 a violation or problem found, 2 a usage mistake, "
        "3 fuzz or replay stopped on an infrastructure fault.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    fuzz_cmd = commands.add_parser(
        "fuzz",
        help="fuzz a board with the model checker until the budget runs out",
        description=(
            "Fuzz a board with BoardMachine until the budget or example count runs out, or "
            "a contract violation is found. On a violation it writes the shrunk trace, saves "
            "the failure in the example database (the next run, or a plain pytest run of the "
            "same machine, replays it first) and exits 1. A board call that raises an "
            "exception the contract does not name (a ConnectionError, a driver error), or "
            "hangs past --call-timeout, is an infrastructure fault: the run stops and exits 3, "
            "unless --tolerate-faults."
        ),
    )
    fuzz_cmd.add_argument(
        "target",
        nargs="?",
        help="module:Name of a BoardMachine subclass or of a board factory (tasks, clock) -> "
        f"Board (default: the bundled SQLite host, {DEFAULT_TARGET})",
    )
    fuzz_cmd.add_argument(
        "--exec",
        dest="exec_command",
        metavar="CMD",
        help="fuzz the board that this command serves over the board protocol (SPEC 10, "
        "docs/protocol.md), in any language; split like a shell command line, in place of "
        "a target",
    )
    fuzz_cmd.add_argument("--budget", default="60s", help="how long: 90s, 15m, 8h (default 60s)")
    fuzz_cmd.add_argument(
        "--shrink-budget",
        default="60s",
        help="how long a failure found is shrunk before it is reported with the smallest trace "
        "so far: 30s, 5m (default 60s; the run's budget does not cut shrinking short)",
    )
    fuzz_cmd.add_argument("--max-examples", type=int, help="stop after this many examples")
    fuzz_cmd.add_argument("--seed", type=int, help="make the run repeatable (per worker)")
    fuzz_cmd.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    fuzz_cmd.add_argument(
        "--database",
        help="example database: a directory, or a redis:// URL shared by a fleet "
        "(default: Hypothesis's, .hypothesis/examples)",
    )
    fuzz_cmd.add_argument(
        "--trace-dir",
        default=os.environ.get(TRACE_DIR_ENV, "taskboard-traces"),
        help=f"where failing traces go (default: ${TRACE_DIR_ENV} or ./taskboard-traces)",
    )
    fuzz_cmd.add_argument(
        "--mode",
        choices=MODES,
        default="mixed",
        help="mixed (default): sequential programs and parallel ones (several threads at once, "
        "checked for linearizability) take turns; sequential: no threads, so races go "
        "unchecked; parallel: threads only",
    )
    fuzz_cmd.add_argument(
        "--parallel",
        action="store_true",
        help="the same as --mode parallel",
    )
    fuzz_cmd.add_argument(
        "--processes",
        action="store_true",
        help="run each thread of a parallel program in an OS process of its own, on a client "
        "it opens by unpickling the board (the board must pickle as a client of the same "
        "storage: a file path or a URL)",
    )
    fuzz_cmd.add_argument(
        "--race-scheduling",
        choices=RACE_SCHEDULING,
        help="how the threads of a parallel program interleave: 'os', at once as the "
        "operating system runs them; 'controlled', one at a time at their round trips to the "
        "store, in an order drawn, shrunk and replayed exactly (default: the machine's "
        "race_scheduling, os)",
    )
    fuzz_cmd.add_argument(
        "--race-exploration",
        choices=RACE_EXPLORATION,
        help="with controlled scheduling, how the drawn data picks who goes on at each round "
        "trip: 'random', a drawn choice each; 'pct', drawn priorities (the highest that may "
        "go on goes on) and --pct-depth - 1 drawn change points (default: the machine's "
        "race_exploration, random)",
    )
    fuzz_cmd.add_argument(
        "--pct-depth",
        type=int,
        metavar="D",
        help=f"with --race-exploration pct: the depth of race aimed at, 1 to {MOST_PCT_DEPTH} "
        "(1: strict priorities; each more draws one change point; default: the machine's "
        "pct_depth, 3)",
    )
    fuzz_cmd.add_argument(
        "--call-timeout",
        type=float,
        metavar="SECONDS",
        help="cut off a board call that takes longer, as an infrastructure fault (default: "
        "the machine's, 10 s; 0: no limit)",
    )
    fuzz_cmd.add_argument(
        "--tolerate-faults",
        action="store_true",
        help="fuzz through infrastructure faults: after one, accept the snapshot with or "
        "without the failed call applied, and go on",
    )
    fuzz_cmd.add_argument(
        "--clock",
        choices=CLOCK_MODES,
        help="where the board's time comes from: 'manual', a clock the checker moves (exact "
        "boundaries); 'virtual', the same clock moving the target machine's server's too "
        "(--server, or a machine with server = taskboard.servers.Redis(); Linux); or "
        "'wall', real time, for a board that keeps time on its own server (default: the "
        "machine's clock_mode, manual)",
    )
    fuzz_cmd.add_argument(
        "--server",
        metavar="redis|postgres",
        help="with --clock virtual: start this server on the checker's clock for the run (one "
        "per worker), and stop it at the end; the machine's server attribute is it (make_board "
        "reads self.server.url) and a board factory reads its URL from the environment "
        "variable TASKBOARD_SERVER_URL",
    )
    fuzz_cmd.add_argument(
        "--clock-skew",
        type=float,
        metavar="MS",
        help="in wall mode, how far the board's clock may be from this machine's, in "
        "milliseconds (default: the machine's clock_skew, 1 ms)",
    )
    fuzz_cmd.add_argument(
        "--client-clock-skew",
        type=float,
        metavar="MS",
        help="in wall mode, how far apart the clocks of the hosts your clients run on may be, "
        "in milliseconds: each call's time.time() and datetime.now() (with time-machine, "
        "the [virtual] extra) are shifted by its client's offset, so a library that judges "
        "expiry on the client is caught (default: the machine's "
        "client_clock_skew, none)",
    )
    fuzz_cmd.add_argument(
        "--shortest-lease",
        type=float,
        metavar="MS",
        help="the shortest lease the store honours, in milliseconds: TTLs and clock steps are "
        "drawn no shorter (a Redlock's clock-drift allowance, a store that keeps whole "
        "seconds; default: the machine's shortest_lease, none)",
    )
    fuzz_cmd.add_argument(
        "--expired-lease-policy",
        choices=EXPIRED_LEASE_POLICIES,
        help="SPEC 3.4: what the board does with an expired lease's token that nobody took "
        "over: 'accept' (renew, release, complete and fail still work), 'reject' "
        "(LeaseLostError) or 'either' (default: the machine's expired_lease_policy; for "
        "--exec, the one the command's hello declares, else either)",
    )
    fuzz_cmd.add_argument(
        "--lease-limits",
        metavar="LIMITS",
        help="what leases the store can hold, comma-separated: no-expiry-only (a lock that "
        "never expires), expiring-only, no-renew-to-no-expiry, whole-units, shortest=MS, "
        "longest=MS; the machine asks for no other lease (default: the machine's "
        "lease_limits, any; a board may also answer NotImplementedError, which is learned)",
    )
    fuzz_cmd.add_argument(
        "--nemesis",
        metavar="STEPS",
        help="which storage failures run as rare steps (SPEC 9): restart (the target's "
        "restart_storage hook), drop (drop_connections), restart,drop, or none (default: "
        "every hook the target defines; see docs/nemesis.md)",
    )
    fuzz_cmd.add_argument(
        "--junit-xml",
        metavar="FILE",
        help="also write the run's verdict as JUnit XML for CI: one test case (suite "
        "'taskboard fuzz', class the target, name 'contract') that fails on a contract "
        "violation, errors on an infrastructure fault and passes otherwise (Ctrl-C too); "
        "written atomically when the run ends, not written on a usage mistake (an old file "
        "there is removed as the command starts; see docs/cli.md)",
    )
    fuzz_cmd.add_argument(
        "--campaign",
        metavar="NAME",
        help="publish this run's progress, SPEC transition coverage and finds (with their "
        "traces) to the --database redis:// URL under NAME, as every worker of the campaign "
        "does, on any machine; `taskboard campaign NAME` shows them (see docs/campaigns.md)",
    )
    fuzz_cmd.add_argument(
        "--json",
        metavar="FILE",
        help="also write the summary's figures as JSON for dashboards: the verdict, counts, "
        "seed, every setting in force and where it came from, and the transition coverage "
        "(written atomically when the run ends; the schema is in docs/cli.md)",
    )
    fuzz_cmd.add_argument(
        "--verbose",
        action="store_true",
        help="also list every transition and parallel call reached after the key transitions",
    )
    fuzz_cmd.add_argument("--quiet", action="store_true", help="no live progress line")

    replay_cmd = commands.add_parser(
        "replay",
        help="replay a trace file against a board",
        description=(
            "Replay a trace's steps against a fresh board and judge each one as the machine "
            "does. Reports the first step where the board breaks the contract (exit 1), an "
            "infrastructure fault (exit 3), or "
            "that the trace now passes (exit 0). Tokens are mapped by lease, so a trace "
            "recorded on one board replays on another."
        ),
    )
    replay_cmd.add_argument("trace", help="a trace file written by a failing run")
    replay_cmd.add_argument(
        "--board",
        help="module:Name of a board factory or BoardMachine subclass "
        "(default: the target recorded in the trace)",
    )
    replay_cmd.add_argument(
        "--exec",
        dest="exec_command",
        metavar="CMD",
        help="replay against the board this command serves over the board protocol (SPEC 10)",
    )
    replay_cmd.add_argument(
        "--server",
        metavar="redis|postgres",
        help="replay a virtual-mode trace on this server, started on the checker's clock for "
        "the replay, as fuzz --server does (the machine's server; TASKBOARD_SERVER_URL for a "
        "board factory)",
    )
    replay_cmd.add_argument(
        "--emit-test",
        metavar="FILE",
        help="also write a standalone pytest regression test that replays the trace",
    )

    campaign_cmd = commands.add_parser(
        "campaign",
        help="show a fuzzing campaign that workers publish to Redis",
        description=(
            "Show the merged state of the campaign NAME that `taskboard fuzz --campaign NAME "
            "--database URL` workers publish: workers alive, totals, the rate, coverage per "
            "SPEC transition, coverage over time and the finds. Exit 0 if nothing was found, "
            "1 if something was, 2 on a usage mistake (no such campaign, no server)."
        ),
    )
    campaign_cmd.add_argument("name", help="the campaign's name")
    campaign_cmd.add_argument(
        "--database", required=True, metavar="URL", help="the campaign's redis:// URL"
    )
    campaign_cmd.add_argument(
        "--traces",
        metavar="DIR",
        help="also write each find's trace file into DIR, for `taskboard replay`",
    )
    campaign_cmd.add_argument(
        "--html",
        metavar="FILE",
        help="also write the view as a static HTML page with a plot of coverage and finds "
        "over time",
    )
    campaign_cmd.add_argument(
        "--watch",
        type=float,
        metavar="SECONDS",
        help="show the view again every SECONDS (and rewrite --html) until Ctrl-C",
    )

    check_cmd = commands.add_parser(
        "check",
        help="run check() on a JSON snapshot of tasks",
        description=(
            "Run check() on a JSON dump of tasks (a list of task objects, or an object with "
            "a 'tasks' list) and print the problems; exit 1 if there are any."
        ),
    )
    check_cmd.add_argument("snapshot", help="the JSON file")
    check_cmd.add_argument("--json", action="store_true", help="print the problems as JSON")
    return parser


#: The options whose value may look like a negative number, which argparse takes for an option.
_VALUED_OPTIONS = (
    "--budget",
    "--shrink-budget",
    "--max-examples",
    "--seed",
    "--workers",
    "--call-timeout",
    "--clock-skew",
    "--client-clock-skew",
    "--shortest-lease",
)


def _joined_negative_values(argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--budget -5s`` as ``--budget=-5s``, so that a negative value reaches the
    check that says what is wrong with it, not argparse's "expected one argument"."""
    joined: list[str] = []
    for arg in argv:
        if joined and joined[-1] in _VALUED_OPTIONS and re.fullmatch(r"-\.?\d.*", arg) is not None:
            joined[-1] = f"{joined[-1]}={arg}"
        else:
            joined.append(arg)
    return joined


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    args = _parser().parse_args(_joined_negative_values(sys.argv[1:] if argv is None else argv))
    try:
        if args.command == "fuzz":
            return _fuzz(args)
        if args.command == "replay":
            return _replay(args)
        if args.command == "campaign":
            return show_campaign(
                args.name, args.database, traces=args.traces, html=args.html, watch=args.watch
            )
        return _check(args)
    except (UsageError, TraceFileError) as exc:
        print(f"taskboard {args.command}: error: {exc}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        print(f"taskboard {args.command}: interrupted (Ctrl-C)", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``| head``): stop quietly, as other command-line tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE
    finally:
        end_spares()  # the board processes of --exec started ahead of need (SPEC 10)


# -- fuzz -----------------------------------------------------------------------------------


def _fuzz(args: argparse.Namespace) -> int:
    if args.junit_xml is not None:
        # Before anything else: a path that cannot be written is a usage mistake now, not
        # after an 8-hour run, and an earlier run's file never stands for this run.
        check_junit_path(args.junit_xml)
        remove_old_junit(args.junit_xml)
    if args.json is not None:
        check_writable_file(args.json, "--json")
    if args.exec_command is not None and args.target is not None:
        raise UsageError("pass a target or --exec CMD, not both")
    target = args.target or DEFAULT_TARGET
    if args.exec_command is not None:
        target = f"{EXEC_PREFIX}{args.exec_command}"
    budget = parse_budget(args.budget)
    crew = "1 worker" if args.workers == 1 else f"{args.workers} workers"
    options = FuzzOptions(
        budget=budget,
        shrink_budget=parse_budget(args.shrink_budget),
        max_examples=args.max_examples,
        seed=args.seed,
        workers=args.workers,
        database=args.database,
        trace_dir=args.trace_dir,
        mode="parallel" if args.parallel else args.mode,
        processes=args.processes,
        race_scheduling=args.race_scheduling,
        race_exploration=args.race_exploration,
        pct_depth=args.pct_depth,
        call_timeout=args.call_timeout,
        tolerate_faults=args.tolerate_faults,
        clock=args.clock,
        clock_skew=args.clock_skew,
        client_clock_skew=args.client_clock_skew,
        shortest_lease=args.shortest_lease,
        expired_lease_policy=args.expired_lease_policy,
        lease_limits=args.lease_limits,
        nemesis=args.nemesis,
        campaign=args.campaign,
        server=args.server,
    )

    def header(seed: int, run: RunHeader) -> None:
        clock = "" if run.clock_mode == "manual" else f", {run.clock_mode} clock"
        print(
            f"taskboard fuzz: {target}, budget {args.budget}, {crew}, seed {seed}{clock}",
            "settings in force:",
            *run.lines(),
            sep="\n",
            file=sys.stderr,
        )

    report = fuzz(target, options, progress=None if args.quiet else sys.stderr, on_start=header)
    summary = _summary(report, verbose=args.verbose)
    if report.failure is not None:
        code = FAULT if report.fault else FOUND
    else:
        code = INTERRUPTED if report.interrupted else OK
    written = []
    # First: a reader that goes away (exit 141) cannot stop them.
    run = JUnitRun(target, code, summary, args.budget, args.max_examples)
    if args.junit_xml is not None:
        written.append(_written("JUnit XML", args.junit_xml, write_junit_xml, report, run))
    if args.json is not None:
        document = summary_json(report, run, _missing_keys(report))
        written.append(_written("JSON summary", args.json, write_summary_json, document))
    print(summary)
    for line in written:
        print(f"taskboard fuzz: {line}", file=sys.stderr)
    return code


def _written(what: str, path: str, write: Callable[..., None], *arguments: Any) -> str:
    """Write ``what`` to ``path`` with ``write(path, *arguments)``; say whether it was written.
    A file that cannot be written leaves the verdict and the exit code as they are."""
    try:
        write(path, *arguments)
    except OSError as exc:
        return f"{what} NOT written to {path}: {exc}"
    return f"{what} written to {path}"


def _summary(report: FuzzReport, *, verbose: bool = True) -> str:
    """What ``taskboard fuzz`` prints: the verdict and the run's figures first, then the
    failure's report, then the coverage (every transition's only when ``verbose``)."""
    parts = [_verdict_lines(report)]
    if report.failure is not None:
        parts.append(report.failure)
    parts.append(_coverage_lines(report, verbose=verbose))
    return "\n\n".join(parts)


def _verdict_lines(report: FuzzReport) -> str:
    """The verdict, the counts, the seed, the settings and the races."""
    if report.failure is not None:
        verdict = (
            "STOPPED: an infrastructure fault, not a contract violation (below)"
            if report.fault
            else "FAILED: a contract violation (below)"
        )
    elif report.interrupted:
        verdict = "INTERRUPTED (Ctrl-C): no violation found so far"
    else:
        verdict = "no violation found"
    found = "" if report.find_seconds is None else " to find it"
    lines = [
        f"{report.examples} examples, {report.steps} steps in {report.finding_seconds:.1f}s"
        f"{found} ({report.steps_per_second:,.0f} steps/s, {report.workers} worker"
        f"{'s' if report.workers != 1 else ''}): {verdict}",
    ]
    lines += run_notes(report)
    if report.parallel_runs:
        lines.append(
            f"{report.parallel_programs} parallel programs ({report.parallel_runs} parallel "
            f"program runs, {report.programs_per_second:,.1f} programs/s)"
        )
    if report.find_seconds is not None:
        runs = report.shrink_runs
        shrinking = [f"{runs} Hypothesis run{'s' if runs != 1 else ''}"] if runs else []
        if report.replay_shrink:
            shrinking.append(report.replay_shrink)
        lines.append(
            f"then {report.shrink_seconds:.1f}s to shrink it"
            + (f": {'; '.join(shrinking)}" if shrinking else "")
        )
    if report.shrink_cut:
        lines.append(
            "shrinking stopped at the shrink budget: the trace is the smallest found by then "
            "(a longer --shrink-budget may find a shorter one)"
        )
    lines.append(f"seed {report.seed}: rerun with --seed {report.seed}")
    if report.settings:
        lines.append(f"settings: {report.settings}")
    if report.mode == "sequential":
        lines.append(
            "races were not checked: sequential programs only (--mode sequential); run "
            "--mode mixed (the default) or --mode parallel to race threads"
        )
    elif report.races:
        lines.append(f"races: {report.races}")
    return "\n".join(lines)


def _coverage_lines(report: FuzzReport, *, verbose: bool) -> str:
    """The key transitions reached, then (``verbose``) every transition and parallel call."""
    lines = ["key transitions:"]
    lines += _key_transitions(report)
    lines += renew_ttl_lines(report) + lease_limit_lines(report)
    if not verbose:
        lines.append("  (--verbose also lists every transition and parallel call reached)")
        return "\n".join(lines)
    lines += ["", "transition coverage (task state, operation -> outcome: count):"]
    by_state: dict[str, list[tuple[str, str, int]]] = {}
    for (state, op, outcome), count in report.transitions.items():
        by_state.setdefault(state, []).append((op, outcome, count))
    for state in sorted(by_state):
        lines.append(f"  {state}")
        lines += [
            _coverage_row(op, outcome, count) for op, outcome, count in sorted(by_state[state])
        ]
    if report.concurrent_calls:
        lines += ["", "parallel coverage (calls made by racing threads, operation -> outcome):"]
        lines += [
            _coverage_row(op, outcome, count)
            for (op, outcome), count in sorted(report.concurrent_calls.items())
        ]
    return "\n".join(lines)


def _key_transitions(report: FuzzReport) -> list[str]:
    """The key transitions, each with its count (``!!``: never reached), and why some are
    left out."""
    keys, notes = _aimed_keys(report)
    lines = []
    for (state, op, outcome), meaning in keys:
        count = _count(report.transitions, state, op, outcome)
        mark = "  " if count else "!!"
        lines.append(f"  {mark} {meaning:<36} {count:>8}   ({state}, {op} -> {outcome})")
    lines += notes
    missing = _missing_keys(report)
    if missing:
        lines.append(f"  {missing} key transition(s) never reached (!!): run longer")
    return lines


def _missing_keys(report: FuzzReport) -> int:
    """How many of the key transitions the run aimed at it never reached."""
    keys, _ = _aimed_keys(report)
    return sum(1 for key, _ in keys if not _count(report.transitions, *key))


def _aimed_keys(
    report: FuzzReport,
) -> tuple[tuple[tuple[tuple[str, str, str], str], ...], list[str]]:
    """The key transitions the run could reach, and notes saying why the others are out."""
    keys: tuple[tuple[tuple[str, str, str], str], ...] = KEY_TRANSITIONS
    notes = []
    if report.clock_mode == "wall":
        # SPEC 7: "at until" counts calls whose window straddles until; at_expiry lands on
        # either side of it instead, so these are not aimed at on the wall clock.
        keys = tuple(key for key in keys if key[0][0] != "claimed, at until")
        notes.append(
            "  (wall clock: the boundary transitions at exactly until are left out; at_expiry "
            "lands just before and just after until instead)"
        )
    lacking = _lacking_operations(report)
    if lacking:
        # A board without renew (or fail) can never reach their transitions: no advice there.
        keys = tuple(key for key in keys if not _needs(key[0], lacking))
        notes.append(
            f"  (the board has no {'() and no '.join(lacking)}(): the transitions that need "
            f"{'them' if len(lacking) > 1 else 'it'} are left out)"
        )
    return keys, notes


def _lacking_operations(report: FuzzReport) -> list[str]:
    """The optional operations the fuzzed board lacks (none known when no board was made)."""
    if report.operations is None:
        return []
    return [row.name for row in OPTIONAL_OPERATIONS if row.name not in report.operations]


def _needs(transition: tuple[str, str, str], lacking: list[str]) -> bool:
    """True for a key transition only a board with one of the ``lacking`` operations reaches:
    a call of one (a renew), or a call on a task in a state only they leave it in (without
    ``fail``, the claim of a failed task)."""
    state, op, _ = transition
    if op.partition(" ")[0] in lacking:
        return True
    # Every task starts open.
    reachable = {State.OPEN} | {row.leaves for row in OPERATIONS if row.name not in lacking}
    return any(
        row.leaves is not None
        and row.leaves not in reachable
        and state.partition(",")[0] == row.leaves.value
        for row in OPERATIONS
        if row.name in lacking
    )


def _coverage_row(op: str, outcome: str, count: int) -> str:
    return f"    {op:<32} -> {outcome:<15} {count:>8}"


def _count(transitions: Counter[tuple[str, str, str]], state: str, op: str, outcome: str) -> int:
    if outcome == "*":
        return sum(n for (s, o, _), n in transitions.items() if (s, o) == (state, op))
    return transitions[(state, op, outcome)]


# -- replay ---------------------------------------------------------------------------------


def _replay(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    if args.board and args.exec_command:
        raise UsageError("pass --board or --exec, not both")
    target = f"{EXEC_PREFIX}{args.exec_command}" if args.exec_command else args.board
    target = target or trace.target
    if not target:
        raise UsageError("the trace names no board; pass --board module:Name or --exec CMD")
    if args.emit_test:
        check_writable_file(args.emit_test, "--emit-test")
    if target.startswith(EXEC_PREFIX):
        board: Any = exec_target(target)
    else:
        found = _resolve_target(target)
        board = machine_of(found, target) or found
    if not callable(board):
        raise UsageError(f"{target!r} is {board!r}, not a board: {WHAT_TO_PASS}")
    if args.server is not None:
        board = _on_server(board, args.server, trace.clock_mode, target)
    elif trace.clock_mode == "virtual" and getattr(board, "server", None) is None:
        raise UsageError(
            f"this trace is from virtual mode, and {target} names no server whose clock the "
            "replay moves: pass --server redis|postgres"
        )
    missing = missing_nemesis(trace, board)
    if missing:
        raise UsageError(f"{target}: {missing}")
    calls = sum(1 for step in trace.steps if step.call is not None)
    if trace.program is not None:
        threads = len(trace.program.threads)
        print(f"rerunning the parallel program of {args.trace} ({threads} threads) on {target}")
    else:
        print(
            f"replaying {len(trace.steps)} steps ({calls} board calls) of {args.trace} on {target}"
        )
    if trace.verdict is not None:
        if trace.program is not None:
            where = "the concurrent history of its threads"
        elif trace.verdict.step is None:
            where = "the initial snapshot"
        else:
            where = f"step {trace.verdict.step}"
        if trace.verdict.clause == "infrastructure fault":
            print(f"recorded: an infrastructure fault at {where}")
        else:
            print(f"recorded: {trace.verdict.clause} broken at {where}")
    try:
        with serving(args.server):
            result = replay_trace(trace, board)
    except InfrastructureFault as fault:
        print(f"STOPPED: {fault}")
        return FAULT
    for difference in result.differences:
        print(f"  note: {difference}")
    if args.emit_test:
        try:
            Path(args.emit_test).parent.mkdir(parents=True, exist_ok=True)
            Path(args.emit_test).write_text(render_regression_test(trace, target), encoding="utf-8")
        except OSError as exc:  # the verdict below still prints
            print(f"regression test NOT written to {args.emit_test}: {exc}")
        else:
            print(f"regression test written to {args.emit_test}")
    if result.passed and trace.verdict is not None:
        # Not a plain pass: the trace shows a failure, which this board did not repeat this
        # time. On a board since fixed that is the fix; on the board that failed, a flaky bug.
        print(f"DID NOT RECUR: the recorded failure did not happen ({result.report})")
        if trace.clock_mode == "wall":
            shortest = (  # only when the store refused a claim the model allowed
                ", or fuzz with --shortest-lease if the store cannot honour leases as short as "
                "the trace's (it refused a claim the model allowed)"
                if refused_allowed_claim(trace.steps)
                else ""
            )
            print(
                "  note: on the wall clock a replay cannot repeat the timing exactly (SPEC 7); "
                f"replay again{shortest}"
            )
        return OK
    if result.passed:
        print(f"PASS: {result.report}")
        return OK
    print(f"FAIL: {result.report}")
    return FOUND


def _on_server(board: Any, server: str, clock_mode: str, target: str) -> type[BoardMachine]:
    """``board``'s machine with this process's ``server`` (``--server``) as its server.

    Raises:
        UsageError: the trace is not from virtual mode, or ``server`` is no kind of server.
    """
    if clock_mode != "virtual":
        raise UsageError(
            f"--server replays on a server on the checker's clock: this trace is from "
            f"{clock_mode!r} mode, not 'virtual'"
        )
    machine = machine_of(board, target) or BoardMachine.for_board(board, trace_target=target)
    return type(machine.__name__, (machine,), {"server": process_server(server)})


# -- check ----------------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    tasks = _load_snapshot(args.snapshot)
    try:
        problems = check(tasks)
    except TypeError as exc:
        raise UsageError(f"{args.snapshot}: {exc}") from None
    if args.json:
        rows = [{"task": p.task, "code": str(p.code), "text": p.text} for p in problems]
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    elif problems:
        width = max(len(p.task) for p in problems)
        for problem in problems:
            print(f"{problem.task:<{width}}  {problem.code:<22} {problem.text}")
        print(f"{len(problems)} problem(s) in {len(tasks)} tasks")
    else:
        print(f"no problems in {len(tasks)} tasks")
    return FOUND if problems else OK


def _load_snapshot(path: str) -> list[Task]:
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path} is not JSON: {exc}") from None
    items = document.get("tasks") if isinstance(document, dict) else document
    if not isinstance(items, list):
        raise UsageError(f"{path}: expected a list of tasks, or an object with a 'tasks' list")
    return [_snapshot_task(path, i, item) for i, item in enumerate(items)]


def _snapshot_task(path: str, index: int, item: object) -> Task:
    where = f"{path}: tasks[{index}]"
    if not isinstance(item, dict):
        raise UsageError(f"{where}: expected an object, got {type(item).__name__}")
    unknown = set(item) - {"id", "title", "deps", "state", "owner", "lease", "seq"}
    if unknown:
        raise UsageError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    if "id" not in item:
        raise UsageError(f"{where}: missing 'id'")
    lease = item.get("lease")
    if lease is not None:
        if not isinstance(lease, dict):
            raise UsageError(f"{where}.lease: expected an object or null")
        lease = Lease(lease.get("token", ""), lease.get("fence", 0), _until(where, lease))
    deps = item.get("deps", [])
    return Task(
        id=item["id"],
        title=item.get("title", ""),
        deps=tuple(deps) if isinstance(deps, list) else deps,
        state=item.get("state", "open"),
        owner=item.get("owner", ""),
        lease=lease,
        seq=item.get("seq", 0),
    )


def _until(where: str, lease: dict[str, Any]) -> datetime | None:
    until = lease.get("until")
    if until is None:
        return None
    try:
        parsed = datetime.fromisoformat(until)
    except (TypeError, ValueError):
        raise UsageError(f"{where}.lease.until: not an ISO 8601 time: {until!r}") from None
    return as_utc(parsed)
