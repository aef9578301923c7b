from tests.integration.conftest import broker  # noqa: F401  (shared fixture)
