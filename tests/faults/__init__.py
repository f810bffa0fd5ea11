"""The single-node fault suite (issue 13): ``python -m tests.faults`` prints its figures;
``test_faults.py`` runs a small count of it in CI. See :mod:`tests.faults.suite`."""
