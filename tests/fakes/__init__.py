"""Local stand-ins for external services (started by the tests, never mocked in-process)."""
