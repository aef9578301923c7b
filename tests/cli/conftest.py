from tests.integration.conftest import broker, start_broker  # noqa: F401  (shared fixtures)
