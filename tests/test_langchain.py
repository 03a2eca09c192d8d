"""The LangChain adapter against the real langchain-core: the chat history's documented contract,
and the retriever through langchain-tests' standard retriever suite and its metadata."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_core")

from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import (AIMessage, HumanMessage, SystemMessage, ToolMessage)  # noqa: E402

from memsif_lite import InvalidInputError, Memory  # noqa: E402
from memsif_lite.integrations import Speakers  # noqa: E402
from memsif_lite.integrations.langchain import MemsifChatMessageHistory, MemsifRetriever  # noqa: E402

CHAT = [("Maya", "I live in Lisbon, near the castle.", "2024-01-10T09:00:00", "1"),
        ("Leo", "Lisbon is lovely in spring.", "2024-01-10T09:01:00", "1"),
        ("Maya", "I moved to Porto! I signed the lease last week.", "2024-03-16T20:31:00", "2"),
        ("Leo", "Congrats on Porto! When do you move?", "2024-03-16T20:32:00", "2"),
        ("Maya", "Porto has great bookshops, I go every weekend.", "2024-03-17T10:00:00", "2"),
        ("Leo", "See you at the housewarming in Porto on Saturday!", "2024-03-20T18:00:00", "3")]


@pytest.fixture(scope="module")
def chat_file(tmp_path_factory, embedder):
    path = tmp_path_factory.mktemp("lc") / "chat.db"
    with Memory(path, embedder=embedder) as mem:
        mem.add_many([dict(speaker=s, text=t, at=a, session=n) for s, t, a, n in CHAT])
    return path


def test_history_contract(tmp_path, fake_embedder):
    with Memory(tmp_path / "h.db", embedder=fake_embedder) as mem:
        h = MemsifChatMessageHistory(mem, "s1", speakers=Speakers(user="Ana", assistant="Bot"))
        other = MemsifChatMessageHistory(mem, "s2")
        assert h.messages == []
        h.add_user_message("hi")
        h.add_ai_message("hello")
        h.add_messages([SystemMessage("be brief"), AIMessage("", tool_calls=[{"name": "f", "args": {}, "id": "1"}]),
                        ToolMessage("{}", tool_call_id="1"),
                        HumanMessage(content=[{"type": "text", "text": "hi"}, {"type": "image", "url": "x"}])])
        other.add_user_message("elsewhere")
        h.add_messages([AIMessage("let me look", tool_calls=[{"name": "g", "args": {"q": "x"}, "id": "2"}]),
                        ToolMessage("found it", tool_call_id="2")])
        got = h.messages
        assert [type(m) for m in got] == [HumanMessage, AIMessage, SystemMessage, AIMessage, ToolMessage, HumanMessage,
                                          AIMessage, ToolMessage]
        assert [m.content for m in got] == ["hi", "hello", "be brief", "", "{}", "hi", "let me look", "found it"]
        # tool calls and tool messages are kept in order, as data: not stored as things someone said
        assert [c["id"] for c in got[3].tool_calls] == ["1"] and got[4].tool_call_id == "1"
        assert got[6].tool_calls[0]["args"] == {"q": "x"} and got[7].tool_call_id == "2"
        assert [m.speaker for m in mem.messages(sessions=["s1"])] == ["Ana", "Bot", "system", "Ana", "Bot"]
        h.clear()
        assert h.messages == [] and [m.content for m in other.messages] == ["elsewhere"]
        with pytest.raises(InvalidInputError):
            h.add_messages(["not a message"])  # type: ignore[list-item]


def test_retriever_documents_carry_their_provenance(chat_file, embedder):
    with Memory(chat_file, embedder=embedder) as mem:
        docs = MemsifRetriever(memory=mem, k=10).invoke("Where does Maya live?")
        assert docs and all(isinstance(d, Document) for d in docs)
        kinds = [d.metadata["kind"] for d in docs]
        assert kinds == sorted(kinds, key=lambda k: k != "fact")  # facts first, then evidence
        segments = {s.id: s for s in mem.segments()}
        by_id = {m.id: m for m in mem.messages()}
        evidence = [d for d in docs if d.metadata["kind"] == "evidence"]
        assert any("Porto" in d.page_content for d in evidence)
        for d in evidence:
            md = d.metadata
            first = by_id[md["message_ids"][0]]
            assert md["speaker"] == first.speaker and md["session"] == first.session
            assert md["time"].startswith(first.at.isoformat()[:16])
            assert md["segment_ids"] and all(set(segments[s].message_ids) & set(md["message_ids"])
                                             for s in md["segment_ids"])
            assert md["trajectory_ids"] == sorted({segments[s].trajectory_id for s in md["segment_ids"]} - {None})
        for d in docs:
            if d.metadata["kind"] == "fact":
                assert d.metadata["fact_ids"] and d.metadata["subject"]
        assert len(MemsifRetriever(memory=mem, k=10).invoke("Where does Maya live?", k=2)) == 2
        with pytest.raises(InvalidInputError):
            MemsifRetriever(memory=mem).invoke("Where does Maya live?", k=0)


standard = pytest.importorskip("langchain_tests.integration_tests")


# its async test needs pytest-asyncio (a langchain-tests dependency) to mark it; the mark reaches the sync ones too
@pytest.mark.asyncio
@pytest.mark.filterwarnings("ignore:.*is marked with '@pytest.mark.asyncio' but it is not an async function")
class TestMemsifRetrieverStandard(standard.RetrieversIntegrationTests):
    """langchain-tests' own suite for retrievers."""

    @pytest.fixture(autouse=True)
    def _file(self, chat_file, embedder):
        self._mem = Memory(chat_file, embedder=embedder, read_only=True)
        yield
        self._mem.close()

    @property
    def retriever_constructor(self):
        return MemsifRetriever

    @property
    def retriever_constructor_params(self):
        return {"memory": self._mem}

    @property
    def retriever_query_example(self):
        return "Where does Maya live now that she moved?"

