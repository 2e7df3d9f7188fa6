"""The committed test runs' directory, kept importable here for tests that still import it from
tests.analysis.conftest; the shared paths and fixtures (DATA, fault_runs) live in tests/conftest.py."""

from tests.conftest import DATA  # noqa: F401
