"""``load_properties``: Java's ``Properties.load`` rules, held to the ``javaproperties`` package
(a faithful port of Java's reader, kept as a test dependency) on generated documents."""

from __future__ import annotations

from pathlib import Path

import javaproperties
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sluice.server.config import load_properties

#: The characters every rule of the format turns on, and a few plain ones.
ALPHABET = "ab= :\t\f\\#!\n\r\r\nu0041DdE8x"


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=ALPHABET, max_size=40))
@example("a=b\\")  # a continuation at the end of the document
@example("  \\\n  \\\n")  # blank lines joined by continuations
@example("#comment \\\nkey=value")  # a comment is never continued
@example("k\\u00e9y = v\\u00e9\\uD83D\\uDE00")  # escapes, a surrogate pair
def test_reads_as_java_does(text: str) -> None:
    try:
        expected = javaproperties.loads(text)
    except ValueError:  # a malformed \uXXXX escape
        with pytest.raises(ValueError, match="escape"):
            load_properties(text)
        return
    assert load_properties(text) == expected


def test_a_malformed_escape_in_the_file_is_a_config_error(tmp_path: Path) -> None:
    from sluice.server.config import Config, ConfigError

    path = tmp_path / "server.properties"
    path.write_text("num.partitions=\\u12\n")
    with pytest.raises(ConfigError, match=r"server\.properties: malformed \\uxxxx escape"):
        Config.load(path)
