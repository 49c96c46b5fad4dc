"""pytest fixtures shared by the e2e test files (the `deepinfer serve` fixture lives in serve_fixture.py)."""
# (session fixtures: each server is started once for every test_server_* file)
from serve_fixture import server, server_drawing_on_host  # noqa: F401
