from tests.clients.conftest import server  # noqa: F401  (one `mnemo serve` per module)
