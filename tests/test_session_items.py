"""Session items (``Memory.add_item`` / ``items``, sql/0014): JSON kept with a session that is not
chat — in order with its messages, never indexed, gone with the message it follows, carried by
export/import, left local by a merge."""

from __future__ import annotations

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakes import FakeEmbedder, file_at_schema, raw
from memsif_lite import InvalidInputError, Memory, MemoryFileError, Message, NotFoundError, SessionItem, store

CALL = {"type": "function_call", "call_id": "call_9", "name": "lookup_zebra", "arguments": "{\"q\": \"zebra\"}"}
OUTPUT = {"type": "function_call_output", "call_id": "call_9", "output": "quokkas sleep in zebra-striped tents"}


def _shape(entries: list[Message | SessionItem]) -> list:
    return [e.item if isinstance(e, SessionItem) else e.text for e in entries]


def _chat(mem: Memory) -> None:
    mem.add_item("s", {"type": "reasoning", "summary": []})  # before any message
    mem.add("Ana", "Where do I keep the tents?", at="2024-05-01T10:00:00", session="s")
    mem.add_item("s", CALL, at="2024-05-01T10:00:01")
    mem.add_item("s", OUTPUT)
    mem.add("Bot", "In the shed.", at="2024-05-01T10:00:02", session="s")
    mem.add("Ana", "Another chat.", at="2024-05-01T10:00:03", session="t")


def test_items_interleave_in_order_and_are_not_indexed(memory):
    mem = memory()
    _chat(mem)
    items = mem.items("s")
    assert _shape(items) == [{"type": "reasoning", "summary": []}, "Where do I keep the tents?", CALL, OUTPUT,
                             "In the shed."]
    assert str(items[2].at) == "2024-05-01 10:00:01" and items[2].session == "s"
    assert _shape(mem.items("t")) == ["Another chat."] and mem.items("nothing") == []
    assert len(mem.messages()) == 3
    assert all("zebra" not in r.text and "quokka" not in r.text for r in mem.search("zebra-striped tents quokkas"))
    context = mem.context("Where do quokkas sleep? zebra-striped tents").text
    assert "quokka" not in context and "zebra" not in context
    mem.process()
    assert all("quokka" not in f.stmt for f in mem.facts(include_superseded=True))


def test_forget_removes_an_item_and_the_items_after_a_forgotten_message(memory):
    mem = memory()
    _chat(mem)
    first = mem.items("s")[0]
    assert mem.forget(item_id=first.id) == [first.id]
    with pytest.raises(NotFoundError):
        mem.forget(item_id=first.id)
    last = mem.add_item("s", {"n": 1})
    mem.forget(item_id=last)
    assert mem.add_item("s", {"n": 2}) > last  # an id is never given again
    mem.forget(item_id=last + 1)
    ana = mem.items("s")[0]
    mem.forget(message_id=ana.id)  # the call and its output followed it: they go with it
    assert _shape(mem.items("s")) == ["In the shed."]
    with pytest.raises(InvalidInputError, match="exactly one"):
        mem.forget(item_id=1, message_id=1)


def test_a_tampered_item_is_named_not_trusted(memory, db):
    mem = memory()
    mem.add_item("s", CALL)
    con = apsw.Connection(str(db))
    con.execute("UPDATE session_items SET item='[1, 2'")
    con.close()
    with pytest.raises(MemoryFileError, match="session item 1"):
        mem.items("s")


@pytest.mark.parametrize("bad, why", [
    ([1, 2], "JSON object"), ("text", "JSON object"), ({"x": float("nan")}, "plain JSON"),
    ({1: "a"}, "plain JSON"), ({"t": (1, 2)}, "plain JSON"), ({"o": object()}, "plain JSON"),
    ({"s": "\ud800"}, "Unicode"), ({"big": "x" * 1_000_001}, "more than"),
])
def test_an_item_that_is_not_a_plain_json_object_is_refused(memory, bad, why):
    mem = memory()
    with pytest.raises(InvalidInputError, match=why):
        mem.add_item("s", bad)
    for session in ("", "x" * 201, None, True):
        with pytest.raises(InvalidInputError, match="session"):
            mem.add_item(session, {})  # type: ignore[arg-type]
    assert mem.items("s") == []


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.text(st.characters(exclude_categories=("Cs",)), max_size=20))


def _nested(inner: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4))


JSON = st.recursive(SCALARS, _nested, max_leaves=12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.dictionaries(st.text(max_size=8), JSON, max_size=5), min_size=1, max_size=4))
def test_any_json_object_comes_back_as_it_was_added(tmp_path_factory, items):
    with Memory(tmp_path_factory.mktemp("h") / "m.db", embedder=FakeEmbedder()) as mem:
        for item in items:
            mem.add_item("s", item)
        assert [e.item for e in mem.items("s")] == items


def test_export_and_import_carry_items(tmp_path, memory):
    mem = memory()
    _chat(mem)
    mem.export_to(tmp_path / "x.jsonl")
    with Memory(tmp_path / "copy.db", embedder=FakeEmbedder()) as copy:
        assert copy.import_from(tmp_path / "x.jsonl")["session_items"] == 3
        assert _shape(copy.items("s")) == _shape(mem.items("s"))
    lines = (tmp_path / "x.jsonl").read_text().splitlines()
    bad = [ln.replace('"item": "{', '"item": "[{', 1) if '"session_items"' in ln else ln for ln in lines]
    (tmp_path / "bad.jsonl").write_text("\n".join(bad) + "\n")
    with Memory(tmp_path / "other.db", embedder=FakeEmbedder()) as other:
        with pytest.raises(InvalidInputError, match="session_items.item"):
            other.import_from(tmp_path / "bad.jsonl")
        assert other.items("s") == [] and other.messages() == []


def test_a_merge_leaves_items_local_and_moves_them_with_their_message(tmp_path):
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    with Memory(a, embedder=FakeEmbedder()) as mem:
        mem.add("Ana", "Where do I keep the tents?", at="2024-05-01T10:00:00", session="s")
        mem.add("Ana", "And the poles?", at="2024-05-01T12:00:00", session="s")
        mem.add_item("s", CALL)
    with Memory(b, embedder=FakeEmbedder()) as mem:
        mem.add("Bo", "I kept them in the shed.", at="2024-05-01T11:00:00", session="s")
        mem.add_item("s", OUTPUT)
    with Memory(a, embedder=FakeEmbedder()) as mem:
        mem.merge_from(b)  # Bo's earlier message moves "And the poles?" to a new id
        assert _shape(mem.items("s")) == ["Where do I keep the tents?", "I kept them in the shed.", "And the poles?",
                                          CALL]
    with Memory(b, embedder=FakeEmbedder()) as mem:
        assert _shape(mem.items("s")) == ["I kept them in the shed.", OUTPUT]  # b is untouched


def test_a_schema_13_file_migrates(tmp_path, embedder):
    from memsif_lite.pipelines import initial_meta

    path = tmp_path / "old.db"
    con = file_at_schema(path, 13, embedder.dim, initial_meta(embedder))
    with store.write(con):
        con.execute("INSERT INTO messages(id, speaker, text, at, session, source_id, content_hash, created_at, "
                    "known_at) VALUES(1, 'Ana', 'I live in Lisbon.', '2024-01-10T09:00:00', 's', NULL, x'00', "
                    "'2025-05-05T10:00:00', '2025-05-05T10:00:00')")
    con.close()
    with Memory(path, embedder=embedder, read_only=True) as mem:  # read as it is: no items yet
        assert _shape(mem.items("s")) == ["I live in Lisbon."]
    with Memory(path, embedder=embedder) as mem:
        mem.add_item("s", CALL)
        assert _shape(mem.items("s")) == ["I live in Lisbon.", CALL]
    with raw(path) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == store.latest_version() >= 14
