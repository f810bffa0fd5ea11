"""Dispatcher: ``python -m bench <name> [options]`` runs ``bench/<name>.py``'s ``main(argv)``.

With no name, every known benchmark whose module exists runs with its defaults.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

KNOWN = (
    "storage",
    "broker",
    "spark",
    "embedded",
    "client_perf",
    "cluster",
    "startup",
    "txn_storage",
    "restart",
    "cleaner",
    "quota",
    "transactions",
    "reassign",
    "producer_expiration",
)


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(f"usage: python -m bench [{'|'.join(KNOWN)}] [options]")
        return 0
    if argv:
        name, rest = argv[0], argv[1:]
        if importlib.util.find_spec(f"bench.{name}") is None:
            print(f"unknown benchmark {name!r}; known: {', '.join(KNOWN)}", file=sys.stderr)
            return 2
        return int(importlib.import_module(f"bench.{name}").main(rest) or 0)
    status = 0
    for name in KNOWN:
        if importlib.util.find_spec(f"bench.{name}") is not None:
            status |= int(importlib.import_module(f"bench.{name}").main([]) or 0)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
