"""A CI-sized mixed load on the e2e server over loopback (scripts/mixed_load.py, the same code as the standalone
driver): 150 requests at concurrency 1, 8 and 32, shuffled valid greedy requests on every route (OpenAI chat,
completions and responses, Anthropic messages; streamed and not; some over a shared system prompt), malformed ones
and ones the client cancels. Every valid request must get the answer it got alone, every malformed one its 4xx in
the API's error shape, every cancelled one must be cancelled in the engine, nothing lost, no 5xx; afterwards nothing
is left running, /health is ok and a fresh request still gets its reference answer. No timing is asserted."""
import sys

import pytest

from serve_fixture import API_KEY, ROOT

pytest.importorskip("openai", reason="the openai package is not installed (pip install -r scripts/requirements-test.txt)")
pytest.importorskip("anthropic", reason="the anthropic package is not installed (pip install -r scripts/requirements-test.txt)")
sys.path.insert(0, str(ROOT / "scripts"))
import mixed_load  # noqa: E402


def test_mixed_load_answers_every_valid_request_correctly_and_loses_nothing(server):
    report = mixed_load.run_mixed_load(server.base, API_KEY, n_requests=150, levels=[1, 8, 32], seed=3,
                                       max_body_bytes=1 << 20, timeout_s=300, log=lambda *_: None)
    table = mixed_load.format_table(report) + "\n" + "\n".join(report.failures)
    print(table)
    assert [r.concurrency for r in report.rows] == [1, 8, 32]
    assert sum(r.sent for r in report.rows) == 150
    for r in report.rows:
        assert r.valid > 0 and r.malformed > 0 and r.cancelled > 0, table
        assert r.correct == r.valid and r.wrong == 0 and r.lost == 0, table
        assert r.rejected == r.malformed and r.misrejected == 0, table
        assert r.sent == r.valid + r.malformed + r.cancelled, table  # one outcome each
        assert r.server_errors == 0, table
        assert r.engine_cancelled == r.cancelled, table  # every cancel reached the engine and ended it there
    for name, (ok, detail) in report.checks.items():
        assert ok, f"{name}: {detail}\n{table}"
    assert report.ok and not report.failures, table
    assert server.alive()
