"""Module docstrings keep the design; the measurements behind it live in ``bench/NOTES.md``, one
section per module. A module that points there must have its section."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_module_pointing_at_the_notes_has_a_section() -> None:
    headings = re.findall(r"^## (\S+)", (REPO / "bench" / "NOTES.md").read_text(), re.M)
    pointing = sorted(
        ".".join(path.relative_to(REPO).with_suffix("").parts)
        for root in ("sluice", "bench")
        for path in (REPO / root).rglob("*.py")
        if "bench/NOTES.md" in path.read_text()
    )
    assert pointing, "no module points at bench/NOTES.md"
    assert sorted(headings) == pointing
