"""pytest fixtures shared by the e2e test files (the `deepinfer serve` fixture lives in serve_fixture.py)."""
from serve_fixture import server  # noqa: F401  (a session fixture: one server for every test_server_* file)
