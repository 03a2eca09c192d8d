"""Hostile input at the edges: the model a file names, and frames an MCP client sends.

Issue 24.3: a memory file chooses no model. What a file records as its embedding model resolves
only among the bundled models and the prefixes the caller registered; a file naming an embedding
API (which would receive the queries, with the user's API key) or a directory (a model loaded from a
path it chooses) is refused with a MemoryFileError that names it, before anything is connected or
read. What the caller configures may still name either.

Issue 24.11: an MCP frame the SDK cannot read (a lone ``\\ud800`` escape, text that is not JSON)
gets a JSON-RPC error reply instead of none, and the server goes on serving."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from fakes import FakeEmbedder
from memsif_lite import Config, Memory
from memsif_lite.cli import main
from memsif_lite.errors import MemoryFileError

#: paths opened by Python under a directory a test watches (an audit hook cannot be removed, so
#: one hook for the module, active only while a test has put a directory here)
_WATCHED: list[Path] = []
_OPENED: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _WATCHED and isinstance(args[0], (str, bytes, Path)):
        p = str(args[0] if not isinstance(args[0], bytes) else args[0].decode(errors="replace"))
        if any(p.startswith(str(w)) for w in _WATCHED):
            _OPENED.append(p)


sys.addaudithook(_audit)


def _file_naming(tmp_path: Path, model_id: str, dim: int = 32) -> Path:
    """A real memory file whose meta row says it was written with ``model_id`` (edited with a
    plain SQLite connection, as anyone could)."""
    db = tmp_path / "received.db"
    with Memory(db, embedder=FakeEmbedder(dim=dim)) as mem:
        mem.add("Ana", "I keep bees on the roof", at="2024-05-01T10:00:00")
    con = apsw.Connection(str(db))
    try:
        con.execute("UPDATE meta SET value = ? WHERE key = 'embedding_model'", (model_id,))
    finally:
        con.close()
    return db


@pytest.fixture
def listener(monkeypatch):
    """A socket listening on 127.0.0.1 that every OpenAI client is pointed at (the kernel completes
    a connection to it without ``accept``, so one attempt is seen however short)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/v1"
    for var in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.setenv(var, url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-users-own-key")
    yield srv
    srv.close()


def _connections(srv: socket.socket) -> int:
    n = 0
    while True:
        try:
            conn, _ = srv.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


def test_a_file_naming_an_embedding_api_is_refused_without_a_connection(tmp_path, listener):
    spec = "litellm:openai/text-embedding-3-small"
    db = _file_naming(tmp_path, spec)
    with pytest.raises(MemoryFileError, match="litellm:openai/text-embedding-3-small") as e:
        Memory(db)
    assert "embedding_model=" in str(e.value)  # says how to open it when the user trusts it
    with pytest.raises(MemoryFileError):
        Memory(db, read_only=True)
    res = CliRunner().invoke(main, ["search", "--db", str(db), "bees"])
    assert res.exit_code == 1 and "Traceback" not in res.output, res.output
    assert spec in res.output
    assert _connections(listener) == 0


def test_a_file_naming_a_model_directory_is_refused_without_reading_it(tmp_path):
    hostile = tmp_path / "model"
    hostile.mkdir()
    (hostile / "embedder.json").write_text(json.dumps({"model_id": str(hostile), "dim": 32, "onnx": "model.onnx",
                                                       "tokenizer": "tokenizer.json"}))
    (hostile / "model.onnx").write_bytes(b"not a model")
    (hostile / "tokenizer.json").write_text("{}")
    db = _file_naming(tmp_path, str(hostile))
    _WATCHED.append(hostile)
    try:
        with pytest.raises(MemoryFileError, match="may not choose") as e:
            Memory(db)
        assert str(hostile) in str(e.value)
        res = CliRunner().invoke(main, ["search", "--db", str(db), "bees"])
        assert res.exit_code == 1 and str(hostile) in res.output, res.output
    finally:
        _WATCHED.remove(hostile)
    assert _OPENED == []


def test_an_unknown_name_is_refused_and_the_caller_may_still_choose(tmp_path, llm_server, monkeypatch):
    """An unknown id is refused the same way; the caller's own configuration may name an API
    (here the fake OpenAI-compatible server), and then the file opens."""
    db = _file_naming(tmp_path, "litellm:openai/test-embedding", dim=16)
    with pytest.raises(MemoryFileError, match="test-embedding"):
        Memory(db)
    monkeypatch.setenv("OPENAI_API_BASE", llm_server.url)
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with Memory(db, config=Config(embedding_model="litellm:openai/test-embedding", sem_low=0.0, sem_high=1.0),
                read_only=True) as mem:
        assert mem.stats()["messages"] == 1
    assert any("input" in r for r in llm_server.requests)  # the caller's choice did reach the API


def test_bundled_and_caller_registered_models_still_open_from_the_file(tmp_path):
    from memsif_lite.embed import ENPT_MODEL, recorded_embedder, register_embedder

    assert recorded_embedder(ENPT_MODEL).model_id == ENPT_MODEL
    register_embedder("hostiletest", lambda name, levels: FakeEmbedder(model_id=f"hostiletest:{name}"))
    db = _file_naming(tmp_path, "hostiletest:bow")
    with Memory(db) as mem:
        assert mem.search("bees")[0].text == "I keep bees on the roof"


def _frames(proc: subprocess.Popen, n: int, timeout: float = 60.0) -> list[dict]:
    """The next ``n`` JSON-RPC frames the server writes (failing, not hanging, when one is missing)."""
    assert proc.stdout is not None
    out: list[dict] = []
    while len(out) < n:
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        assert ready, f"no reply within {timeout}s (got {out})"
        line = proc.stdout.readline()
        assert line, f"the server closed its output (got {out})"
        out.append(json.loads(line))
    return out


@pytest.mark.slow
def test_mcp_frames_the_sdk_cannot_read_get_an_error_reply(tmp_path):
    pytest.importorskip("mcp", reason="the MCP SDK comes with the test extra")
    from mcp.types import LATEST_PROTOCOL_VERSION

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen([sys.executable, "-m", "memsif_lite.cli", "mcp", "--db", str(tmp_path / "m.db")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                            text=True, encoding="utf-8")
    assert proc.stdin is not None

    def send(line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()

    def call(i: int, text: str) -> str:  # a tools/call of remember, as raw JSON text
        return ('{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": "remember", '
                '"arguments": {"messages": [{"speaker": "Ana", "text": "%s"}]}}}' % (i, text))

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": LATEST_PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}))
        assert _frames(proc, 1)[0]["id"] == 1
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        send(call(2, "bad \\ud800 text"))   # a lone surrogate escape: valid to Python, not to the SDK
        send("{oops")                        # not JSON: no id to answer with
        send('{"jsonrpc": "2.0", "result": {}}')  # not a request (and not one we sent): no reply
        send(call(3, "good text"))
        bad, garbled, good = _frames(proc, 3)
        assert bad["id"] == 2 and bad["error"]["code"] == -32700 and "surrogate" in bad["error"]["message"]
        assert garbled["id"] is None and garbled["error"]["code"] == -32700
        assert good["id"] == 3 and good["result"]["structuredContent"]["stored"] == 1  # still serving
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0
