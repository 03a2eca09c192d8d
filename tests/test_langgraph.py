"""The LangGraph store against the real langgraph: put/get/search/delete/list_namespaces through the
BaseStore API, namespaces kept apart in their own files, and the store inside a small graph."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

pytest.importorskip("langgraph")

from langgraph.store.base import GetOp, InvalidNamespaceError  # noqa: E402

from memsif_lite import InvalidInputError, Memory  # noqa: E402
from memsif_lite.integrations.langgraph import MemsifStore  # noqa: E402


@pytest.fixture
def store(tmp_path, embedder):
    with MemsifStore(home=tmp_path, embedder=embedder) as s:
        yield s


def test_put_get_search_delete(store, tmp_path, embedder):
    store.put(("alice",), "food", {"text": "Alice is vegetarian and loves lentil soup", "kind": "diet", "n": 3})
    store.put(("alice",), "pet", {"text": "Alice has a cat called Mochi", "kind": "pet", "n": 1})
    store.put(("alice",), "city", {"text": "Alice lives in Porto", "kind": "home", "n": 2, "note": "ünïcode ✓"})
    item = store.get(("alice",), "city")
    assert item is not None and item.value == {"text": "Alice lives in Porto", "kind": "home", "n": 2,
                                               "note": "ünïcode ✓"}
    assert item.key == "city" and item.namespace == ("alice",) and item.created_at.tzinfo is not None
    assert store.get(("alice",), "nothing") is None and store.get(("nobody",), "city") is None
    assert not (tmp_path / "users" / "nobody.db").exists()  # reading never creates a file

    hits = store.search(("alice",), query="what pet does she have?", limit=2)
    assert hits[0].key == "pet" and hits[0].score is not None and len(hits) == 2
    assert [h.key for h in store.search(("alice",))] == ["food", "pet", "city"]  # no query: oldest first
    assert [h.key for h in store.search(("alice",), filter={"kind": "diet"})] == ["food"]
    assert [h.key for h in store.search(("alice",), filter={"n": {"$gte": 2}})] == ["food", "city"]
    assert [h.key for h in store.search(("alice",), query="soup", filter={"n": {"$lt": 2}})] == ["pet"]
    assert [h.key for h in store.search(("alice",), limit=1, offset=1)] == ["pet"]

    store.put(("alice",), "city", {"text": "Alice moved to Lisbon"})  # replaces the value
    assert store.get(("alice",), "city").value == {"text": "Alice moved to Lisbon"}
    assert [h.key for h in store.search(("alice",), query="Lisbon")].count("city") == 1
    store.delete(("alice",), "city")
    assert store.get(("alice",), "city") is None
    store.delete(("alice",), "city")  # deleting what is not there is a no-op
    path = tmp_path / "users" / "alice.db"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with Memory(path, embedder=embedder, read_only=True) as mem:  # the items are messages of the user's file
        assert sorted(m.source_id for m in mem.messages(sessions=["langgraph"])) == ["food", "pet"]
    with Memory(path, embedder=embedder) as mem:  # a message of the session that is not an item is skipped
        mem.add("someone", "not JSON", session="langgraph", source_id="odd")
    assert store.get(("alice",), "odd") is None and [h.key for h in store.search(("alice",))] == ["food", "pet"]


def test_namespaces_are_isolated_files_chosen_only_by_valid_names(store, tmp_path):
    store.put(("alice",), "k", {"text": "Alice likes tea"})
    store.put(("bob",), "k", {"text": "Bob likes coffee"})
    store.put(("alice", "coder"), "k", {"text": "the coder agent prefers tabs"})
    assert store.get(("bob",), "k").value == {"text": "Bob likes coffee"}
    assert [h.value["text"] for h in store.search(("bob",), query="tea")] == ["Bob likes coffee"]
    assert {h.namespace for h in store.search(("alice",), query="likes")} == {("alice",), ("alice", "coder")}
    assert store.list_namespaces() == [("alice",), ("alice", "coder"), ("bob",)]
    assert store.list_namespaces(prefix=("alice",)) == [("alice",), ("alice", "coder")]
    assert store.list_namespaces(suffix=("coder",)) == [("alice", "coder")]
    assert store.list_namespaces(max_depth=1) == [("alice",), ("bob",)]
    store.delete(("bob",), "k")
    assert store.list_namespaces() == [("alice",), ("alice", "coder")]
    assert (tmp_path / "users" / "alice" / "coder.db").exists()
    for bad in [("..",), ("a/b",), ("Alice",), ("a", "b", "c"), ("/etc",), ("con",), ("x", "")]:
        with pytest.raises(InvalidNamespaceError):
            store.put(bad, "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.batch([GetOp(("..", "x"), "k")])  # ops given to batch directly are checked too
    made = sorted(p.name for p in (tmp_path / "users").iterdir() if not p.name.endswith(("-wal", "-shm")))
    assert made == ["alice", "alice.db", "bob.db"]
    for bad_value in [["not", "a", "dict"], {"x": float("nan")}, {"x": object()}]:
        with pytest.raises(InvalidInputError):
            store.put(("alice",), "k2", bad_value)
    assert store.get(("alice",), "k").value == {"text": "Alice likes tea"}  # nothing stored was lost


def test_async_and_inside_a_graph(store):
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    asyncio.run(store.aput(("maya",), "home", {"text": "Maya lives in Porto"}))
    assert asyncio.run(store.aget(("maya",), "home")).value == {"text": "Maya lives in Porto"}

    class State(TypedDict):
        question: str
        answer: str

    def recall(state: State, runtime: Runtime) -> dict:
        hits = runtime.store.search(("maya",), query=state["question"], limit=1)
        runtime.store.put(("maya",), "asked", {"text": state["question"]})
        return {"answer": hits[0].value["text"] if hits else ""}

    graph = StateGraph(State)
    graph.add_node("recall", recall)
    graph.add_edge(START, "recall")
    graph.add_edge("recall", END)
    out = graph.compile(store=store).invoke({"question": "Where does Maya live?", "answer": ""})
    assert out["answer"] == "Maya lives in Porto"
    assert store.get(("maya",), "asked").value == {"text": "Where does Maya live?"}
