"""``df.write.format("sluice").save()`` in the default save mode, as Kafka's connector takes it.

Spark's Kafka sink allows ``Append`` and ``ErrorIfExists`` (the default, what a writer without
``.mode()`` has) and refuses ``Overwrite`` and ``Ignore`` (``KafkaSourceProvider.createRelation``):
a topic is appended to, never replaced. A Python data source cannot say the same by itself:
Spark's ``DataFrameWriter.saveInternal`` refuses ``ErrorIfExists`` and ``Ignore`` for every
DataSource V2 ``TableProvider`` that supports batch writes, Python data sources included, before
the source is asked (``UNSUPPORTED_DATA_SOURCE_SAVE_MODE``, PySpark 4.3; Kafka's connector is a
V1 ``CreatableRelationProvider`` and never meets that check).

So :func:`install` (called by :func:`sluice.pipeline.register`) wraps PySpark's
``DataFrameWriter.format`` / ``mode`` / ``save`` once per process (the classic writer, and Spark
Connect's when a Connect session is in use; only the classic one is tested here, Connect needs
grpc): the Python writer remembers the format and mode it was given, and a ``save()`` to
``format("sluice")`` turns the default (or an explicit ``error``/``errorifexists``) into
``append`` and refuses ``ignore`` with Kafka's message. ``overwrite`` reaches the source, which
refuses it (:meth:`sluice.pipeline.source.SluiceDataSource.writer`). Writes to any other format
are passed through untouched.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from . import FORMAT
from .offsets import OptionError

#: Spark's names of ErrorIfExists (``SaveMode`` parsing is case-insensitive).
_DEFAULT_MODES = {"error", "errorifexists", "default"}
_INSTALLED = "_sluice_save_mode_installed"


def sink_save_mode(mode: str | None) -> str | None:
    """The save mode a write to ``format("sluice")`` runs with, given the one the user chose
    (None: no ``.mode()`` call, Spark's ErrorIfExists). Refuses Ignore as Kafka's sink does."""
    if mode is None or mode.lower() in _DEFAULT_MODES:
        return "append"
    if mode.lower() == "ignore":
        raise OptionError(
            f'save mode {mode} is not allowed for format("{FORMAT}"): allowed save modes are '
            "append and errorifexists (the default), as for Kafka"
        )
    return mode


def _wrap(writer_class: Any) -> None:
    if getattr(writer_class, _INSTALLED, False):
        return
    original_format = writer_class.format
    original_mode = writer_class.mode
    original_save = writer_class.save

    @functools.wraps(original_format)
    def format(self: Any, source: str) -> Any:
        self._sluice_format = source
        return original_format(self, source)

    @functools.wraps(original_mode)
    def mode(self: Any, saveMode: str | None) -> Any:
        if saveMode is not None:
            self._sluice_mode = saveMode
        return original_mode(self, saveMode)

    @functools.wraps(original_save)
    def save(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **options: Any,
    ) -> None:
        source = format if format is not None else getattr(self, "_sluice_format", None)
        if source is not None and source.lower() == FORMAT:
            mode = sink_save_mode(mode if mode is not None else getattr(self, "_sluice_mode", None))
        original_save(self, path, format, mode, partitionBy, **options)

    writer_class.format = format
    writer_class.mode = mode
    writer_class.save = save
    setattr(writer_class, _INSTALLED, True)


def install() -> None:
    """Wrap PySpark's DataFrameWriter classes (idempotent; see the module docstring)."""
    from pyspark.sql.readwriter import DataFrameWriter

    _wrap(DataFrameWriter)
    # Spark Connect's writer only if a Connect session loaded it: importing it otherwise checks
    # for grpc and may even sys.exit(0) (pyspark.sql.connect.utils.check_dependencies).
    connect = sys.modules.get("pyspark.sql.connect.readwriter")
    if connect is not None:
        _wrap(connect.DataFrameWriter)
