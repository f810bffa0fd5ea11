"""Benchmarks: ``python -m bench storage`` (this package's storage benchmark), later
``python -m bench broker``. Speed is measured here, never asserted in tests."""
