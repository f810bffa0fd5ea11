"""structlog setup for the broker: JSON lines for machines, pretty console for a terminal.

Configured exactly once, by the entrypoint (:func:`sluice.server.__main__.main`) or by an embedding
application; importing any server module configures nothing. Loggers are named by layer
(``sluice.server``, ``sluice.connection``, ``sluice.handlers``) via :func:`get_logger`. Hot paths
check ``is_enabled_for`` style conditions through structlog's level filtering, which drops a
call before any event dict is rendered.

**Levels per logger, changed live** (Kafka's ``broker-loggers``, ``Log4jController``): every
name given to :func:`get_logger` is a logger, and ``root`` is the level the broker was started
with (``--log-level``). :func:`set_logger_level` gives one logger a level of its own (log4j's
TRACE, DEBUG, INFO, WARN, ERROR, FATAL; None: inherit again); a logger without one takes its
nearest dotted ancestor's, else root's (log4j's hierarchy). With the entrypoint's configuration
the first processor drops an event below its logger's level (the filtering wrapper lets DEBUG
through so that one logger can be turned up: the few debug calls then cost their event dict
before being dropped); an embedded broker, whose events go to ``logging``, has the level set on
the ``logging`` logger of that name too (root: ``sluice``, not the application's root), so the
application's handlers see the change.
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
#: log4j's levels (Kafka's ``LogLevelConfig.VALID_LOG_LEVELS``) as ``logging``'s numbers.
KAFKA_LEVELS = {
    "TRACE": logging.DEBUG,
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "FATAL": logging.CRITICAL,
}
ROOT_LOGGER = "root"
_METHOD_LEVELS = {
    "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
    "warn": logging.WARNING, "error": logging.ERROR, "exception": logging.ERROR,
    "critical": logging.CRITICAL, "fatal": logging.CRITICAL, "msg": logging.INFO,
    "log": logging.DEBUG,
}  # fmt: skip
#: Every logger named by :func:`get_logger`, and the Kafka level names set explicitly.
_names: set[str] = set()
_explicit: dict[str, str] = {ROOT_LOGGER: "INFO"}
#: logger name -> effective level number (cleared on every change).
_effective: dict[str, int] = {}


def logger_levels() -> dict[str, str]:
    """Kafka's ``Log4jController.loggers``: root's level, and every logger's own level or
    (unset) root's."""
    root = _explicit[ROOT_LOGGER]
    out = {ROOT_LOGGER: root}
    for name in sorted(_names):
        out[name] = _explicit.get(name, root)
    return out


def logger_exists(name: str) -> bool:
    return name == ROOT_LOGGER or name in _names


def set_logger_level(name: str, level: str | None) -> None:
    """Give ``name`` a level of its own (a key of :data:`KAFKA_LEVELS`), or remove it (None;
    not for root). The caller validated both (module docstring)."""
    if level is None:
        _explicit.pop(name, None)
    else:
        _explicit[name] = level
    _effective.clear()
    number = None if level is None else KAFKA_LEVELS[level]
    # (root is Sluice's root: an embedding application's own loggers are not the broker's)
    target = logging.getLogger("sluice" if name == ROOT_LOGGER else name)
    target.setLevel(logging.NOTSET if number is None else number)


def _level_of(name: str) -> int:
    level = _effective.get(name)
    if level is None:
        part = name
        while part and part not in _explicit:
            part = part.rpartition(".")[0]
        level = KAFKA_LEVELS[_explicit.get(part, _explicit[ROOT_LOGGER])]
        _effective[name] = level
    return level


def _drop_below_logger_level(_: Any, method: str, event_dict: Any) -> Any:
    """The first processor: the event's logger's level decides (module docstring)."""
    if _METHOD_LEVELS.get(method, logging.INFO) < _level_of(event_dict.get("logger_name", "")):
        raise structlog.DropEvent
    return event_dict


def configure_logging(
    level: str = "info", *, json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog globally. ``json=None``: JSON unless ``stream`` is a TTY."""
    out = stream if stream is not None else sys.stdout
    if json is None:
        json = not out.isatty()
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    root = _LEVELS.get(level, logging.INFO)
    _explicit[ROOT_LOGGER] = {logging.DEBUG: "DEBUG", logging.WARNING: "WARN",
                              logging.ERROR: "ERROR"}.get(root, "INFO")  # fmt: skip
    _effective.clear()
    structlog.configure(
        processors=[
            _drop_below_logger_level,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info
            if json
            else structlog.processors.StackInfoRenderer(),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=structlog.PrintLoggerFactory(file=out),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str) -> Any:
    """A lazily-bound logger named by layer (``sluice.<layer>``); safe to call at import."""
    _names.add(name)
    return structlog.get_logger(logger_name=name)
