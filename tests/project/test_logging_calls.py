"""No structlog call in ``sluice/`` passes ``event=`` as a keyword.

structlog's first parameter is the message, named ``event``: ``log.info("retrying", event=x)``
is a ``TypeError`` at the call ("got multiple values for argument 'event'"), whatever the log
level, and kills the task that logs it. It once killed the controller's event task on its
"connection trouble; retrying the event" path, the one that must never fail. Name such a field
otherwise (``controller_event=``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import sluice

#: structlog's bound-logger methods that take the message first.
LOG_METHODS = frozenset(
    {"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "msg", "log"}
)


def logger_calls_passing_event(tree: ast.AST) -> list[int]:
    """Lines of ``<x>.<log method>(..., event=...)`` calls."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in LOG_METHODS
        and any(k.arg == "event" for k in node.keywords)
    )


def test_no_structlog_call_passes_event_as_a_keyword() -> None:
    root = Path(sluice.__file__).parent
    offenders = [
        f"{path.relative_to(root.parent)}:{line}"
        for path in sorted(root.rglob("*.py"))
        for line in logger_calls_passing_event(ast.parse(path.read_text(), str(path)))
    ]
    assert offenders == []


def test_the_check_finds_what_it_looks_for() -> None:
    source = 'log.info("retrying", event=name)\nlog.error("fine", what=name)\nf(event=1)\n'
    assert logger_calls_passing_event(ast.parse(source)) == [1]
