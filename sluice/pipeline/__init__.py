"""Sluice for Apache Spark: PySpark data sources that read and write Sluice topics.

Modelled on Spark's own Kafka connector, so existing Spark code switches by changing
``format("kafka")`` to ``format("sluice")`` (same option names, same output schema)::

    from sluice import pipeline
    pipeline.register(spark)
    df = (spark.read.format("sluice")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())

Formats (PySpark 4.x Python data sources, ``pyspark.sql.datasource``):

* ``sluice``: batch and streaming read (:mod:`sluice.pipeline.source`), batch and streaming write
  (:mod:`sluice.pipeline.writer`), over the Kafka protocol.
* ``sluice-segments``: batch read of a broker's data directory straight from its segment files
  (:mod:`sluice.pipeline.segments`), one Spark partition per segment.

Jobs for the command line (``sluice pipeline archive|replay``): :mod:`sluice.pipeline.jobs`,
:mod:`sluice.pipeline.cli`.

Registration: PySpark 4 registers by itself, at a session's first data source lookup, the
``DefaultSource`` of every top-level ``pyspark_*`` module on the Python path; the distribution
ships two (``pyspark_sluice``, ``pyspark_sluice_segments``), so an installed Sluice needs no
call for reads and appends. :func:`register` remains for a checkout that is not on the workers'
path (an editable install is not: its import hook does not list modules), and is what lets a
write run in the default save mode (:mod:`sluice.pipeline.savemode`).

Spark's Python workers must run this interpreter (they import ``pipeline`` and ``protocol``):
:func:`python_worker_env` sets ``PYSPARK_PYTHON`` before a session is created.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from .offsets import offsets_behind_latest

FORMAT = "sluice"
SEGMENTS_FORMAT = "sluice-segments"


def python_worker_env() -> None:
    """Make Spark's Python workers use the running interpreter (call before building a session).

    Without it Spark starts ``python3`` from PATH, which may lack pyarrow and this package.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def register(spark: Any) -> None:
    """Register ``format("sluice")`` and ``format("sluice-segments")`` with a SparkSession, and
    let ``df.write.format("sluice").save()`` run in the default save mode, as Kafka's connector
    does (Spark refuses it for every Python data source: :mod:`sluice.pipeline.savemode`)."""
    from .savemode import install
    from .segments import SluiceSegmentsDataSource
    from .source import SluiceDataSource

    install()
    spark.dataSource.register(SluiceDataSource)
    spark.dataSource.register(SluiceSegmentsDataSource)


__all__ = ["FORMAT", "SEGMENTS_FORMAT", "offsets_behind_latest", "python_worker_env", "register"]
