"""``python -m bench faults [--trials N ...]``: the single-node fault suite's figures, the same
as ``python -m tests.faults`` (:mod:`tests.faults.suite`; not run by a bare ``python -m bench``:
it takes minutes). One run's figures, with its command: ``bench/NOTES.md``."""

from __future__ import annotations


def main(argv: list[str]) -> int:
    from tests.faults.__main__ import main as faults_main

    return faults_main(argv)
