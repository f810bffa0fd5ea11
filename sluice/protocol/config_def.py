"""Configuration keys declared as data (Kafka's ``ConfigDef``, in miniature).

Each room declares the broker keys it reads -- Kafka's name, a parser, the default and a
one-line doc -- next to the code that reads them: the storage layer its ``log.*`` keys
(:data:`sluice.server.storage.log_config.BROKER_OPTIONS`), the group coordinator its
``group.*`` / ``offsets.*`` keys (:data:`sluice.server.group.coordinator.GROUP_OPTIONS`). The
broker's ``Config`` (:mod:`sluice.server.config`) collects them into one table. Here, at
the bottom layer, so that every room may import it. Pure data and parsing, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConfigKey:
    """One broker key. ``parse`` turns the text into a value or raises ValueError with a short
    reason; ``default`` is text, as in server.properties (None = unset, Kafka's "null")."""

    key: str
    parse: Callable[[str], Any]
    default: str | None
    doc: str


def int_in(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """Parser of an integer in ``[lo, hi]`` (either bound optional)."""

    def parse(text: str) -> int:
        value = int(text.strip())
        if lo is not None and value < lo:
            raise ValueError(f"must be >= {lo}")
        if hi is not None and value > hi:
            raise ValueError(f"must be <= {hi}")
        return value

    return parse


def boolean(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError("must be true or false")
    return lowered == "true"


def string(text: str) -> str:
    return text.strip()


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.strip()
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value

    return parse


#: Kafka's "no bound" for an int option (``Int.MaxValue``): the default of the broker's
#: connection, request-rate, topic and partition bounds.
NO_BOUND = 2147483647


def parse_ip_overrides(text: str) -> tuple[tuple[str, int], ...]:
    """``max.connections.per.ip.overrides``: ``host:count[,host:count...]`` (Kafka's format; an
    IPv6 literal in brackets); empty = none."""
    out: list[tuple[str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, colon, count_text = item.rpartition(":")
        host = host.strip().strip("[]")
        if not colon or not host:
            raise ValueError(f"{item!r} is not host:count")
        try:
            count = int(count_text)
        except ValueError:
            raise ValueError(f"{item!r}: count {count_text!r} is not a number") from None
        if count < 0:
            raise ValueError(f"{item!r}: count must be >= 0")
        out.append((host, count))
    return tuple(out)
