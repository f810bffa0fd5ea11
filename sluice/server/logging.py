"""structlog setup for the broker: JSON lines for machines, pretty console for a terminal.

Configured exactly once, by the entrypoint (:func:`sluice.server.__main__.main`) or by an embedding
application; importing any server module configures nothing. Loggers are named by layer
(``sluice.server``, ``sluice.connection``, ``sluice.handlers``) via :func:`get_logger`. Hot paths
check ``is_enabled_for`` style conditions through structlog's level filtering, which drops a
call before any event dict is rendered.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure_logging(
    level: str = "info", *, json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog globally. ``json=None``: JSON unless ``stream`` is a TTY."""
    out = stream if stream is not None else sys.stdout
    if json is None:
        json = not out.isatty()
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info
            if json
            else structlog.processors.StackInfoRenderer(),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> Any:
    """A lazily-bound logger named by layer (``sluice.<layer>``); safe to call at import."""
    return structlog.get_logger(logger_name=name)
