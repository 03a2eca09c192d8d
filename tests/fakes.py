"""Test doubles that are real enough: a deterministic bag-of-words embedder, and a local
OpenAI-compatible HTTP server on 127.0.0.1 that answers from a queue of scripted replies.
And ``raw(path)``, for reading a memory file directly, as any other SQLite reader would."""

from __future__ import annotations

import contextlib
import hashlib
import json
import queue
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

import apsw
import numpy as np
import sqlite_vec


def keyed(con: apsw.Connection, key: str | None) -> apsw.Connection:
    """``con`` keyed for a file memsif encrypted with the passphrase ``key`` (None: a plain file),
    the way any SQLite3 Multiple Ciphers program opens one: ``PRAGMA key``, before anything else."""
    if key is not None:
        con.pragma("key", key)
    return con


@contextlib.contextmanager
def raw(path: str | Path, key: str | None = None) -> Iterator[apsw.Connection]:
    """A separate, read-only apsw connection to the memory file at ``path``, closed on exit.

    The file is the source of truth: tests check what was stored by reading it here rather
    than through a ``Memory``'s own connection. sqlite-vec is loaded, so the vec0 tables
    (``message_vec`` and the others) can be read too. The file is in WAL mode, so everything
    a ``Memory`` has committed is visible, even while that ``Memory`` is still open; what a
    failed call rolled back is not. Read only: it cannot change the file (a write raises
    ``apsw.ReadOnlyError``), and a missing file raises ``apsw.CantOpenError`` instead of
    creating one. For tampering with a file on purpose, open a plain ``apsw.Connection``.
    Being read only, it cannot tidy up after itself: when it is the last connection out it
    leaves an empty ``-wal`` and a ``-shm`` beside the file (the next ``Memory`` removes them).

        with raw(db) as con:
            texts = [t for (t,) in con.execute("SELECT text FROM messages ORDER BY id")]

    ``key``: the passphrase of an encrypted file (:func:`keyed`).
    """
    con = keyed(apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY), key)
    try:
        con.setbusytimeout(5000)
        con.enable_load_extension(True)
        con.load_extension(sqlite_vec.loadable_path())
        con.enable_load_extension(False)
        yield con
    finally:
        con.close()


class FakeEmbedder:
    """Deterministic: the normalised sum of one pseudo-random vector per lower-cased word, so
    texts sharing words are similar. Only for tests where the real model is beside the point."""

    metric = "cosine"

    def __init__(self, dim: int = 32, model_id: str = "fake-bow-32", sem_levels=(0.0, 1.0)):
        self.dim, self.model_id, self.sem_levels = dim, model_id, sem_levels
        self.calls: list[tuple[str, ...]] = []

    def _word(self, w: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(w.encode()).digest()[:8], "little")
        return np.random.default_rng(seed).standard_normal(self.dim)

    def embed(self, texts, *, kind):
        self.calls.append(tuple(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            words = [w for w in "".join(c if c.isalnum() else " " for c in t.lower()).split()] or ["<empty>"]
            v = sum(self._word(w) for w in words)
            out[i] = v / np.linalg.norm(v)
        return out


class FakeLLMServer:
    """OpenAI-compatible ``/v1/chat/completions`` (and ``/v1/embeddings``) on 127.0.0.1.

    ``replies`` is a queue of scripted answers: a string (the message content), a dict
    ``{"status": 500}`` (an HTTP error), or ``{"sleep": seconds, "content": ...}``. When the
    queue is empty, ``default(request_json)`` answers. Every request body is kept in ``requests``.
    """

    def __init__(self, default: Callable[[dict], str] | None = None):
        self.replies: "queue.Queue[Any]" = queue.Queue()
        self.requests: list[dict] = []
        self.default = default or (lambda req: "{}")
        self.in_flight = self.max_in_flight = 0  # chat requests being answered at once
        self._flight = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                server.requests.append(body)
                if self.path.endswith("/embeddings"):
                    inputs = body.get("input") or []
                    inputs = [inputs] if isinstance(inputs, str) else inputs
                    vecs = FakeEmbedder(dim=16).embed(inputs, kind="passage")
                    self._send(200, {"object": "list", "model": body.get("model", "test"),
                                     "data": [{"object": "embedding", "index": i, "embedding": v.tolist()}
                                              for i, v in enumerate(vecs)],
                                     "usage": {"prompt_tokens": 5, "total_tokens": 5}})
                    return
                with server._flight:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._chat(body)
                finally:
                    with server._flight:
                        server.in_flight -= 1

            def _chat(self, body: dict) -> None:
                try:
                    reply = server.replies.get_nowait()
                except queue.Empty:
                    reply = server.default(body)
                if isinstance(reply, dict) and "sleep" in reply:
                    time.sleep(reply["sleep"])
                    reply = reply.get("content", "{}")
                if isinstance(reply, dict) and "status" in reply:
                    message = reply.get("message", "scripted failure")
                    self._send(reply["status"], {"error": {"message": message, "type": "server_error"}})
                    return
                content = reply if isinstance(reply, str) else json.dumps(reply)
                self._send(200, {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
                    "model": body.get("model", "test"),
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
                })

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):  # a client that timed out and left
                pass

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def llm_kwargs(self) -> dict:
        return {"api_base": self.url, "api_key": "sk-test"}

    def route(self, replies: dict[str, Any], default: str = "{}") -> None:
        """Answer each request by its system prompt (the constants in ``memsif_lite.prompts``);
        a reply may be a callable, asked anew for every request."""
        def reply(req: dict) -> Any:
            r = replies.get(req["messages"][0]["content"], default)
            return r() if callable(r) else r

        self.default = reply

    def script(self, *replies: Any) -> None:
        for r in replies:
            self.replies.put(r)

    def __enter__(self) -> "FakeLLMServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def file_at_schema(path: Path, version: int, dim: int, meta: dict[str, str]) -> apsw.Connection:
    """A memory file exactly as a release at schema ``version`` made it (migrations 1..version with
    their data steps); the open connection is returned for the caller to add rows and close."""
    from memsif_lite import store

    con = apsw.Connection(str(path))
    con.enable_load_extension(True)
    con.load_extension(sqlite_vec.loadable_path())
    for v, sql in store.migrations()[:version]:
        with store.write(con):
            con.execute(sql.replace("{dim}", str(dim)))
            if v in store.DATA_STEPS:
                store.DATA_STEPS[v](con, dim)
            if v == 1:
                con.execute(f"PRAGMA application_id={store.APPLICATION_ID}")
                store.set_meta(con, **meta)
            con.execute(f"PRAGMA user_version={v}")
    return con


def lives_in_reply(req: dict, title: str = "Moving") -> str:
    """A fake LLM whose replies follow from the prompt alone (so the order files are processed in,
    a task run twice or a merge's replay cannot change them): 'I live in X' / 'I moved to X' are
    facts of their speaker, a new place of someone who lived elsewhere supersedes it, the same
    place merges, and every message starts a new topic titled ``title``."""
    from memsif_lite import prompts

    system, user = req["messages"][0]["content"], req["messages"][-1]["content"]
    if system == prompts.EXTRACT_SYSTEM:
        found = re.findall(r"(\d+)\. \[[\d-]+\] (\w+): I (?:live in|moved to) (\w+)", user.split("excerpt", 1)[-1])
        return json.dumps({"facts": [{"subject": who, "type": "Identity", "stmt": f"{who} lives in {city}",
                                      "lines": [int(n)]} for n, who, city in found]})
    if system == prompts.OPERATION_SYSTEM:
        new = re.search(r"(\w+) \(\w+\): \w+ lives in (\w+)", user)
        for n, who, city in re.findall(r"(\d+)\. (\w+) lives in (\w+)", user):
            if new is not None and who == new.group(1):
                if city == new.group(2):
                    return json.dumps({"op": "merge", "target": int(n)})
                return json.dumps({"op": "supersede", "target": int(n), "stmt": f"{who} lives in {new.group(2)}"})
        return '{"op": "add", "target": null}'
    return {prompts.BOUNDARY_SYSTEM: '{"continues": false}', prompts.TRAJECTORY_SYSTEM: '{"compatible": []}',
            prompts.TITLE_SYSTEM: json.dumps({"title": title})}.get(system, "{}")


def _downgrade(path: Path, script: str) -> None:
    """Run one schema-undoing ``script`` (its own transaction) on the file at ``path``."""
    con = apsw.Connection(str(path))
    try:
        con.execute(script)
    finally:
        con.close()


def as_schema_21(path: Path) -> None:
    """Turn a file back into what schema 21 wrote (before sql/0022): each trajectory's entity counts
    one JSON object in its row (sorted, compact, as ``entity_json`` wrote them), no table of them."""
    _downgrade(path, "BEGIN; UPDATE trajectories SET entities = (SELECT coalesce(json_group_object(entity, n), '{}') "
                     "FROM trajectory_entities WHERE trajectory_id = trajectories.id); "
                     "DROP TABLE trajectory_entities; DROP TABLE trajectory_entity_totals; "
                     "PRAGMA user_version=21; COMMIT")


def as_schema_20(path: Path) -> None:
    """Turn a file back into what schema 20 wrote (before sql/0021 and sql/0022): no index of the
    current facts by statement or by slot."""
    as_schema_21(path)
    _downgrade(path, "BEGIN; DROP INDEX core_facts_current_stated; DROP INDEX core_facts_current_slot; "
                     "PRAGMA user_version=20; COMMIT")


def as_schema_19(path: Path) -> None:
    """Turn a file back into what schema 19 wrote (before sql/0020 and sql/0021): messages_known_at
    on the record time's text."""
    as_schema_20(path)
    _downgrade(path, "BEGIN; DROP INDEX messages_known_at; CREATE INDEX messages_known_at ON messages(known_at); "
                     "PRAGMA user_version=19; COMMIT")


def as_schema_18(path: Path, dim: int) -> None:
    """Turn a file back into what schema 18 wrote (before sql/0019 and sql/0020): every message's
    created_at whole, change_log_at and messages_known_at on the record time's text, segment and
    CoreFact vectors in chunks of 16."""
    as_schema_19(path)
    con = apsw.Connection(str(path))
    try:
        con.enable_load_extension(True)
        con.load_extension(sqlite_vec.loadable_path())
        con.execute("BEGIN")
        con.execute("UPDATE messages SET created_at=known_at WHERE created_at=''")
        con.execute("DROP INDEX change_log_at")
        con.execute("CREATE INDEX change_log_at ON change_log(at)")
        for t in ("segment_vec", "fact_vec"):
            rows = con.execute(f"SELECT rowid, embedding FROM {t} ORDER BY rowid").fetchall()
            con.execute(f"DROP TABLE {t}")
            con.execute(f"CREATE VIRTUAL TABLE {t} USING vec0(embedding int8[{dim}] distance_metric=cosine, "
                        "chunk_size=16)")
            for rid, v in rows:
                con.execute(f"INSERT INTO {t}(rowid, embedding) VALUES(?, vec_int8(?))", (rid, v))
        con.execute("PRAGMA user_version=18")
        con.execute("COMMIT")
    finally:
        con.close()
