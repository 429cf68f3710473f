"""The model checker: a Hypothesis state machine that drives a host's Board against the model.

Also the trace files a failure leaves behind, and their replay against any board.
"""

from taskboard._driver import CallTimeoutError
from taskboard._public import show_public_paths
from taskboard.model import ContractViolation, violations_in
from taskboard.stateful._limits import LeaseLimits
from taskboard.stateful._machine import BoardMachine
from taskboard.stateful._parallel import run_parallel_state_machine
from taskboard.stateful._replay import ReplayResult, replay_trace
from taskboard.stateful._reports import AnswersVaried, InfrastructureFault
from taskboard.stateful._timeline import timeline_html
from taskboard.stateful._tracefile import (
    SCHEMA_VERSION,
    TRACE_DIR_ENV,
    Trace,
    TraceFileError,
    Verdict,
    load_trace,
    parse_trace,
    render_regression_test,
    trace_to_json,
    write_trace,
)

__all__ = [
    "SCHEMA_VERSION",
    "TRACE_DIR_ENV",
    "AnswersVaried",
    "BoardMachine",
    "CallTimeoutError",
    "ContractViolation",
    "InfrastructureFault",
    "LeaseLimits",
    "ReplayResult",
    "Trace",
    "TraceFileError",
    "Verdict",
    "load_trace",
    "parse_trace",
    "render_regression_test",
    "replay_trace",
    "run_parallel_state_machine",
    "timeline_html",
    "trace_to_json",
    "violations_in",
    "write_trace",
]

show_public_paths(globals())
