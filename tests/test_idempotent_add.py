"""Issue 23.3: a retried add stores nothing twice. ``Memory.add(skip_existing=True)`` and
``Memory.remember`` use ingest's rule (the same source_id and speaker, else the same speaker, time
and text); a message given without a time is stored at "now", so a retry of it is found by the same
speaker, text and session stored by an earlier call within ``RETRY_WINDOW``. The MCP ``remember``
tool and ``memsif add`` always skip, and say whether each message was new."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from fakes import raw
from memsif_lite.cli import main
from memsif_lite.ingest import RETRY_WINDOW
from memsif_lite.types import Added


def _count(db) -> int:
    with raw(db) as con:
        return con.execute("SELECT count(*) FROM messages").fetchone()[0]


def test_add_with_skip_existing_returns_the_stored_id(memory, db):
    mem = memory()
    first = mem.add("Ana", "I keep bees", at="2024-05-01T10:00:00", skip_existing=True)
    assert mem.add("Ana", "I keep bees", at="2024-05-01T10:00:00", skip_existing=True) == first
    x = mem.add("Ana", "x", source_id="m-1")
    assert mem.add("Ana", "y", source_id="m-1", skip_existing=True) == x
    assert _count(db) == 2  # the bees once, "x" once: "y" has x's source id, so it is x
    assert mem.add("Ana", "I keep bees", at="2024-05-01T10:00:00") != first  # the default stores it again
    assert _count(db) == 3


def test_remember_says_whether_each_message_was_new(memory, db):
    mem = memory()
    batch = [{"speaker": "Ana", "text": "I keep bees", "at": "2024-05-01T10:00:00"},
             {"speaker": "Ben", "text": "hello", "source_id": "b-1"}]
    first = mem.remember(batch)
    assert [a.new for a in first] == [True, True] and all(isinstance(a, Added) for a in first)
    again = mem.remember([*batch, {"speaker": "Ana", "text": "and a cat", "at": "2024-05-01T10:01:00"}])
    assert [a.new for a in again] == [False, False, True]
    assert [a.id for a in again[:2]] == [a.id for a in first]
    assert _count(db) == 3
    assert [m.text for m in mem.messages()] == ["I keep bees", "hello", "and a cat"]


def test_a_retry_without_a_time_is_the_same_message(memory, db):
    mem = memory()
    one = {"speaker": "Ana", "text": "ok", "session": "s1"}
    first = mem.remember([one])[0]
    assert mem.remember([one]) == [Added(first.id, False)]                    # the retry: a second later
    assert mem.add("Ana", "ok", session="s1", skip_existing=True) == first.id
    assert mem.remember([{**one, "session": "s2"}])[0].new                    # another session: new
    assert mem.add("Ana", "ok", session="s1") != first.id                     # without skip_existing: stored
    assert _count(db) == 3


def test_repeats_within_one_call_and_old_messages_are_kept(memory, db):
    mem = memory()
    got = mem.remember([{"speaker": "Ana", "text": "ok"}, {"speaker": "Ben", "text": "sure?"},
                        {"speaker": "Ana", "text": "ok"}])
    assert [a.new for a in got] == [True, True, True]                       # said twice, stored twice
    old = (datetime.now(timezone.utc) - RETRY_WINDOW - timedelta(minutes=1)).replace(tzinfo=None)
    mem.add("Cy", "yes", at=old)
    assert mem.remember([{"speaker": "Cy", "text": "yes"}])[0].new          # said again, later: new
    assert _count(db) == 5


def test_memsif_add_twice_adds_once(tmp_path):
    db = tmp_path / "m.db"
    runner = CliRunner()
    args = ["add", "Ana", "I keep bees", "--at", "2024-05-01T10:00:00", "--db", str(db)]
    r1 = runner.invoke(main, [*args, "--json"])
    r2 = runner.invoke(main, [*args, "--json"])
    assert r1.exit_code == 0 and r2.exit_code == 0, (r1.output, r2.output)
    d1, d2 = json.loads(r1.stdout), json.loads(r2.stdout)
    assert (d1["id"], d1["new"]) == (1, True) and (d2["id"], d2["new"]) == (1, False)
    r3 = runner.invoke(main, ["add", "Ana", "hello there", "--db", str(db)])
    r4 = runner.invoke(main, ["add", "Ana", "hello there", "--db", str(db)])
    assert r3.stdout.startswith("added message 2") and r4.stdout.startswith("already present: message 2"), r4.output
    assert _count(db) == 2


@pytest.mark.slow
def test_mcp_remember_retried_is_stored_once(tmp_path):
    pytest.importorskip("mcp", reason="the MCP SDK comes with the test extra")
    from test_mcp import payload, session

    db = tmp_path / "assistant.db"
    msg = {"speaker": "Ana", "text": "My sister Lea moved to Porto"}

    async def script(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        first = payload(await client.call_tool("remember", {"messages": [msg]}))
        retry = payload(await client.call_tool("remember", {"messages": [msg]}))
        ctx = payload(await client.call_tool("context", {"question": "Where did Lea move?"}))
        return tools["remember"], first, retry, ctx

    tool, first, retry, ctx = session(["--db", str(db)], script)
    assert tool.annotations.idempotent_hint is True
    assert first == {"stored": 1, "message_ids": [1], "new": [True]}
    assert retry == {"stored": 0, "message_ids": [1], "new": [False]}
    assert ctx["context"].count("moved to Porto") == 1
    assert _count(db) == 1
