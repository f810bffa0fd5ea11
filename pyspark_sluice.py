"""PySpark 4 auto-registration of ``format("sluice")`` (see :mod:`sluice.pipeline.source`).

When a Spark session first resolves a Python data source, PySpark's
``pyspark.sql.worker.lookup_data_sources`` imports every top-level module on the Python path
whose name starts with ``pyspark_`` and registers its ``DefaultSource`` under
``DefaultSource.name()``. Installing Sluice (``pip install 'sluice-broker[spark]'``) puts this
module there, so ``spark.read.format("sluice")`` works without ``pipeline.register(spark)``.
One ``DefaultSource`` per module: ``format("sluice-segments")`` has its own module,
:mod:`pyspark_sluice_segments`.
"""

from sluice.pipeline.source import SluiceDataSource as DefaultSource

__all__ = ["DefaultSource"]
