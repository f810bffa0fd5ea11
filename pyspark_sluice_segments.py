"""PySpark 4 auto-registration of ``format("sluice-segments")`` (see :mod:`sluice.pipeline.segments`
and, for how discovery works, :mod:`pyspark_sluice`)."""

from sluice.pipeline.segments import SluiceSegmentsDataSource as DefaultSource

__all__ = ["DefaultSource"]
